"""Small HTML pieces the pages are made of, and where each page lives in the site.

Every text that comes from the records goes through ``esc``; every link is relative to the site's
root (``href``), so the site works from ``file://`` and from any folder of any static host.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import re
from collections.abc import Iterable


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


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


# ---- pieces ----------------------------------------------------------------------------------------


def link(target: str, text, cls: str | None = None, title: str | None = None) -> str:
    extra = (f' class="{cls}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
    return f'<a href="{esc(target)}"{extra}>{esc(text)}</a>'


def badge(text: str, kind: str) -> str:
    """A coloured label: a tool (its colour), a run state, a node kind."""
    return f'<span class="badge {esc(kind_class(kind))}">{esc(text)}</span>'


def kind_class(text: str) -> str:
    return "k-" + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def table(
    headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "", row_ids: list[str] | None = None
) -> str:
    """A table; the cells are HTML already (escape the texts before)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        row_id = f' id="{row_ids[i]}"' if row_ids and row_ids[i] else ""
        body.append(f"<tr{row_id}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    if not body:
        return '<p class="empty">nothing recorded</p>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def pairs(items: Iterable[tuple[str, str]]) -> str:
    """A definition list; the values are HTML already."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items if v) + "</dl>"


def section(title: str, body: str, anchor: str | None = None) -> str:
    return f"<section{f' id={chr(34)}{anchor}{chr(34)}' if anchor else ''}><h2>{esc(title)}</h2>{body}</section>"


def code(text) -> str:
    return f"<code>{esc(text)}</code>"


def short(version: str | None, keep: int = 24) -> str:
    """A long version (file names with hashes) shortened for a table; the whole one on hover."""
    if not version:
        return "?"
    text = version if len(version) <= keep else version[: keep - 1] + "…"
    return f'<code title="{esc(version)}">{esc(text)}</code>'


def moment(iso: str | None) -> str:
    """An ISO time as people read it, in UTC."""
    if not iso:
        return "?"
    try:
        parsed = dt.datetime.fromisoformat(iso)
    except ValueError:
        return esc(iso)
    if parsed.tzinfo:
        parsed = parsed.astimezone(dt.UTC)
        return esc(parsed.strftime("%Y-%m-%d %H:%M:%S UTC"))
    return esc(parsed.strftime("%Y-%m-%d %H:%M"))


def millis(value: int | None) -> str:
    return moment(dt.datetime.fromtimestamp(value / 1000, dt.UTC).isoformat()) if value else "?"


def seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"
