"""Lineage for Metaflow flows, through Metaflow's public extension API.

    @lineage(nominal_time="as_of_datetime", variant="model")
    class TrainForecastModelFlow(FlowSpec):
        @step
        def compute_actuals(self):
            self.actuals = forecast.compute_actuals(...)   # returns what it read and wrote

``lineage`` is a FlowMutator: it puts ``report_lineage`` (a UserStepDecorator) on every step. What
a step read and wrote comes from the reports its data functions returned: a ``StepReport``, or a
result carrying one as ``.report``, assigned to an artifact during the step. The flow file does no
lineage bookkeeping; the flow-specific facts (which parameter is the nominal time, which one picks
the model variant) are the mutator's arguments.

A step spends milliseconds on its lineage: it spools what its run was and what it read and wrote
(plain data), and the recorder (``recorder.py``, a process of its own) turns that into OpenLineage
events and DataHub records and ships them while the flow goes on. The step that ends the run waits
until everything is recorded, so a finished run's lineage is complete. Emission never fails the flow.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import time
from zoneinfo import ZoneInfo

from metaflow import FlowMutator, UserStepDecorator, current

from nyc_taxi.core.jobs import PIPELINES
from nyc_taxi.core.processes import die_with_parent
from nyc_taxi.lineage.write.report import StepReport, describe_error, report_of, report_to_dict
from nyc_taxi.metaflow_adapter.recorder import StepContext, ends_run, record, ship, spool

log = logging.getLogger(__name__)
NEW_YORK = ZoneInfo("America/New_York")
# The run's last step waits this long beyond the shipping budget for the recorder to finish.
RECORDER_GRACE_SECONDS = 60.0


class report_lineage(UserStepDecorator):  # noqa: N801 - used as @report_lineage, like Metaflow's decorators
    """Reports one step's run to OpenLineage and DataHub (put on every step by ``@lineage``)."""

    def init(self, *args, **kwargs):
        self.options = kwargs

    def pre_step(self, step_name, flow, inputs=None):
        began, self._context = time.perf_counter(), None
        try:
            self._spool = spool()
            self._context = _context(step_name, flow, self.options, self._spool.settings)
            self._spool.put({"kind": "started", "context": dataclasses.asdict(self._context)})
            self._spool.start_recorder()
        except Exception as error:  # lineage must never fail the flow
            log.warning("lineage of step %s not spooled: %s", step_name, error)
        self._spent = time.perf_counter() - began

    def post_step(self, step_name, flow, exception=None):
        if self._context is not None:
            try:
                self._finish(flow, exception)
            except Exception as error:  # lineage must never fail the flow
                log.warning("lineage of step %s not spooled: %s", step_name, error)
        return (exception, None) if exception else (None, None)

    def _finish(self, flow, exception) -> None:
        began = time.perf_counter()
        context = self._context
        report = _collect(flow, context.pathspec)
        refused = report_of(exception) if exception is not None else None  # a check's refusal says what it read
        entry = {
            "kind": "finished",
            "context": dataclasses.asdict(context),
            "report": report_to_dict(report + refused if refused else report),
            "error": describe_error(exception) if exception is not None else None,
            "ended_ms": int(time.time() * 1000),
        }
        self._spool.put(entry)
        if ends_run(entry):  # the run is over when this step is: its lineage must be complete
            settings = self._spool.settings
            self._spool.wait_until_recorded(record, ship, settings.lineage_ship_seconds + RECORDER_GRACE_SECONDS)
            for warning in self._spool.warnings_about(f"{context.flow_name}/{context.run_id}/"):
                print(warning, flush=True)  # what the recorder warned of during this run, in the run's output
        else:
            self._spool.start_recorder()
        spent = self._spent + time.perf_counter() - began
        # one line in the step's log: what its lineage cost this step (`bash run bench flow` reads it)
        print(f"lineage of {context.pathspec} recorded in {spent:.3f} s", flush=True)


class lineage(FlowMutator):  # noqa: N801
    """``@lineage(nominal_time=<parameter>, variant=<parameter>)`` above a flow: every step reports its lineage."""

    def init(self, *args, **kwargs):
        self.options = kwargs

    def mutate(self, mutable_flow):
        # Every process that builds the flow (Metaflow's runtime, each step's task) ends with the process
        # that started it: a flow whose Airflow task was killed does not run on, orphaned, beside the
        # retry that resumes it (a step's Spark driver ends with the step: its gateway's input closes).
        die_with_parent()
        parameters = sorted(name for name, _ in mutable_flow.parameters)
        for _, step in mutable_flow.steps:
            step.add_decorator(
                report_lineage, deco_kwargs={**self.options, "parameters": parameters}, duplicates=step.IGNORE
            )


def _collect(flow, pathspec: str) -> StepReport:
    """The reports this step's data functions returned: in artifacts, not yet recorded by a step."""
    total = StepReport()
    for value in list(vars(flow).values()):
        report = report_of(value)
        if report is not None and report.recorded_by is None:
            report.recorded_by = pathspec
            total = total + report
    return total


def _steps() -> dict[str, dict]:
    """The running flow's steps as Metaflow describes them (``current.graph``): name -> doc, next steps."""
    return current.graph["steps"]


def _upstream_of(step: str) -> list[str]:
    return sorted(name for name, info in _steps().items() if step in info["next"])


def _first_step_of_run(flow_name: str, run_id: str, settings) -> bool:
    """The first step this run executes starts the flow run (with `resume`, that is not `start`)."""
    marker = settings.lineage_dir / "metaflow" / "runs" / f"{flow_name}-{run_id}.started"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _context(step: str, flow, options: dict, settings) -> StepContext:
    """The step's run as plain data, from Metaflow's ``current`` and the flow's parameters."""
    flow_name, run_id = current.flow_name, str(current.run_id)
    nominal = options.get("nominal_time")
    nominal_time = (
        dt.datetime.fromisoformat(str(getattr(flow, nominal))).replace(tzinfo=NEW_YORK).astimezone(dt.UTC).isoformat()
        if nominal
        else None
    )
    undeclared = None
    if flow_name not in PIPELINES:  # a flow the registry does not know is described by its graph
        doc = (type(flow).__doc__ or "").strip().split("\n")[0]
        steps = [(name, (info.get("doc") or "").strip()) for name, info in _steps().items()]
        undeclared = (doc, current.graph["file"], steps)
    return StepContext(
        flow_name=flow_name,
        run_id=run_id,
        step=step,
        task_id=str(current.task_id),
        started_ms=int(time.time() * 1000),
        upstream=_upstream_of(step),
        is_end=step == current.graph["end_step"],
        first_of_run=_first_step_of_run(flow_name, run_id, settings),
        variant={name: str(getattr(flow, name)) for name in [options.get("variant")] if name},
        parameters={name: str(getattr(flow, name)) for name in options.get("parameters", ())},
        nominal_time=nominal_time,
        origin_run_id=str(current.origin_run_id) if current.origin_run_id else None,
        openlineage_parent_id=settings.openlineage_parent_id,
        openlineage_root_parent_id=settings.openlineage_root_parent_id,
        parent_airflow_task=settings.parent_airflow_task,
        undeclared=undeclared,
    )
