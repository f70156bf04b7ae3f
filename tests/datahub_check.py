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


def datahub_check(paths: list[Path]) -> subprocess.CompletedProcess:
    """Run the check on every file; it stops at the first invalid one with a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-c", _CHECK_EACH, *map(str, paths)], capture_output=True, text=True, timeout=600
    )


def all_valid(paths: list[Path]) -> list[str]:
    """What the check prints when every record of every file is valid: each file's own record count."""
    return [f"{len(json.loads(path.read_text()))} MCEs found - all valid" for path in paths]
