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
DATAHUB_CONNECTION_TYPES = {"datahub-rest", "datahub-kafka"}  # the DataHub plugin's connections to a server


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
    project's and the user's, and a team's copy of one, ``AIRFLOW_CONN__<TEAM>___<ID>``), and every Airflow
    connection variable whose connection is DataHub's by its type (in any form Airflow reads), whatever its name."""
    named = f"{settings.datahub_conn_id},{users_airflow_settings().get('AIRFLOW__DATAHUB__CONN_ID') or ''}"
    ids = {c.strip().upper() for c in named.split(",") if c.strip()}
    found = {k for k in environ if k.startswith("AIRFLOW_CONN_") and _conn_id(k) in ids}
    return found | {k for k, v in environ.items() if k.startswith("AIRFLOW_CONN_") and _is_datahubs(v)}


def _conn_id(variable: str) -> str:
    """The connection id an ``AIRFLOW_CONN_`` variable names, as the variable spells it: ``AIRFLOW_CONN_<ID>``, or
    a team's, ``AIRFLOW_CONN__<TEAM>___<ID>``."""
    rest = variable.removeprefix("AIRFLOW_CONN_")
    return rest.split("___", 1)[1] if rest.startswith("_") and "___" in rest else rest


def _is_datahubs(connection: str) -> bool:
    """Whether an Airflow connection variable's value is of a DataHub type: as JSON, its ``conn_type`` (with ``-``
    or ``_``, which Airflow reads as one) or its ``uri``; as a URI, its scheme (a ``datahub_rest://`` one, which
    Airflow reads as no type, is taken as DataHub's too: withheld, it costs nothing)."""
    text = connection.strip()
    if text.startswith("{"):
        try:
            given = json.loads(text)
        except ValueError:
            return False
        if not given.get("conn_type") and isinstance(given.get("uri"), str):
            return _is_datahubs(given["uri"])
        kind = str(given.get("conn_type") or "")
    else:
        kind = text.split("://", 1)[0] if "://" in text else ""
    return kind.lower().replace("_", "-") in DATAHUB_CONNECTION_TYPES


def not_the_api_servers(settings: Settings, inherited: dict[str, str]) -> str:
    """``env``'s arguments that start the API server without DataHub's connections (``-u NAME`` each, quoted as
    supervisord splits a command): its execution API hands any connection it can read to any task's token
    (Airflow 3 has no per-task access to connections), so a worker host would read through it what control
    alone is given. A task on control finds them in its own environment first."""
    return " ".join(f"-u {shlex.quote(name)}" for name in sorted(datahub_connections(settings, inherited)))
