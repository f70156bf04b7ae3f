"""What a chaos run reads of the deployment once its mission is over: the lineage the server received, its
delivery against the outbox (each record once, or sent again only where a fault held its answer), and what is
left running or queued."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

from nyc_taxi.core.settings import Settings
from nyc_taxi_proving.chaos import check
from nyc_taxi_proving.fixtures.lineage_server import OPENLINEAGE_PATH, LineageServer, datahub_identity


def received_lineage(server: LineageServer, state: Path) -> tuple[set, set]:
    """The lineage edges of the mission's runs, as the lineage server received their events."""
    events = [request["body"] for request in server.stored(OPENLINEAGE_PATH)]
    return check.lineage_edges(mission_events(events), check.VersionResolver(state))


def mission_events(events: list[dict]) -> list[dict]:
    """The events of the mission's runs: the scheduler's own runs for the current period (run type
    scheduled, in the Airflow facet of the run) left out."""

    def run_type(event: dict) -> str | None:
        facets = event.get("run", {}).get("facets") or {}
        airflow = facets.get("airflow") or facets.get("airflowDagRun") or {}
        return (airflow.get("dagRun") or {}).get("run_type")

    return [e for e in events if run_type(e) != "scheduled"]


def delivery_of(settings: Settings, server: LineageServer, unanswered: list[str]) -> dict:
    """Every event of a successful run of the outbox stored by the server once per (run, event type), every
    DataHub record of the outbox stored, and no record accepted twice but those ``unanswered`` (by
    check.record_key), once each: stored while the shipper moment held their answers, whose senders
    never heard back (killed, or gone first) and sent them again."""
    from nyc_taxi.lineage.write.delivery import OpenLineageServer
    from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH

    local = OpenLineageServer(settings)
    events = [e for path in local.files() for e in local.read(path)]
    delivered = check.delivery(events, server.stored(OPENLINEAGE_PATH))
    again = check.sent_again(
        [check.record_key(OPENLINEAGE_PATH, r["body"]) for r in server.accepted(OPENLINEAGE_PATH)],
        [check.record_key(OPENLINEAGE_PATH, e) for e in events],
    ) + check.sent_again(
        [check.record_key(DATAHUB_INGEST_PATH, r["body"]) for r in server.accepted(DATAHUB_INGEST_PATH)],
        datahub_outbox(settings),
    )
    unexplained = sorted((Counter(again) - Counter(unanswered)).elements())  # each held record once
    delivered |= {"datahub records missing": datahub_missing(settings, server), "sent again": len(again)}
    delivered["sent again unexplained"] = unexplained
    delivered["once"] = (
        not delivered["missing"]
        and not delivered["twice"]
        and not delivered["datahub records missing"]
        and not unexplained
    )
    return delivered


def datahub_outbox(settings: Settings) -> list[str]:
    """The DataHub records of the outbox, each as often as it is there."""
    from nyc_taxi.lineage.write.delivery import DataHubServer

    local = DataHubServer(settings)
    return [datahub_identity(r) for path in local.files() for r in local.read(path)]


def datahub_missing(settings: Settings, server: LineageServer) -> int:
    """DataHub records of the outbox the server does not hold (by entity, aspect and value)."""
    from nyc_taxi_proving.fixtures.lineage_server import DATAHUB_INGEST_PATH

    stored = {datahub_identity(request["body"]["proposal"]) for request in server.stored(DATAHUB_INGEST_PATH)}
    return len(set(datahub_outbox(settings)) - stored)


def leftovers(settings: Settings, env: dict[str, str]) -> list[str]:
    """What is left running or queued once the mission is over: DAG runs and task instances queued or
    running, messages in the broker, processes of the deployment outside supervisord's programs."""
    import psutil
    import redis

    from nyc_taxi.airflow_adapter.rest_api import RestApi
    from nyc_taxi.core import team
    from nyc_taxi_proving.deployment.supervisor import MARKER, Supervisor

    said = []
    api = RestApi(settings)
    for state in ("queued", "running"):
        for ti in api.call(f"/api/v2/dags/~/dagRuns/~/taskInstances?state={state}&limit=50")["task_instances"]:
            said.append(f"task {ti['dag_id']}.{ti['task_id']} {state}")
    said += [f"DAG run {r['dag_id']} {r['dag_run_id']} {r['state']}" for r in api.active_runs()]
    waiting = redis.Redis.from_url(team.Redis(settings).url()).llen("default")
    if waiting:
        said.append(f"{waiting} messages in the broker's queue")
    supervisor = Supervisor(settings)
    programs = {p["pid"] for p in supervisor.programs() if p["pid"]}
    supervised = programs | {supervisor.pid()}
    for pid in programs:
        with contextlib.suppress(psutil.NoSuchProcess):
            supervised |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    mine = str(Path(settings.state_dir) / "team")
    for process in psutil.process_iter():
        try:
            if process.pid not in supervised and process.environ().get(MARKER) == mine:
                said.append(f"process {process.pid} {' '.join(process.cmdline()[:4])[:100]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return said
