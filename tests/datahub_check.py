"""DataHub's own validator, `datahub check metadata-file`, on many record files at the cost of one.

Its CLI is called once per file, in one process: DataHub's imports are paid once (a process per file
cost about 1.5 s each, 30 s for the demo's record files).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHECK_EACH = """
import sys
from datahub.entrypoints import datahub
for path in sys.argv[1:]:
    datahub.main(["check", "metadata-file", path], standalone_mode=False)
"""


def assert_valid_record_files(paths: list[Path]) -> None:
    """Every record of every file passes DataHub's check: it exits 0 (it stops at the first invalid file)
    and reports each file's own record count as all valid."""
    check = subprocess.run(
        [sys.executable, "-c", _CHECK_EACH, *map(str, paths)], capture_output=True, text=True, timeout=600
    )
    all_valid = [f"{len(json.loads(path.read_text()))} MCEs found - all valid" for path in paths]
    assert check.returncode == 0 and check.stdout.splitlines() == all_valid, check.stdout[-2000:] + check.stderr[-4000:]


def urn_validation_errors(records: list[dict]) -> list[str]:
    """Every URN field of every record checked against the `UrnValidation` annotation its aspect's schema
    gives it in the installed acryl-datahub (the entity types it may name): what a DataHub server that
    validates URNs refuses (`datahub check metadata-file` and Lite do not enforce it)."""
    from datahub.metadata.schema_classes import ASPECT_NAME_MAP as ASPECT_CLASSES_BY_NAME

    errors: list[str] = []
    for record in records:
        aspect = record["aspect"]
        value = aspect["json"] if "json" in aspect else json.loads(aspect["value"])
        typed = ASPECT_CLASSES_BY_NAME[record["aspectName"]].from_obj(value)
        _check_urns(typed, f"{record['entityUrn']} {record['aspectName']}", errors)
    return errors


def _check_urns(record, where: str, errors: list[str]) -> None:
    from avrogen.dict_wrapper import DictWrapper
    from datahub.utilities.urns.urn import Urn

    for field in record.RECORD_SCHEMA.fields:
        value = record._inner_dict.get(field.name)
        if value is None:
            continue
        validation = field.props.get("UrnValidation")
        if validation:
            for urn in value if isinstance(value, list) else [value]:
                kind = Urn.from_string(urn).entity_type
                if kind not in validation["entityTypes"]:
                    errors.append(
                        f"{where}: {field.name} is a {kind} ({urn}), not {' or '.join(validation['entityTypes'])}"
                    )
        for item in value if isinstance(value, list) else value.values() if isinstance(value, dict) else [value]:
            if isinstance(item, DictWrapper):
                _check_urns(item, f"{where}.{field.name}", errors)
