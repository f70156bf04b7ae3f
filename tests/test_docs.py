"""The docs state how things are today: a run's commit is named only in docs/performance.md, beside the
figure it printed; history lives in git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _commits(text: str) -> set[str]:
    """The words of ``text`` that name a commit of this repository."""
    words = {w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w) and re.search(r"\d", w)}
    return {
        w
        for w in words
        if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{w}^{{commit}}"], capture_output=True).returncode
        == 0
    }


def test_no_doc_but_performance_md_names_a_commit():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "infra").rglob("*.md"))]
    docs += sorted((REPO / "shared").glob("*/README.md"))
    named = {str(p.relative_to(REPO)): sorted(_commits(p.read_text())) for p in docs if p.name != "performance.md"}
    assert len(named) >= 10
    assert {doc: commits for doc, commits in named.items() if commits} == {}
    # the check finds a commit where one is named (this repository's first)
    first = subprocess.run(
        ["git", "-C", str(REPO), "rev-list", "--max-parents=0", "HEAD"], capture_output=True, text=True
    ).stdout.split()[0]
    assert _commits(f"ran at `{first[:7]}`") == {first[:7]}
