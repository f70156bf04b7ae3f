"""Airflow's configuration, derived from the project settings (one place): `python -m nyc_taxi.airflow_env`
prints it as `export` lines for the task runner; tests apply it before importing Airflow.

Lineage goes to files in the state directory by default (DataHub: a `datahub-file` connection;
OpenLineage: a file transport), and additionally to a real DataHub (`DATAHUB_GMS_URL`) or
OpenLineage endpoint (`OPENLINEAGE_URL`) when configured.
"""

from __future__ import annotations

import json
import shlex

from nyc_taxi.lineage.destinations import datahub_records_dir, openlineage_events_dir, openlineage_transport
from nyc_taxi.settings import REPO_ROOT, Settings, get_settings

DAGS_FOLDER = REPO_ROOT / "airflow" / "dags"


def datahub_airflow_file(settings: Settings):
    return datahub_records_dir(settings) / "airflow_mcps.json"


def openlineage_airflow_file(settings: Settings):
    return openlineage_events_dir(settings) / "airflow_events.jsonl"


def datahub_server_answers(settings: Settings) -> bool:
    """Whether DATAHUB_GMS_URL is set and answers now.

    The plugin sends through one composite emitter whose first failure stops the records after it,
    so a server that is down would cost the local file its records too: then Airflow writes the
    file only, says so, and `bash run lineage-replay` sends the records once the server is back.
    """
    if not settings.datahub_gms_url:
        return False
    import sys
    import urllib.request

    try:
        urllib.request.urlopen(settings.datahub_gms_url.rstrip("/") + "/config", timeout=3).close()
        return True
    except Exception as error:
        print(f"warning: DataHub at {settings.datahub_gms_url} does not answer ({error}); Airflow keeps its DataHub "
              "records in the local file only — send them later with: bash run lineage-replay", file=sys.stderr)
        return False


def airflow_environment(settings: Settings | None = None) -> dict[str, str]:
    settings = settings or get_settings()
    home = settings.airflow_home
    datahub_file = datahub_airflow_file(settings)
    ol_file = openlineage_airflow_file(settings)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # A 2-core machine: few task processes at a time, one Spark JVM each.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__API__HOST": "127.0.0.1",  # the UI/API listens on this machine only
        # Simple auth manager: user admin; Airflow generates its password into
        # $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (never a fixed one).
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        # Both lineage integrations on (the DataHub plugin silences OpenLineage unless told not to).
        "AIRFLOW__DATAHUB__ENABLED": "True",
        "AIRFLOW__DATAHUB__DISABLE_OPENLINEAGE_PLUGIN": "False",
        "AIRFLOW__DATAHUB__CLUSTER": settings.datahub_env,
        "AIRFLOW__DATAHUB__CAPTURE_OL_FILE_DATASETS": "True",  # landed source files are real inputs here
        "AIRFLOW__DATAHUB__CONN_ID": "datahub_file,datahub_rest" if datahub_server_answers(settings) else "datahub_file",
        "AIRFLOW_CONN_DATAHUB_FILE": json.dumps({"conn_type": "datahub-file", "host": str(datahub_file)}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": settings.openlineage_namespace,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(openlineage_transport(settings, ol_file)),
    }
    if settings.datahub_gms_url:
        # one retry and a 5 s timeout: a DataHub that is down must not stretch every task by minutes
        rest = {"conn_type": "datahub-rest", "host": settings.datahub_gms_url,
                "extra": {"timeout_sec": 5, "retry_max_times": 1}}
        if settings.datahub_token:
            rest["password"] = settings.datahub_token.get_secret_value()
        env["AIRFLOW_CONN_DATAHUB_REST"] = json.dumps(rest)
    return env


def prepare_directories(settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    for path in (settings.airflow_home, datahub_airflow_file(settings).parent, openlineage_airflow_file(settings).parent):
        path.mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    prepare_directories()
    for key, value in airflow_environment().items():
        print(f"export {key}={shlex.quote(value)}")
