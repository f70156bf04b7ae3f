"""Table writes that lost a race with another writer are recomputed and committed again.

Iceberg commits are optimistic. When another writer committed first, Iceberg itself re-applies a
plain append on the new state; what it cannot resolve is surfaced: a MERGE whose rows another
writer changed meanwhile (ValidationException "found conflicting files"), a MERGE planned across
another commit ("table has been concurrently modified"), Iceberg's own retries running out
(CommitFailedException), or the local SQLite catalog staying locked. Each write of this project
is recomputed from the tables' current state on every attempt (changes, fingerprints, MERGE), so a
second attempt after a commit that did land writes nothing, and nothing is written twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTEMPTS = 6
FIRST_WAIT_S = 0.5

# Java (Iceberg, SQLite JDBC) and Python (pyiceberg) exceptions that mean "another writer won".
_CONFLICT_CLASSES = {
    "org.apache.iceberg.exceptions.CommitFailedException",
    "pyiceberg.exceptions.CommitFailedException",
}
# Iceberg uses ValidationException for schema errors too: only these messages are races.
_VALIDATION_CLASS = "org.apache.iceberg.exceptions.ValidationException"
_RACE_MESSAGES = ("conflicting", "missing required files to delete", "found new delete")
# Any class: the SQLite catalog busy, or Spark planning a MERGE across another writer's commit
# (it loads the table more than once; the catalog cache is off so sessions see other processes' commits).
_ANY_CLASS_MESSAGES = ("database is locked", "sqlite_busy", "table has been concurrently modified")
# Creating what another writer created a moment earlier: the retry finds it there.
_EXISTS_CLASSES = {
    "org.apache.iceberg.exceptions.AlreadyExistsException",
    "org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException",
    "org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException",
    "pyiceberg.exceptions.NamespaceAlreadyExistsError",
    "pyiceberg.exceptions.TableAlreadyExistsError",
}


class CommitConflict(RuntimeError):
    """A write kept losing to other writers; the table is as the last successful commit left it."""


def _causes(error: BaseException):
    """(class name, message) of the error and everything it wraps, Java causes included."""
    seen: BaseException | None = error
    while seen is not None:
        yield f"{type(seen).__module__}.{type(seen).__name__}", str(seen)
        java = getattr(seen, "java_exception", None) or getattr(seen, "_origin", None)
        while java is not None:
            try:
                yield java.getClass().getName(), str(java.getMessage() or "")
                java = java.getCause()
            except Exception:  # a Java object from a stopped JVM: nothing more to learn
                break
        seen = seen.__cause__ or seen.__context__


def _race(name: str, message: str, creating: bool) -> bool:
    text = message.lower()
    return (
        name in _CONFLICT_CLASSES
        or (creating and name in _EXISTS_CLASSES)
        or (name == _VALIDATION_CLASS and any(m in text for m in _RACE_MESSAGES))
        or any(m in text for m in _ANY_CLASS_MESSAGES)
    )


def lost_race(error: BaseException, creating: bool = False) -> str | None:
    """How ``error`` says another writer committed (or, ``creating``, created it) first; None if it does not."""
    races = [(name, message) for name, message in _causes(error) if _race(name, message, creating)]
    if not races:
        return None
    name, message = races[-1]  # the innermost: Iceberg's or SQLite's own words, not a wrapper's
    return f"{name.rsplit('.', 1)[-1]}: {message.splitlines()[0][:200] if message else ''}"


def retry_on_conflict(what: str, attempt: Callable[[], T], *, creating: bool = False, attempts: int | None = None) -> T:
    """Run ``attempt()`` until it commits; on a lost race wait (growing, jittered) and run it again.

    ``attempt`` must recompute its write from the tables' current state. Other errors pass through
    at once; after ``attempts`` (default ATTEMPTS) lost races CommitConflict says so.
    """
    attempts = attempts or ATTEMPTS
    for number in range(1, attempts + 1):
        try:
            return attempt()
        except Exception as error:
            race = lost_race(error, creating)
            if race is None:
                raise
            if number == attempts:
                raise CommitConflict(
                    f"{what}: another writer committed first {attempts} times in a row "
                    f"({race}); nothing of this attempt was committed. "
                    "Run the task again when the other writers are done."
                ) from error
            wait = FIRST_WAIT_S * 2 ** (number - 1) * random.uniform(0.5, 1.5)
            log.warning(
                "%s lost a race with another writer (%s); recomputing from the table's current state "
                "in %.1f s (attempt %d of %d)",
                what,
                race,
                wait,
                number + 1,
                attempts,
            )
            time.sleep(wait)
    raise AssertionError("unreachable")
