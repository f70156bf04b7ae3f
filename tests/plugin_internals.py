"""The DataHub Airflow plugin's own internals the tests compare the project with: its translations from
Airflow Assets and from OpenLineage datasets to DataHub URNs (what the plugin will call our datasets) and
its reading of its configuration. It exposes them only in private modules; they are imported in this one
place, so a plugin release that moves them fails the tests that use them at import, loudly, naming this
file (docs/architecture.md lists it)."""

from __future__ import annotations

try:
    from datahub_airflow_plugin._airflow_asset_adapter import translate_airflow_asset_to_urn
    from datahub_airflow_plugin._config import get_lineage_config
    from datahub_airflow_plugin._datahub_ol_adapter import translate_ol_to_datahub_urn
except ImportError as moved:  # pragma: no cover - only on a plugin release that moved them
    raise ImportError(
        f"the DataHub Airflow plugin moved an internal the tests compare with ({moved}): update tests/plugin_internals.py"
    ) from moved

__all__ = ["get_lineage_config", "translate_airflow_asset_to_urn", "translate_ol_to_datahub_urn"]
