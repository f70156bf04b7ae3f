"""`bash run spark-server start|stop|status`: one warm Spark driver for every task and step of this
state directory (``nyc_taxi/core/spark_server.py``). ``serve`` runs it in the foreground."""

from __future__ import annotations

import argparse
import logging
import sys

from nyc_taxi.core import spark_server
from nyc_taxi.core.settings import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run spark-server", description=__doc__)
    parser.add_argument("action", choices=["start", "stop", "status", "serve"])
    args = parser.parse_args(argv)
    settings = get_settings()
    if args.action == "serve":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        spark_server.serve(settings)
    elif args.action == "start":
        spark_server.start(settings)
        print(f"{spark_server.status(settings)}; tasks and steps with STATE_DIR={settings.state_dir} attach to it")
        print(f"log: {spark_server.log_path(settings)}; stop it with: bash run spark-server stop")
    elif args.action == "stop":
        print("Spark server stopped" if spark_server.stop(settings) else spark_server.status(settings))
    else:
        print(spark_server.status(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
