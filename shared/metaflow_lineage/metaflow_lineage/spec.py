"""Check OpenLineage events against the official JSON schemas (copied in ``openlineage_spec/``).

The core schema checks the event; every facet is checked against the schema its ``_schemaURL`` names,
so a facet built wrongly fails here even though the core schema allows any facet. A producer with facets
of its own passes the folders of their schemas as ``extra_schemas``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

SPEC_DIR = Path(__file__).parent / "openlineage_spec"


@functools.cache
def _registry(extra_schemas: tuple[Path, ...]):
    from referencing import Registry, Resource

    paths = [SPEC_DIR / "OpenLineage.json", *sorted((SPEC_DIR / "facets").glob("*.json"))]
    paths += [path for folder in extra_schemas for path in sorted(folder.glob("*.json"))]
    resources = []
    for path in paths:
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@functools.cache
def _core() -> str:
    return json.loads((SPEC_DIR / "OpenLineage.json").read_text())["$id"]


@functools.cache
def _validator(ref: str, extra_schemas: tuple[Path, ...]):
    """The schema at ``ref``, with its formats checked (a ``runId`` that is no UUID, an ``eventTime`` that is
    no RFC 3339 time: a server parses both and refuses what does not parse)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(
        {"$ref": ref}, registry=_registry(extra_schemas), format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def _facets(event: dict):
    yield from (event.get("run", {}).get("facets") or {}).values()
    yield from (event.get("job", {}).get("facets") or {}).values()
    for dataset in [*(event.get("inputs") or []), *(event.get("outputs") or [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            yield from (dataset.get(key) or {}).values()


def validation_errors(event: dict, *, any_facet: bool = False, extra_schemas: Iterable[Path] = ()) -> list[str]:
    """Every way ``event`` (a dict as serialised) breaks the spec; empty when it is valid. ``any_facet``:
    a facet whose schema is not here passes unchecked, as a server takes another producer's facets."""
    extra = tuple(extra_schemas)
    errors = [f"event: {e.message}" for e in _validator(_core(), extra).iter_errors(event)]
    known = {ref.split("#")[0] for ref in _registry(extra)}
    for facet in _facets(event):
        url = facet.get("_schemaURL", "")
        if url.split("#")[0] not in known:
            if not any_facet:
                errors.append(f"facet schema not in the copied spec: {url}")
            continue
        errors += [f"{url}: {e.message}" for e in _validator(url, extra).iter_errors(facet)]
    return errors
