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
