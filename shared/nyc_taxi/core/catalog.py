"""The lakehouse's Iceberg catalog through pyiceberg (no JVM): the same catalog Spark uses.

Work that only needs the catalog (creating tables, snapshot ids and history, small reads) goes
through here and starts no JVM.
"""

from __future__ import annotations

from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.naming import iceberg_identifier
from nyc_taxi.core.settings import Settings, get_settings


def load_catalog(settings: Settings | None = None):
    """The lakehouse's catalog through pyiceberg (the same catalog Spark uses)."""
    return lakehouse(settings or get_settings()).pyiceberg_catalog()


def load_table(table, settings: Settings | None = None):
    """A registry table through pyiceberg."""
    settings = settings or get_settings()
    return load_catalog(settings).load_table(iceberg_identifier(table, settings))


def current_snapshot(table, settings: Settings | None = None):
    """The snapshot a registry table's main branch points at now (None: never written, or no table).
    The one way the project reads a table's current version."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return load_table(table, settings).current_snapshot()
    except NoSuchTableError:
        return None


def current_snapshot_id(table, settings: Settings | None = None) -> int | None:
    snapshot = current_snapshot(table, settings)
    return snapshot.snapshot_id if snapshot else None
