"""The suite's lanes (docs/testing.md): every test is run by exactly one of `bash run test` (CI's) and
`bash run test --system`, the fast lane is part of `bash run test`, and the table of claims names tests
that exist, in the lane it gives them — every long proof of the system lane with its claim. The lanes
are read from pytest's own collection with the selection the commands use (`pytest --lanes`), and each
command's own collection is compared with them."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTING = REPO / "docs" / "testing.md"
README = REPO / "README.md"
CI, FAST, SYSTEM = "bash run test", "bash run test --fast", "bash run test --system"
# the Metaflow lineage package's own tests: the package lane, which `bash run test` runs beside the suite, alone
PACKAGE_TESTS = "shared/metaflow_lineage/tests/"


def _package_test_exists(test: str) -> bool:
    """``shared/metaflow_lineage/tests/test_x.py::name``: the file defines that test function."""
    path, _, name = test.partition("::")
    file = REPO / path
    if not file.exists():
        return False
    return not name or re.search(rf"^def {re.escape(name)}\(", file.read_text(), flags=re.M) is not None


@functools.cache
def _lanes() -> dict[str, tuple[str, set[str]]]:
    """Every collected test (its node id) -> (its lane, the commands that run it)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--lanes", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("LANE "):
            nodeid, lane, commands = line[len("LANE ") :].split("\t")
            found[nodeid] = (lane, set(filter(None, commands.split(", "))))
    assert len(found) > 250, done.stdout[-3000:] + done.stderr[-3000:]
    return found


def _claims() -> list[tuple[str, list[str], list[str]]]:
    """The table of claims: (claim, the tests it names, the lanes it gives them)."""
    text = TESTING.read_text().split("## Claims, tests and lanes", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("claim", "---"):
            continue
        tests = re.findall(r"`((?:shared/metaflow_lineage/)?tests/test_[a-z_0-9]+\.py(?:::[A-Za-z_0-9]+)*)`", cells[1])
        lanes = [lane.strip() for lane in cells[2].split(";")]
        rows.append((cells[0], tests, lanes))
    return rows


def test_each_test_is_run_by_ci_or_by_the_system_lane_never_both_and_the_fast_lane_is_cis():
    for nodeid, (lane, commands) in _lanes().items():
        assert (CI in commands) != (SYSTEM in commands), (nodeid, lane, commands)
        assert (FAST in commands) == (lane == "fast"), (nodeid, lane, commands)
        assert (SYSTEM in commands) == (lane == "system"), (nodeid, lane, commands)


def test_each_command_collects_exactly_its_lanes_tests():
    """The commands themselves, as the README shows them (the run script's options to pytest), collect the
    tests of the lanes the table above gives them, and no other."""
    lanes = _lanes()
    for command, wanted in ((CI, {"fast", "suite"}), (FAST, {"fast"}), (SYSTEM, {"system"})):
        done = subprocess.run(
            [*command.split(), "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        collected = {line for line in done.stdout.splitlines() if line.startswith("tests/") and "::" in line}
        assert collected == {n for n, (lane, _) in lanes.items() if lane in wanted}, (command, done.stderr[-2000:])


def test_the_claims_table_names_tests_that_exist_in_the_lanes_it_gives_and_every_long_proof_is_in_it():
    lanes = _lanes()
    rows = _claims()
    assert len(rows) > 40
    named = set()
    for claim, tests, given in rows:
        assert given and all(lane in ("fast", "suite", "system", "package", "—") for lane in given), (claim, given)
        found = set()
        for test in tests:
            if test.startswith(PACKAGE_TESTS):
                assert _package_test_exists(test), f"{test} (for: {claim[:80]}) is not a test of the package"
                found.add("package")
                continue
            matching = {lanes[n][0] for n in lanes if n == test or n.startswith((f"{test}::", f"{test}["))}
            assert matching, f"{test} (for: {claim[:80]}) is not a test of the suite"
            found |= matching
            named |= {n for n in lanes if n == test or n.startswith((f"{test}::", f"{test}["))}
        assert found == set(given) - {"—"}, (claim[:80], tests, found, given)
    long_proofs = {n.split("[")[0] for n, (lane, _) in lanes.items() if lane == "system"}
    assert long_proofs - {n.split("[")[0] for n in named} == set()


def test_every_command_the_readme_shows_has_its_claim_in_the_table():
    """A command of the README's code blocks (a line starting `bash run` or `PROFILE=team bash run`) is a
    claim that it works: the table names it."""
    text = TESTING.read_text().split("## Claims, tests and lanes", 1)[1].split("\n## ", 1)[0]
    commands = set()
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            line = re.split(r"\s{2,}#", line)[0].strip()
            if match := re.match(r"(?:PROFILE=team )?bash run ([a-z-]+)(?: (--?[a-z-]+|[a-z_]+))?", line):
                commands.add(f"bash run {match[1]}" + (f" {match[2]}" if match[2] else ""))
    assert len(commands) > 15
    missing = sorted(c for c in commands if c not in text and c.replace("bash run ", "", 1) not in text)
    assert missing == []
