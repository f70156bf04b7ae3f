"""Where each page of the site lives, how its texts read (times, durations), and the Jinja environment that
renders the pages from ``templates/``.

Every link is relative to the site's root (``href``), so the site works from ``file://`` and from any folder
of any static host. The templates escape every value (autoescape); only the pictures drawn by code
(``drawing``, ``plot``) come in as ``Markup``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined

from nyc_taxi.lineage.read.graph import Node
from nyc_taxi.lineage.read.runs import JobRun


def _digest(text: str, length: int = 10) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


# ---- where pages live ------------------------------------------------------------------------------


def safe_name(text: str) -> str:
    """A file name for a dataset, job or run: the name itself when it is safe, otherwise its safe
    characters and a short hash of it (two names never share a file)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip(".")
    return safe if safe == text and safe else f"{safe}-{_digest(text, 8)}"


def dataset_path(name: str) -> str:
    return f"datasets/{safe_name(name)}.html"


def job_path(name: str) -> str:
    return f"jobs/{safe_name(name)}.html"


def run_path(run_id: str) -> str:
    return f"runs/{safe_name(run_id)}.html"


def card_path(run_id: str) -> str:
    return f"cards/{safe_name(run_id)}.html"


def node_path(node: Node) -> str:
    return job_path(node.name) if node.kind == "job" else dataset_path(node.name)


def version_anchor(version: str) -> str:
    """Versions hold quotes, commas and @ (file versions): an anchor from their hash."""
    return "v-" + _digest(version, 12)


def check_anchor(check: str) -> str:
    return "check-" + safe_name(check)


def column_anchor(column: str) -> str:
    return "column-" + safe_name(column)


def href(path: str, root: str) -> str:
    """A site path as a link from a page ``root`` levels below the site's root ("" or "../")."""
    return root + path


def kind_class(text: str) -> str:
    """The CSS class of a badge: a tool (its colour), a run state, a node kind."""
    return "k-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---- how texts read --------------------------------------------------------------------------------


def run_name(run: JobRun) -> str:
    """What a user calls a run: the tool's run id (Airflow's run id, Metaflow's pathspec)."""
    return run.label or run.run_id


def moment(iso: str | None) -> str:
    """An ISO time as people read it, in UTC."""
    if not iso:
        return "?"
    try:
        parsed = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if parsed.tzinfo:
        return parsed.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return parsed.strftime("%Y-%m-%d %H:%M")


def millis(value: int | None) -> str:
    return moment(dt.datetime.fromtimestamp(value / 1000, dt.UTC).isoformat()) if value else "?"


def seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"


def formatted(value, spec: str) -> str:
    """``format(value, spec)``: Jinja's own ``format`` filter is printf-style, without ``,`` or ``%``."""
    return format(value, spec)


def by_dataset_and_version(pairs) -> list[tuple[str, str | None]]:
    """(dataset, version) pairs in reading order (a version may be unknown: None)."""
    return sorted(pairs, key=lambda pair: (pair[0], pair[1] or ""))


# ---- the templates -----------------------------------------------------------------------------------


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("nyc_taxi.lineage.read.site", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        # the records leave many values unset: an unset one reads as nothing, never as "None"
        finalize=lambda value: "" if value is None else value,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals.update(
        dataset_path=dataset_path,
        job_path=job_path,
        run_path=run_path,
        card_path=card_path,
        node_path=node_path,
        version_anchor=version_anchor,
        check_anchor=check_anchor,
        column_anchor=column_anchor,
        href=href,
        kind_class=kind_class,
        run_name=run_name,
    )
    env.filters.update(
        moment=moment,
        millis=millis,
        seconds=seconds,
        formatted=formatted,
        by_dataset_and_version=by_dataset_and_version,
        # a value as Python writes it, None as "None": a failing row's NULL, a parameter, told from ""
        text=str,
        integer=int,  # Python's: a count that is not a whole number is an error, not Jinja's quiet 0
    )
    return env


def render(template: str, **facts) -> str:
    return environment().get_template(template).render(**facts)
