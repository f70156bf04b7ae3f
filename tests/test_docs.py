"""The docs state how things are today: a run's commit is named only in docs/performance.md's tables, in
the row of the figure it printed; history lives in git."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _commits(text: str) -> set[str]:
    """The words of ``text`` that look like a commit: 7 to 40 hex digits, with a letter and a digit (by
    their look, not by git: a shallow clone does not hold the older commits a doc might name)."""
    return {w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w) and re.search(r"\d", w)}


def test_no_doc_but_performance_md_names_a_commit():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "infra").rglob("*.md"))]
    docs += sorted((REPO / "shared").glob("*/README.md"))
    named = {str(p.relative_to(REPO)): sorted(_commits(p.read_text())) for p in docs if p.name != "performance.md"}
    assert len(named) >= 10
    assert {doc: commits for doc, commits in named.items() if commits} == {}
    # the check finds a commit where one is named, short or whole, and not a word or a number
    assert _commits("ran at `d92ecd9`, then 611cc8d0e2f; 1234567 facade deadbeef") == {"d92ecd9", "611cc8d0e2f"}


def test_performance_md_names_commits_only_in_its_tables_rows():
    """performance.md's prose says where the time goes; which commit a figure ran on is in its table's row."""
    lines = (REPO / "docs" / "performance.md").read_text().splitlines()
    in_rows = [line for line in lines if line.startswith("|")]
    assert len([line for line in in_rows if _commits(line)]) >= 10
    assert [line for line in lines if not line.startswith("|") and _commits(line)] == []
