"""`bash run bench team`: what the team deployment costs against the local profile, and what the network
between hosts costs against one machine, in one run: `bash run demo` under each (each in a throw-away
state directory), then one new month under each — its taxi and weather DAG runs and the training run
after them, up to the forecasts.

- local: `dag.test()` runs in one process, Spark in local mode attached to one warm driver, SQLite
  under Airflow and the Iceberg catalog, the lake on disk;
- team: PostgreSQL, Redis, SeaweedFS, a Spark standalone cluster and Airflow on the CeleryExecutor
  under supervisord (`bash run team up` inside the demo's time); the runs are triggered through the
  REST API and the scheduler
  starts the training run from the merge's asset event; every task and step is a Spark application
  of its own on the cluster;
- hosts: the same deployment on the hosts of deployment/hosts.toml (`demo --hosts`: network namespaces
  of this machine joined by a bridge, every program on its host's address, Spark's and SeaweedFS's
  traffic authenticated, the lineage shipped to control's receiver), the new month's runs started on
  control as the demo's are. The same two cores run it: the figure is what the network path costs
  (addresses instead of loopback, TLS and tokens, the shipping), not what more machines would buy.

Printed: each row's seconds and the ratios team / local and hosts / team. No target: the team profile
trades single-machine speed for what a deployment needs (many writers, workers that can be lost, a
shared catalog and storage), the hosts layout for what many machines need; the figures say what that
costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW_MONTH = (2024, 3)  # the month after the demo's two


def _environment(state: Path, profile: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OPENLINEAGE"))}
    return env | {"STATE_DIR": str(state), "PROFILE": profile}


def _timed(command: list[str], env: dict[str, str], log: Path) -> float:
    started = time.perf_counter()
    with log.open("a") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: see {log}")
    return time.perf_counter() - started


def _published(site: Path) -> list[str]:
    """The new month's taxi and weather files added to the demo's site; its two ingestion runs (dag_runs'
    `<dag>:<conf>` arguments)."""
    from nyc_taxi.core import jobs
    from nyc_taxi_proving.cli.demo import ROWS
    from nyc_taxi_proving.fixtures.site import add_taxi_month, add_weather_month

    year, month = NEW_MONTH
    add_taxi_month(site, year, month, rows=ROWS, seed=month)
    add_weather_month(site, year, month, seed=month)
    label = f'{{"month": "{year:04d}-{month:02d}"}}'
    return [f"{jobs.INGEST_YELLOW_TAXI_DATA.name}:{label}", f"{jobs.INGEST_WEATHER_DATA.name}:{label}"]


def _new_month(state: Path, profile: str, env: dict[str, str], log: Path) -> float:
    """The month's two ingestion runs and the training run after them, on the demo's lake."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core import jobs
    from nyc_taxi.core.settings import Settings, state_settings_file
    from nyc_taxi_proving.fixtures.server import FixtureServer

    year, month = NEW_MONTH
    site = state / "demo-site"
    runs = _published(site)
    with FixtureServer(site) as url:
        settings = Settings(state_dir=state, profile=profile)
        env = env | {"TLC_BASE_URL": url, "NOAA_BASE_URL": url, **airflow_environment(settings)}
        if profile == "team":  # the deployment's tasks read the sources from the state's settings file
            state_settings_file(state).write_text(f"TLC_BASE_URL={url}\nNOAA_BASE_URL={url}\n")
        else:  # the scheduler starts it on the team profile; here it runs after the merges
            as_of = f'{{"as_of_datetime": "{year:04d}-{month + 1:02d}-01T00:00"}}'
            runs.append(f"{jobs.TRAIN_FORECAST_MODEL.name}:{as_of}")
        try:
            return _timed([sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *runs], env, log)
        finally:
            state_settings_file(state).unlink(missing_ok=True)


def _new_month_across_hosts(state: Path) -> float:
    """The month's two ingestion runs and the training the merge starts, triggered on control as the
    demo's are: as the operator (re-run in control's network), the demo's site with the new month served
    on control's address, each host given its URL; the runs timed on control."""
    from nyc_taxi.airflow_adapter.environment import airflow_environment
    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.deployment import across_hosts, services
    from nyc_taxi_proving.deployment.hosts import Network
    from nyc_taxi_proving.fixtures.server import served_to_hosts

    settings = services.team_settings(Settings(_env_file=None, state_dir=state, profile="team"))
    result = state / "new-month-across-hosts.json"
    operator = across_hosts.in_control(
        settings, ["--month-across-hosts", str(state)], False, "nyc_taxi_proving.bench.team"
    )
    if operator is not None:
        if operator != 0:
            raise SystemExit("the new month across hosts failed (its output is above)")
        return json.loads(result.read_text())["seconds"]
    network = Network(settings)
    control = across_hosts.host_settings(settings, network, across_hosts.CONTROL)
    site = network.directory(across_hosts.CONTROL) / "demo-site"  # the demo's, its months published there
    runs = _published(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
    env.pop(across_hosts.OPERATOR, None)
    env |= {"AIRFLOW_PORT": str(settings.airflow_port), **airflow_environment(control)}
    with served_to_hosts(network, site):
        command = network.command(
            across_hosts.CONTROL, [sys.executable, "-m", "nyc_taxi.airflow_adapter.dag_runs", *runs]
        )
        started = time.perf_counter()
        done = subprocess.run(command, env=env)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the new month's runs on control failed ({done.returncode})")
    result.write_text(json.dumps({"seconds": seconds}))
    return seconds


def measure(profile: str, work: Path) -> dict:
    from nyc_taxi.core.processes import free_port

    state = work / profile
    env, log = _environment(state, "team" if profile == "hosts" else profile), work / f"{profile}.log"
    demo = [sys.executable, "-m", "nyc_taxi_proving.cli.demo", "--images", str(work / "images")]
    if profile == "hosts":  # the deployment's API server on a port of its own; its sources each host's own
        env = {k: v for k, v in env.items() if not k.endswith("_BASE_URL")} | {"AIRFLOW_PORT": str(free_port())}
        demo.append("--hosts")
    print(f"... {profile}: the demo (log: {log})", flush=True)
    try:
        demo_s = _timed(demo, env, log)
        print(f"... {profile}: one new month", flush=True)
        if profile == "hosts":
            # the operator times the runs on control alone, as _new_month times them here
            _timed([sys.executable, "-m", "nyc_taxi_proving.bench.team", "--month-across-hosts", str(state)], env, log)
            month = json.loads((state / "new-month-across-hosts.json").read_text())["seconds"]
        else:
            month = _new_month(state, profile, env, log)
    finally:
        if profile in ("team", "hosts"):
            subprocess.run(
                [sys.executable, "-m", "nyc_taxi_proving.cli.team", "down", "--delete-data"], env=env, check=False
            )
    return {"profile": profile, "demo_s": round(demo_s, 1), "new_month_s": round(month, 1)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="bash run bench team", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the state directories (their paths are printed)")
    parser.add_argument(
        "--profiles",
        default="local,team,hosts",
        help="which to run, in order (default local,team,hosts: team/local and hosts/team; hosts takes root)",
    )
    parser.add_argument("--month-across-hosts", type=Path, help=argparse.SUPPRESS)  # the operator's part
    args = parser.parse_args(argv)
    if args.month_across_hosts:
        _new_month_across_hosts(args.month_across_hosts)
        return []
    profiles = args.profiles.split(",")
    if unknown := set(profiles) - {"local", "team", "hosts"}:
        parser.error(f"--profiles: {', '.join(sorted(unknown))}: local, team or hosts")
    if "hosts" in profiles and os.geteuid() != 0:  # before the others' half hour, not after it
        parser.error("the hosts layout takes root (network namespaces): run as root, or --profiles local,team")
    work = Path(tempfile.mkdtemp(prefix="bench-team-"))
    try:
        results = {profile: measure(profile, work) for profile in profiles}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")
    ratios = [(b, a) for a, b in (("local", "team"), ("team", "hosts")) if a in results and b in results]
    print(f"\nthe profiles against each other (bash run bench team, {os.cpu_count()} cores)")
    print(f"{'':<44}" + "".join(f"{p + ' s':>9}" for p in results) + "".join(f"{f'{b}/{a}':>12}" for b, a in ratios))
    for key, what in (("demo_s", "bash run demo"), ("new_month_s", "one new month: taxi, weather, training")):
        figures = "".join(f"{r[key]:>9.1f}" for r in results.values())
        print(f"{what:<44}{figures}" + "".join(f"{results[b][key] / results[a][key]:>12.2f}" for b, a in ratios))
    print(json.dumps(list(results.values())))
    return list(results.values())


if __name__ == "__main__":
    main()
