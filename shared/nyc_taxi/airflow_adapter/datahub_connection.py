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
