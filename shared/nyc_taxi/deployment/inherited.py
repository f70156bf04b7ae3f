"""What the team deployment's programs inherit of the operator's environment, host by host: the operator's own
settings less what a host's programs are not given, and the DataHub connections the API server is started
without."""

from __future__ import annotations

import os

from nyc_taxi.airflow_adapter.environment import airflow_process_environment, users_airflow_settings
from nyc_taxi.core import team
from nyc_taxi.core.settings import Settings

# The operator's own settings that the deployment's programs are not given. Its Metaflow is the deployment's
# (its bucket or the filer's home, METAFLOW_HOME below), not the operator's profile. A host that ships its
# lineage to control's receiver (a worker, across hosts) uses no lineage server beyond it: the servers the
# operator's settings name and their credentials stay on control, whose shipper sends on to them.
NOT_THE_DEPLOYMENTS = ("METAFLOW_",)
DATAHUB_CONNECTIONS = "AIRFLOW_CONN_DATAHUB_REST"  # the plugin's connections by their default name's prefix
CONTROLS_ALONE = (
    *("OPENLINEAGE_URL", "OPENLINEAGE_API_KEY", "OPENLINEAGE_ENDPOINT", "OPENLINEAGE_CONFIG", "OPENLINEAGE__"),
    *("DATAHUB_GMS_", "DATAHUB_CONN_ID", DATAHUB_CONNECTIONS),
)


def inherited(settings: Settings) -> dict[str, str]:
    """The operator's environment with the project's Airflow settings, less what the host's programs are not
    given (``NOT_THE_DEPLOYMENTS``; on a host that ships to control, ``CONTROLS_ALONE``, the DataHub
    connections ``[datahub] conn_id`` names, and the lineage destinations of the operator's Airflow settings,
    which are handed on to control's programs alone; DataHub's ~/.datahubenv not read)."""
    worker = team.LineageReceiver(settings).elsewhere()
    if not worker:
        return {k: v for k, v in airflow_process_environment(settings).items() if not k.startswith(NOT_THE_DEPLOYMENTS)}
    connections = _datahub_connections(settings)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(CONTROLS_ALONE) and k not in connections}
    kept = airflow_process_environment(settings, environ, lineage=False)
    return {k: v for k, v in kept.items() if not k.startswith(NOT_THE_DEPLOYMENTS)} | {"DATAHUB_SKIP_CONFIG": "true"}


def _datahub_connections(settings: Settings) -> set[str]:
    """The variables of the DataHub connections ``[datahub] conn_id`` names (the project's and the user's)."""
    named = f"{settings.datahub_conn_id},{users_airflow_settings().get('AIRFLOW__DATAHUB__CONN_ID') or ''}"
    return {f"AIRFLOW_CONN_{c.strip().upper()}" for c in named.split(",") if c.strip()}


def not_the_api_servers(settings: Settings, inherited: dict[str, str]) -> str:
    """The DataHub connections' variables the API server is started without (those ``[datahub] conn_id`` names
    and every one a worker host is not given): its execution API hands any connection it can read to any task's
    token (Airflow 3 has no per-task access to connections), so a worker host would read through it what
    control alone is given. A task finds them in its own environment first."""
    named = _datahub_connections(settings)
    withheld = (v for v in inherited if v in named or v.startswith(DATAHUB_CONNECTIONS))
    return " ".join(sorted(v for v in withheld if v.isidentifier()))
