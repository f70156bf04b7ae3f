"""Validate OpenLineage events against the official JSON schemas (copied in openlineage-spec/) and the
schemas of the project's own facets (facets/: what the spec has no facet for, e.g. rows removed).

The core schema checks the event; every facet is checked against the schema its ``_schemaURL``
names, so a facet we build wrongly fails here even though the core schema allows any facet.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

SPEC_DIR = Path(__file__).parent / "openlineage-spec"
OWN_FACETS_DIR = Path(__file__).parent / "facets"


@functools.cache
def _registry():
    from referencing import Registry, Resource

    resources = []
    for path in [
        SPEC_DIR / "OpenLineage.json",
        *sorted((SPEC_DIR / "facets").glob("*.json")),
        *sorted(OWN_FACETS_DIR.glob("*.json")),
    ]:
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@functools.cache
def _core() -> str:
    return json.loads((SPEC_DIR / "OpenLineage.json").read_text())["$id"]


@functools.cache
def _validator(ref: str):
    """The schema at ``ref``, with its formats checked (a ``runId`` that is no UUID, an ``eventTime`` that is
    no RFC 3339 time: a server parses both and refuses what does not parse)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator({"$ref": ref}, registry=_registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def _facets(event: dict):
    yield from (event.get("run", {}).get("facets") or {}).values()
    yield from (event.get("job", {}).get("facets") or {}).values()
    for dataset in [*(event.get("inputs") or []), *(event.get("outputs") or [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            yield from (dataset.get(key) or {}).values()


def validation_errors(event: dict, *, any_facet: bool = False) -> list[str]:
    """Every way ``event`` (a dict as serialised) breaks the spec; empty when it is valid. ``any_facet``:
    a facet whose schema the copied spec lacks passes unchecked, as a server takes another producer's
    facets (our own events are checked without it: every facet we emit has a schema here)."""
    errors = [f"event: {e.message}" for e in _validator(_core()).iter_errors(event)]
    known = {ref.split("#")[0] for ref in _registry()}
    for facet in _facets(event):
        url = facet.get("_schemaURL", "")
        if url.split("#")[0] not in known:
            if any_facet:
                continue
            errors.append(f"facet schema not in the copied spec: {url}")
            continue
        errors += [f"{url}: {e.message}" for e in _validator(url).iter_errors(facet)]
    return errors
