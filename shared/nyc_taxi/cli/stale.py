"""`bash run lineage --stale [--rerun]`: what is stale and the plan that fixes it (``lineage/read/stale.py``),
with the sources asked what they publish now (a HEAD request each, the ingestion code's own), and the plan
carried out through Airflow (the same DAGs, ``dag.test()`` one run after another, as the demo does) and
Metaflow (the flow started by the ``train_forecast_model`` DAG, with lineage as usual)."""

from __future__ import annotations

import json

from nyc_taxi.core.settings import Settings
from nyc_taxi.ingest import taxi, weather
from nyc_taxi.ingest.errors import NotPublishedYet
from nyc_taxi.lineage.read.stale import GONE, Ingestion, StaleReport, check

PUBLISHED_NOW = {"ingest_yellow_taxi_data": taxi.published_version, "ingest_weather_data": weather.published_version}


def published_now(settings: Settings):
    """``published_now(ingestion, month)`` for ``stale.check``: the version the source publishes now, as the
    download records it; ``GONE`` for a file it no longer publishes; None when it cannot be reached."""

    def ask(ingestion: Ingestion, month: str) -> str | None:
        year, number = map(int, month.split("-"))
        try:
            return PUBLISHED_NOW[ingestion.pipeline.name](year, number, settings)
        except NotPublishedYet:
            return GONE
        except OSError:  # offline, refused, timed out: unknown
            return None

    return ask


def stale(settings: Settings) -> StaleReport:
    return check(settings, published_now(settings))


def rerun(report: StaleReport, settings: Settings) -> list[dict]:
    """Run the plan, in its order, through Airflow; the runs' results (one per DAG run). Nothing runs when
    a step of the plan is blocked."""
    from nyc_taxi.cli import dag_run_results

    if report.blocked:
        raise RuntimeError(
            "the re-run plan cannot run: "
            + "; ".join(f"{p.dag} {json.dumps(p.conf)}: {p.blocked}" for p in report.blocked)
            + ". Nothing was run."
        )
    if not report.plan:
        return []
    return dag_run_results.run([p.command() for p in report.plan], settings, "the re-run")
