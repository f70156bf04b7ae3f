"""`bash run fixtures 2024-01 2024-02 [--rows N]`: fixture months of both sources, served on 127.0.0.1 for
this state directory until Ctrl-C.

It generates the months' TLC trip file and NOAA county files (seeded stand-ins of the real formats,
docs/sources.md) under <state>/fixtures/, serves them the way the real sites answer, and sets
TLC_BASE_URL and NOAA_BASE_URL in the state directory's settings file (<state>/settings.env), which every
task and step reads when it starts: a running Airflow fetches from here from its next task on, with no
restart. Stopping it takes the two settings out again, so nothing points at a server that is gone.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading

from nyc_taxi.core.settings import get_settings, state_settings_file
from nyc_taxi_proving.fixtures.server import FixtureServer
from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
SOURCES = ("TLC_BASE_URL", "NOAA_BASE_URL")


def _month(text: str) -> tuple[int, int]:
    found = MONTH.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month YYYY-MM (e.g. 2024-01)")
    return int(found[1]), int(found[2])


def _set_sources(path, url: str | None) -> None:
    """The settings file without the sources' lines, then with them pointing at ``url`` (None: removed)."""
    kept = [
        line for line in (path.read_text().splitlines() if path.is_file() else []) if line.split("=")[0] not in SOURCES
    ]
    lines = kept + ([f"{name}={url}" for name in SOURCES] if url else [])
    if lines:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    else:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run fixtures", description=__doc__.split("\n\n")[0])
    parser.add_argument("months", nargs="+", type=_month, metavar="YYYY-MM", help="the months to publish")
    parser.add_argument("--rows", type=int, default=200_000, help="trips per taxi month (a real month: 3-4 million)")
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    settings = get_settings()
    site = settings.state_dir / "fixtures" / "site"
    for year, month in args.months:
        add_taxi_month(site, year, month, rows=args.rows, seed=month)
        add_weather_month(site, year, month, seed=month)
    settings_file = state_settings_file(settings.state_dir)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with FixtureServer(site, port=args.port) as url:
        _set_sources(settings_file, url)
        months = ", ".join(f"{y:04d}-{m:02d}" for y, m in args.months)
        print(f"serving {months} at {url} ({args.rows:,} trips a taxi month), for the tasks of {settings.state_dir}")
        print(f"TLC_BASE_URL and NOAA_BASE_URL are set in {settings_file} until this stops (Ctrl-C)", flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass
        finally:
            _set_sources(settings_file, None)
    print("stopped; the sources are the settings' again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
