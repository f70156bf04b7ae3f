"""A host's lineage shipper: ships what this host's lineage files hold and no server has yet, every few
seconds, as a log forwarder does (``delivery.ship``: in order, each record once, a server that is down
costs nothing). Tasks and steps ship at their ends too; this ships what they left (a record written
after a task's last shipping, a receiver that was down), so nothing waits for the next task.

    python -m nyc_taxi.lineage.write.shipper [--every SECONDS]   (STATE_DIR: the host's state)
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time

from nyc_taxi.core.settings import get_settings
from nyc_taxi.core.team import LineageReceiver
from nyc_taxi.lineage.write.delivery import Shipment, ShipResult, ship
from nyc_taxi.lineage.write.outbox import replace_file

log = logging.getLogger("nyc_taxi.lineage.shipper")


def write_round(settings, result) -> None:
    """Its last round, for `team status` (``team.LineageReceiver.shipper_round``)."""
    shipments = [{"url": s.url, "sent": s.sent, "pending": s.pending, "error": s.error} for s in result.shipments]
    path = LineageReceiver(settings).shipper_round()
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps({"ended": time.time(), "shipments": shipments}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=5.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings, stop = get_settings(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    said = None
    while True:
        try:
            result = ship(settings, budget_seconds=args.every)
        except Exception as error:  # a file it cannot read: said, and tried again next round, not a crash loop
            result = ShipResult([Shipment("(all)", "(every server)", error=f"{type(error).__name__}: {error}"[:300])])
        write_round(settings, result)
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
