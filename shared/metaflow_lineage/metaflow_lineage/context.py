"""One step's run as plain data, from Metaflow's ``current``: names, deterministic run ids, parents.

Run ids are UUIDs derived from the run's names, so every process (each step is one) computes the same
id for the same run, and a second emission of an event is the same event:

- the flow run: ``<namespace>/<flow>/<run id>``. ``resume`` starts a new Metaflow run, so a new flow
  run; it names the run it resumed (``metaflow.origin_run_id``), and its first step that runs starts it;
- a step run: the task's pathspec and its attempt, so a retry is a run of its own and each split of a
  ``foreach`` (a task of its own) too.

When an Airflow task (or any OpenLineage-instrumented scheduler) starts the flow, it passes its run as
``OPENLINEAGE_PARENT_ID`` (``namespace/job/run id``, the form OpenLineage's Airflow macros and its Spark
integration use) and the root as ``OPENLINEAGE_ROOT_PARENT_ID``: the flow run's parent is that run.
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRef:
    """A run of another job: an OpenLineage parent or root."""

    namespace: str
    job: str
    run_id: str

    @classmethod
    def parse(cls, text: str | None) -> RunRef | None:
        """``namespace/job/run id``; None when absent, or malformed (said in the log: a server would refuse
        the event that named it). The namespace holds no slash, the run id none either."""
        if not text:
            return None
        try:
            namespace, rest = text.split("/", 1)
            job, run_id = rest.rsplit("/", 1)
            if str(uuid.UUID(run_id)) != run_id.lower():  # the spec's form only: 8-4-4-4-12 hex digits
                raise ValueError(run_id)
        except ValueError:
            log.warning("the parent run %r is not namespace/job/run id: the flow run has no parent", text)
            return None
        return cls(namespace, job, run_id)


def first_of_run(folder: Path, flow: str, run_id: str) -> bool:
    """True once per flow run, for the first step of it that runs (with ``resume``, not always ``start``):
    the step that creates the run's marker in ``folder``."""
    marker = folder / f"{flow}-{run_id}.started"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def run_uuid(*names: str) -> str:
    """A run id derived from the run's names: the same in every process."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "metaflow:" + "/".join(names)))


@dataclass(frozen=True)
class StepRun:
    namespace: str  # OpenLineage's job namespace
    flow: str
    run_id: str
    step: str
    task_id: str
    attempt: int
    last_attempt: bool  # no retry is left: a failure here fails the flow run
    upstream: tuple[str, ...]  # the steps whose ends lead to this one
    is_end: bool
    started_ms: int
    description: str = ""
    flow_description: str = ""
    code_file: str | None = None  # the flow's file
    origin_run_id: str | None = None  # the run this one resumed
    parameters: dict[str, str] = field(default_factory=dict)
    nominal_time: str | None = None  # the time the run is for (ISO 8601, UTC)
    parent: RunRef | None = None
    root: RunRef | None = None

    @property
    def pathspec(self) -> str:
        return f"{self.flow}/{self.run_id}/{self.step}/{self.task_id}"

    @property
    def job_name(self) -> str:
        return f"{self.flow}.{self.step}"

    @property
    def flow_run_uuid(self) -> str:
        return run_uuid(self.namespace, self.flow, self.run_id)

    @property
    def step_run_uuid(self) -> str:
        return run_uuid(self.namespace, self.pathspec, str(self.attempt))

    @property
    def flow_run(self) -> RunRef:
        return RunRef(self.namespace, self.flow, self.flow_run_uuid)


def _nominal_time(value, timezone: str) -> str:
    """A parameter's time as UTC; a time without a zone is in ``timezone``."""
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone))
    return moment.astimezone(dt.UTC).isoformat()


def from_current(step_name: str, flow, options: dict) -> StepRun:
    """The running step, from Metaflow's ``current`` (its public API inside a step) and the decorator's
    options: ``namespace``, ``retries``, ``parameters``, ``nominal_time`` and ``timezone``."""
    from metaflow import current

    graph = current.graph["steps"]
    parameters = {name: str(getattr(flow, name)) for name in options.get("parameters", ())}
    nominal = options.get("nominal_time")
    parent = RunRef.parse(os.environ.get("OPENLINEAGE_PARENT_ID"))
    return StepRun(
        namespace=options.get("namespace") or os.environ.get("OPENLINEAGE_NAMESPACE") or "default",
        flow=current.flow_name,
        run_id=str(current.run_id),
        step=step_name,
        task_id=str(current.task_id),
        attempt=int(current.retry_count),
        last_attempt=int(current.retry_count) >= options.get("retries", 0),
        upstream=tuple(sorted(name for name, info in graph.items() if step_name in info["next"])),
        is_end=step_name == current.graph["end_step"],
        started_ms=int(time.time() * 1000),
        description=(graph[step_name].get("doc") or "").strip(),
        flow_description=(type(flow).__doc__ or "").strip().split("\n")[0],
        code_file=inspect.getsourcefile(type(flow)),
        origin_run_id=str(current.origin_run_id) if current.origin_run_id else None,
        parameters=parameters,
        nominal_time=_nominal_time(getattr(flow, nominal), options.get("timezone", "UTC")) if nominal else None,
        parent=parent,
        root=RunRef.parse(os.environ.get("OPENLINEAGE_ROOT_PARENT_ID")) or parent,
    )
