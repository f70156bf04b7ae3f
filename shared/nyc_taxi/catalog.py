"""The active profile's Iceberg catalog through pyiceberg (no JVM): the same catalog Spark uses."""

from __future__ import annotations

from nyc_taxi.settings import Settings, get_settings


def catalog_properties(settings: Settings) -> dict[str, str]:
    if settings.is_local:
        return {"type": "sql", "uri": f"sqlite:///{settings.catalog_db_path}", "warehouse": f"file://{settings.warehouse}"}
    props = {"type": "glue", "glue.region": settings.aws_region, "s3.region": settings.aws_region, "warehouse": settings.warehouse}
    if settings.aws_profile:
        props["glue.profile-name"] = settings.aws_profile
    if settings.aws_endpoint_url:
        props |= {"glue.endpoint": settings.aws_endpoint_url, "s3.endpoint": settings.aws_endpoint_url}
    return props


def prepare_local_catalog_file(settings: Settings) -> None:
    """Create the SQLite catalog file in WAL mode, so Spark's open reads never block pyiceberg's commits."""
    import sqlite3

    settings.catalog_db_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(settings.catalog_db_path) as db:
        db.execute("PRAGMA journal_mode=WAL")


def load_catalog(settings: Settings | None = None):
    """pyiceberg catalog named like Spark's catalog, so both read the same SQLite rows locally."""
    from pyiceberg.catalog import load_catalog as _load

    settings = settings or get_settings()
    if settings.is_local:
        prepare_local_catalog_file(settings)
    return _load(settings.catalog_name, **catalog_properties(settings))
