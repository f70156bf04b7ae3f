"""The parts the site's pages are made of: a page, and the links and badges of a run, a job, a dataset's
versions and a column's origins."""

from __future__ import annotations

from dataclasses import dataclass

from nyc_taxi.lineage.read.columns import ColumnStep
from nyc_taxi.lineage.read.graph import Node
from nyc_taxi.lineage.read.runs import JobRun
from nyc_taxi.lineage.read.site.drawing import fold
from nyc_taxi.lineage.read.site.markup import (
    badge,
    code,
    dataset_path,
    esc,
    job_path,
    link,
    moment,
    run_path,
    short,
    version_anchor,
)


@dataclass
class Page:
    path: str  # from the site's root
    title: str
    body: str
    kind: str  # graph | evolution | catalog | dataset | job | run

    @property
    def root(self) -> str:
        """The way back to the site's root from this page ("" or "../")."""
        return "../" * self.path.count("/")


def node_path(node: Node) -> str:
    return job_path(node.name) if node.kind == "job" else dataset_path(node.name)


def run_name(run: JobRun) -> str:
    """What a user calls a run: the tool's run id (Airflow's run id, Metaflow's pathspec)."""
    return run.label or run.run_id


def run_link(run: JobRun, root: str, text: str | None = None) -> str:
    return link(root + run_path(run.run_id), text or run_name(run), title=f"OpenLineage run {run.run_id}")


def job_and_run(run: JobRun, root: str) -> str:
    return f"{link(root + job_path(run.job), run.job)}<br>{run_link(run, root)} {state_badge(run.state)}"


def state_badge(state: str) -> str:
    return badge(state, "state-" + state)


def tool_badge(node: Node) -> str:
    return badge(node.label, node.tool)


def version_links(pairs, root: str) -> str:
    """dataset@version links, one a line: the dataset's page, at that version (``pairs``: (dataset,
    version); a DAG or flow run names each version its runs read)."""
    return "<br>".join(
        link(root + dataset_path(name) + (f"#{version_anchor(version)}" if version else ""), name)
        + " @ "
        + short(version)
        for name, version in sorted(pairs, key=lambda pair: (pair[0], pair[1] or ""))
    )


def version_ref(dataset: str, version: str | None, root: str) -> str:
    """A version of a dataset, linked to its row in the dataset's versions (rows checked but refused: no
    version)."""
    if not version:
        return '<span class="empty">not committed</span>'
    return link(root + dataset_path(dataset) + f"#{version_anchor(version)}", version[:24])


def origins(step: ColumnStep) -> str:
    """Where a column comes from in the end, by dataset: ``noaa…published.{day1…day31, month}``."""
    by_dataset: dict[str, list[str]] = {}
    for dataset, column in sorted(step.origins()):
        by_dataset.setdefault(dataset, []).append(column)
    return ", ".join(
        f"{dataset}.{columns[0]}" if len(columns) == 1 else f"{dataset}.{{{fold(columns)}}}"
        for dataset, columns in by_dataset.items()
    )


def parameter_list(parameters: dict[str, str]) -> str:
    return "<br>".join(f"{esc(k)}={code(v)}" for k, v in sorted(parameters.items()) if k != "try_number")


# ---- the trace as a tree ------------------------------------------------------------------------------


def trace_run(step: dict, root: str, top: bool = False) -> str:
    """A run and the versions it read, each with the runs that wrote it, down to the published files."""
    keep = ("month", "model", "as_of_datetime")
    extra = ", ".join(f"{k} {step['parameters'][k]}" for k in keep if k in step["parameters"])
    title = (
        f"{badge(step['state'], 'state-' + step['state'])} {link(root + job_path(step['job']), step['job'])} "
        f"{link(root + run_path(step['run_id']), step['label'] or step['run_id'])}"
        + (f" ({esc(extra)})" if extra else "")
        + f" · {moment(step['started'])}"
    )
    items = []
    if step["started_by"]:
        chain = " ← ".join(
            link(root + run_path(r["run_id"]), f"{r['job']} {r['label'] or r['run_id']}") for r in step["started_by"]
        )
        items.append(f'<li class="in">in {chain}</li>')
    items += [f"<li>{trace_version(v, root)}</li>" for v in step["read"]]
    children = f"<ul>{''.join(items)}</ul>" if items else ""
    return f'<div class="trace-run{" top" if top else ""}">{title}{children}</div>'


def trace_version(step: dict, root: str, verb: str = "read") -> str:
    version = step["version"] or ""
    target = root + dataset_path(step["dataset"]) + (f"#{version_anchor(version)}" if version else "")
    line = f"{verb} {link(target, step['dataset'], cls='version-link')} @ {short(version, 48)}"
    if step["commits"] > 1:
        line += f" (holds the commits of {step['commits']} runs)"
    if step["locations"]:
        line += '<div class="files">' + "<br>".join(code(loc) for loc in step["locations"]) + "</div>"
    if step["repeated"]:
        return line + ' <span class="empty">(traced above)</span>'
    if not step["written_by"]:
        return line + ' <span class="empty">— published: no run of ours wrote it</span>'
    writers = "".join(f"<li>written by {trace_run(w, root)}</li>" for w in step["written_by"])
    return f"<details open><summary>{line}</summary><ul>{writers}</ul></details>"
