"""Airflow's configuration, derived from the project settings (one place):
`python -m nyc_taxi.airflow_adapter.environment` prints it as `export` lines for the task runner;
tests apply it before importing Airflow.

Lineage is written to files in the state directory only — DataHub's plugin through a `datahub-file`
connection, the OpenLineage provider through a file transport — and shipped from there to a real
DataHub (`DATAHUB_GMS_URL`) or OpenLineage endpoint (`OPENLINEAGE_URL`) at the end of every task
(``nyc_taxi.airflow_adapter.delivery``), so no server can cost a local record.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from nyc_taxi.airflow_adapter.rest_api import base_url
from nyc_taxi.core import team
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import REPO_ROOT, Settings, get_settings
from nyc_taxi.lineage.write.destinations import datahub_file, openlineage_file

DAGS_FOLDER = REPO_ROOT / "airflow" / "dags"
LOCAL_SETTINGS = REPO_ROOT / "airflow" / "config"  # airflow_local_settings.py: what every Airflow process loads
WORKER_LOG_SERVER_PORT = 8793  # Airflow's default: a Celery worker's task-log server, across hosts


def standalone_record(settings: Settings) -> Path:
    """Where `bash run airflow standalone` names itself while it runs (its pid and port)."""
    return settings.airflow_home / "standalone.json"


def running_standalone(settings: Settings) -> dict | None:
    """The Airflow standalone that runs on this state directory now (its pid and port), if one does."""
    from nyc_taxi.core.processes import alive, read_record

    found = read_record(standalone_record(settings))
    return found if found and alive(found["pid"]) else None


def airflow_environment(settings: Settings | None = None) -> dict[str, str]:
    settings = settings or get_settings()
    home = settings.airflow_home
    instance = (
        {"AIRFLOW__DATAHUB__PLATFORM_INSTANCE": settings.datahub_platform_instance}
        if settings.datahub_platform_instance
        else {}
    )
    paths = [str(LOCAL_SETTINGS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    across_hosts = (
        # a task's host as the API server reaches it for the task's log (Airflow names it by the machine's
        # name, which every host of one machine shares)
        {
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.host_address",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(WORKER_LOG_SERVER_PORT),
        }
        if team.this_host(settings)[1] != team.LOOPBACK
        else {}
    )
    return {
        **instance,
        **across_hosts,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # A 2-core machine: few task processes at a time, one Spark JVM each.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": str(settings.task_retries),
        **lakehouse(settings).airflow_services(),
        # the UI and the execution API that task processes report to, on this machine only
        "AIRFLOW__API__HOST": team.address(settings, "airflow-api-server"),
        "AIRFLOW__API__PORT": str(settings.airflow_port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url(settings)}/execution/",
        # Simple auth manager: user admin; Airflow generates its password into
        # $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (never a fixed one).
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        # Both lineage integrations on (the DataHub plugin silences OpenLineage unless told not to).
        "AIRFLOW__DATAHUB__ENABLED": "True",
        "AIRFLOW__DATAHUB__DISABLE_OPENLINEAGE_PLUGIN": "False",
        "AIRFLOW__DATAHUB__CLUSTER": settings.datahub_env,
        "AIRFLOW__DATAHUB__CAPTURE_OL_FILE_DATASETS": "True",  # landed files are real inputs and outputs here
        "AIRFLOW__DATAHUB__CONN_ID": "datahub_file",
        "AIRFLOW_CONN_DATAHUB_FILE": json.dumps(
            {"conn_type": "datahub-file", "host": str(datahub_file(settings, "airflow"))}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": settings.openlineage_namespace,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(openlineage_file(settings, "airflow")), "append": True}
        ),
    }


def host_address() -> str:
    """This host's address (Airflow's ``hostname_callable`` across hosts). Read afresh, not through the
    process's settings: a Celery worker asks it before it forks a task, which would inherit them read
    before the host was given its settings file."""
    return team.this_host(Settings())[1]


def prepare_directories(settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    for path in (
        settings.airflow_home,
        datahub_file(settings, "airflow").parent,
        openlineage_file(settings, "airflow").parent,
    ):
        path.mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    prepare_directories()
    for key, value in airflow_environment().items():
        print(f"export {key}={shlex.quote(value)}")
