"""What the team deployment's programs inherit of the operator's environment, host by host: the operator's own
settings less what a host's programs are not given, and the DataHub connections the API server is started
without."""

from __future__ import annotations

import json
import os
import shlex

from nyc_taxi.airflow_adapter.environment import airflow_process_environment, users_airflow_settings
from nyc_taxi.core import team
from nyc_taxi.core.settings import Settings

# The operator's own settings that the deployment's programs are not given. Its Metaflow is the deployment's
# (its bucket or the filer's home, METAFLOW_HOME), not the operator's profile. A host that ships its lineage to
# control's receiver (a worker, across hosts) uses no lineage server beyond it: the servers the operator's
# settings name and their credentials (DataHub's connections among them) stay on control, whose shipper sends
# on to them.
NOT_THE_DEPLOYMENTS = ("METAFLOW_",)
CONTROLS_ALONE = (
    *("OPENLINEAGE_URL", "OPENLINEAGE_API_KEY", "OPENLINEAGE_ENDPOINT", "OPENLINEAGE_CONFIG", "OPENLINEAGE__"),
    *("DATAHUB_GMS_", "DATAHUB_CONN_ID"),
)
DATAHUB_CONNECTION_TYPES = {"datahub-rest", "datahub-kafka"}  # the DataHub plugin's hooks'


def inherited(settings: Settings) -> dict[str, str]:
    """The operator's environment with the project's Airflow settings, less what the host's programs are not
    given (``NOT_THE_DEPLOYMENTS``; on a host that ships to control, ``CONTROLS_ALONE``, DataHub's connections
    and the lineage destinations of the operator's Airflow settings, which are handed on to control's programs
    alone; DataHub's ~/.datahubenv not read)."""
    worker = team.LineageReceiver(settings).elsewhere()
    if not worker:
        return {k: v for k, v in airflow_process_environment(settings).items() if not k.startswith(NOT_THE_DEPLOYMENTS)}
    connections = datahub_connections(settings, dict(os.environ))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(CONTROLS_ALONE) and k not in connections}
    kept = airflow_process_environment(settings, environ, lineage=False)
    return {k: v for k, v in kept.items() if not k.startswith(NOT_THE_DEPLOYMENTS)} | {"DATAHUB_SKIP_CONFIG": "true"}


def datahub_connections(settings: Settings, environ: dict[str, str]) -> set[str]:
    """The variables of ``environ`` that hold a DataHub connection: those ``[datahub] conn_id`` names (the
    project's and the user's), and every Airflow connection variable whose connection is DataHub's, by its type
    (as JSON or a URI, the two forms Airflow reads), whatever its name."""
    named = f"{settings.datahub_conn_id},{users_airflow_settings().get('AIRFLOW__DATAHUB__CONN_ID') or ''}"
    found = {f"AIRFLOW_CONN_{c.strip().upper()}" for c in named.split(",") if c.strip()} & environ.keys()
    return found | {k for k, v in environ.items() if k.startswith("AIRFLOW_CONN_") and _is_datahubs(v)}


def _is_datahubs(connection: str) -> bool:
    """Whether an Airflow connection variable's value (JSON, or a URI whose scheme is its type) is of a DataHub
    type; Airflow reads ``datahub_rest`` and ``datahub-rest`` as one."""
    text = connection.strip()
    if text.startswith("{"):
        try:
            kind = json.loads(text).get("conn_type") or ""
        except (ValueError, AttributeError):
            return False
    else:
        kind = text.split("://", 1)[0] if "://" in text else ""
    return kind.lower().replace("_", "-") in DATAHUB_CONNECTION_TYPES


def not_the_api_servers(settings: Settings, inherited: dict[str, str]) -> str:
    """``env``'s arguments that start the API server without DataHub's connections (``-u NAME`` each, quoted as
    supervisord splits a command): its execution API hands any connection it can read to any task's token
    (Airflow 3 has no per-task access to connections), so a worker host would read through it what control
    alone is given. A task on control finds them in its own environment first."""
    return " ".join(f"-u {shlex.quote(name)}" for name in sorted(datahub_connections(settings, inherited)))
