"""The variables the project sets in a tool's environment, marked with the values it set, so that the
environment read again (by a task, a child process, a test's next state directory) tells the project's
own settings from a user's: a variable is the project's while it holds the value the project gave it."""

from __future__ import annotations

import hashlib


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def mark(values: dict[str, str]) -> str:
    """The mark of what the project set: each name with a digest of its value."""
    return ",".join(f"{name}:{_digest(value)}" for name, value in sorted(values.items()))


def project_set(environ: dict[str, str], marker: str) -> set[str]:
    """The variables of ``environ`` that still hold what the project set (``marker`` names its mark)."""
    marked = dict(entry.rsplit(":", 1) for entry in environ.get(marker, "").split(",") if ":" in entry)
    return {name for name, digest in marked.items() if name in environ and _digest(environ[name]) == digest}
