"""Validate OpenLineage events against the official JSON schemas (the Metaflow lineage package's copy,
``metaflow_lineage.spec``) and the schemas of the project's own facets (facets/: what the spec has no
facet for, e.g. rows removed)."""

from __future__ import annotations

from pathlib import Path

from metaflow_lineage import spec

OWN_FACETS_DIR = Path(__file__).parent / "facets"


def validation_errors(event: dict, *, any_facet: bool = False) -> list[str]:
    """Every way ``event`` breaks the spec or the project's own facets' schemas; empty when it is valid.
    ``any_facet``: a facet whose schema is not here passes unchecked (another producer's)."""
    return spec.validation_errors(event, any_facet=any_facet, extra_schemas=(OWN_FACETS_DIR,))
