"""A DAG run that failed is printed with its failing task's error, as the task recorded it in its
lineage (the demo and `lineage --stale --rerun` print it: the cause is on the screen, not only in a log)."""

from __future__ import annotations

import json

from nyc_taxi.cli.dag_run_results import describe
from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.write.destinations import openlineage_events_dir


def _event(kind: str, job: str, run_id: str, error: str | None = None) -> dict:
    facets = {"airflow": {"dagRun": {"run_id": run_id, "conf": {"month": "2024-01"}}}}
    if error:
        facets["errorMessage"] = {"message": error, "programmingLanguage": "python", "stackTrace": "Traceback …"}
    return {
        "eventType": kind,
        "eventTime": f"2026-01-01T00:00:0{1 if kind == 'START' else 2}Z",
        "run": {"runId": f"{job}-{run_id}", "facets": facets},
        "job": {"namespace": "nyc_taxi", "name": job, "facets": {}},
        "inputs": [],
        "outputs": [],
    }


def test_a_failed_run_names_its_failed_task_and_the_error_the_task_recorded(tmp_path):
    settings = Settings(_env_file=None, state_dir=tmp_path)
    events = openlineage_events_dir(settings)
    events.mkdir(parents=True)
    job, run_id = "ingest_yellow_taxi_data.download_published_files", "manual__2026-01-01"
    lines = [
        _event("START", job, run_id),
        _event(
            "FAIL",
            job,
            run_id,
            "FileExistsError: [Errno 17] File exists: 'landing/…/versions/ab…/yellow_tripdata_2024-01.parquet'",
        ),
    ]
    (events / "airflow.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    result = {
        "dag_id": "ingest_yellow_taxi_data",
        "conf": {"month": "2024-01"},
        "run_id": run_id,
        "state": "failed",
        "tasks": {
            "create_tables": "success",
            "download_published_files": "failed",
            "stage_landed_files": "upstream_failed",
        },
        "seconds": 12.3,
    }
    said = describe(result, settings)
    assert said[0] == 'ingest_yellow_taxi_data {"month": "2024-01"}: failed (12.3 s)'
    assert (
        said[1]
        == "  download_published_files failed: FileExistsError: [Errno 17] File exists: 'landing/…/versions/ab…/yellow_tripdata_2024-01.parquet'"
    )
    assert len(said) == 2  # the task that only followed the failure is not blamed
    assert describe({**result, "state": "success"}, settings) == [
        'ingest_yellow_taxi_data {"month": "2024-01"}: success (12.3 s)'
    ]
