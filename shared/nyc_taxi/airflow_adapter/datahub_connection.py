"""The DataHub Airflow plugin's own connection, for the records this project adds to the plugin's
(schemas, snapshot ids, column lineage), so they land where the plugin's records land, in order.

The plugin offers no public call for "the emitter you are configured with": its
``get_lineage_config()`` lives in a private module. This reads the same two settings through
Airflow's public configuration (``[datahub] enabled``, ``[datahub] conn_id``, a comma-separated list),
with the defaults the plugin documents for them, and builds the emitter with the plugin's public hooks.
``tests/test_airflow_adapter.py`` compares the reading with the plugin's private one, so a change in the
plugin fails there, loudly, not here quietly.
"""

from __future__ import annotations

# The defaults the plugin's documentation gives the two settings (its configuration table).
DEFAULT_ENABLED = True
DEFAULT_CONN_ID = "datahub_rest_default"


def plugin_connection() -> tuple[bool, list[str]]:
    """Whether the plugin is on, and the connection ids it emits through."""
    from airflow.configuration import conf

    enabled = conf.getboolean("datahub", "enabled", fallback=DEFAULT_ENABLED)
    conn_ids = [c.strip() for c in conf.get("datahub", "conn_id", fallback=DEFAULT_CONN_ID).split(",")]
    return enabled, conn_ids


def plugin_emitter():
    """An emitter on the plugin's connection(s), or None when the plugin is off."""
    from datahub_airflow_plugin.hooks.datahub import DatahubCompositeHook, DatahubGenericHook

    enabled, conn_ids = plugin_connection()
    if not enabled:
        return None
    hook = DatahubGenericHook(conn_ids[0]) if len(conn_ids) == 1 else DatahubCompositeHook(conn_ids)
    return hook.make_emitter()


def shipping_targets(settings, environment_only: bool = False, metadata_database: bool = False) -> list:
    """The DataHub servers Airflow's tasks ship the local records to: each connection ``DATAHUB_CONN_ID``
    names (the user's ``[datahub] conn_id``; the plugin's default, ``datahub_rest_default``, otherwise) that
    exists and is a ``datahub-rest`` one, read as the plugin reads it (its host and port, its password the
    token, its extra what the emitter is given; without a password, ``destinations.connection_token``). None of
    them: DataHub's own settings (``destinations.datahub_target``) decide.

    Where a connection is looked for: in a task, Airflow's own way (``BaseHook``: its secrets backends,
    then the API server); ``environment_only``, the ``AIRFLOW_CONN_…`` variables alone (the scheduler's end
    of a DAG run: a lookup through the metadata database there would leave its session's objects
    detached); ``metadata_database``, every secrets backend Airflow's own CLI asks, the metadata database
    last (`bash run lineage-replay`, outside any task: a connection made in the UI is kept there)."""
    from airflow.sdk import BaseHook

    from nyc_taxi.lineage.write.destinations import DataHubTarget, connection_token

    if environment_only:
        from airflow.secrets.environment_variables import EnvironmentVariablesBackend

        lookup = EnvironmentVariablesBackend().get_connection
    elif metadata_database:
        from airflow.models import Connection

        lookup = Connection.get_connection_from_secrets
    else:
        lookup = BaseHook.get_connection
    targets = []
    for conn_id in filter(None, (c.strip() for c in settings.datahub_conn_id.split(","))):
        try:
            conn = lookup(conn_id)
        except Exception:  # not defined (AirflowNotFoundException), or no way to ask here
            continue
        if conn is None:
            continue
        if conn.conn_type.replace("_", "-") != "datahub-rest" or not conn.host:
            continue
        host = f"{conn.host}:{conn.port}" if conn.port else conn.host
        token = connection_token(conn.password, host, settings)
        targets.append(DataHubTarget(host, token, f"the Airflow connection {conn_id}", conn.extra_dejson))
    return targets
