"""A host's lineage shipper: ships what this host's lineage files hold and no server has yet, every few
seconds, as a log forwarder does (``delivery.ship``: in order, each record once, a server that is down
costs nothing). Tasks and steps ship at their ends too; this ships what they left (a record written
after a task's last shipping, a receiver that was down), so nothing waits for the next task.

    python -m nyc_taxi.lineage.write.shipper [--every SECONDS]   (STATE_DIR: the host's state)
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from nyc_taxi.core.settings import get_settings
from nyc_taxi.lineage.write.delivery import ship

log = logging.getLogger("nyc_taxi.lineage.shipper")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=5.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings, stop = get_settings(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    said = None
    while True:
        result = ship(settings, budget_seconds=args.every)
        state = [(s.url, s.error) for s in result.shipments if s.error]
        if result.sent or state != said:  # what changed, not every round
            for shipment in result.shipments:
                log.info(
                    "%s: %d sent, %d pending%s",
                    shipment.url,
                    shipment.sent,
                    shipment.pending,
                    f" ({shipment.error})" if shipment.error else "",
                )
            said = state
        if stop.is_set():  # a last round after SIGTERM: what the host's last task wrote
            return
        stop.wait(args.every)


if __name__ == "__main__":
    sys.exit(main())
