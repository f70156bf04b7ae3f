"""The copied OpenLineage schemas, and the check built on them."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from metaflow_lineage.spec import SPEC_DIR, validation_errors


def test_the_vendored_openlineage_schemas_are_complete_and_unmodified():
    """Events are checked with the schemas copied from OpenLineage's repository: the folder holds
    exactly the files its SHA256SUMS lists, each with its checksum (UPSTREAM.md says where from)."""
    listed = {}
    for line in (SPEC_DIR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
    schemas = {str(p.relative_to(SPEC_DIR)) for p in SPEC_DIR.rglob("*.json")}
    other = {str(p.relative_to(SPEC_DIR)) for p in SPEC_DIR.rglob("*") if p.is_file()} - schemas
    assert sorted(schemas) == sorted(listed)
    assert other == {"SHA256SUMS", "UPSTREAM.md"}
    assert "OpenLineage.json" in listed and sum(n.startswith("facets/") for n in listed) >= 30
    assert {n: hashlib.sha256((SPEC_DIR / n).read_bytes()).hexdigest() for n in listed} == listed
    # each schema's $id names its own file (a file renamed or swapped would validate the wrong facet)
    ids = {n: json.loads((SPEC_DIR / n).read_text())["$id"] for n in listed}
    assert [n for n, i in ids.items() if not i.endswith("/" + Path(n).name)] == []
    assert re.search(r"\b[0-9a-f]{40}\b", (SPEC_DIR / "UPSTREAM.md").read_text())  # the upstream commit


def _event(**facets) -> dict:
    return {
        "eventType": "START",
        "eventTime": "2024-01-15T05:00:00+00:00",
        "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": "0f6c4f5e-3c5e-4f4a-9f3e-1b2c3d4e5f60", "facets": facets},
        "job": {"namespace": "default", "name": "flow"},
    }


def test_a_facet_is_checked_against_its_own_schema_and_an_unknown_one_only_when_asked():
    nominal = "https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"
    good = {"_producer": "p", "_schemaURL": nominal, "nominalStartTime": "2024-01-15T05:00:00+00:00"}
    assert validation_errors(_event(nominalTime=good)) == []
    bad = {**good, "nominalStartTime": 15}
    assert any("15 is not of type 'string'" in e for e in validation_errors(_event(nominalTime=bad)))
    foreign = {"_producer": "p", "_schemaURL": "https://example.com/OurFacet.json#/$defs/OurFacet"}
    assert validation_errors(_event(ours=foreign)) == ["facet schema not in the copied spec: " + foreign["_schemaURL"]]
    assert validation_errors(_event(ours=foreign), any_facet=True) == []
    assert validation_errors({**_event(), "run": {"runId": "run-1"}}) != []  # a run id that is no UUID
    assert validation_errors({**_event(), "eventTime": "yesterday at noon"}) != []  # a time that is no RFC 3339
