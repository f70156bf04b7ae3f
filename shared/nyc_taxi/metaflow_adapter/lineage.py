"""Lineage for the taxi flow: the Metaflow lineage package's decorator, recording to this project's
recorder.

    @lineage(nominal_time="as_of_datetime", variant="model")
    class TrainForecastModelFlow(FlowSpec):
        @step
        def compute_actuals(self):
            self.actuals = forecast.compute_actuals(...)   # returns what it read and wrote

``lineage`` is the package's FlowMutator (``metaflow_lineage``, Metaflow's public extension API) with
this project's step decorator: the package gives each step's run (names, attempt, upstream steps, the
run resumed, parameters, the nominal time, the Airflow task that started it); the project records
it. What a step read and wrote comes from the reports its data functions returned: a ``StepReport``,
or a result carrying one as ``.report``, assigned to an artifact during the step. The flow file does
no lineage bookkeeping; the flow-specific facts (which parameter is the nominal time, which one picks
the model variant) are the mutator's arguments.

A step spends milliseconds on its lineage: it spools what its run was and what it read and wrote
(plain data), and the recorder (``recorder.py``, a process of its own) turns that into OpenLineage
events and DataHub records (with the checks, profiles and columns of the project's datasets) and
ships them while the flow goes on. The step that ends the run waits until everything is recorded, so
a finished run's lineage is complete. Emission never fails the flow.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from metaflow import current

from metaflow_lineage import decorator as package
from metaflow_lineage.context import StepRun, first_of_run
from nyc_taxi.core.jobs import PIPELINES
from nyc_taxi.core.processes import die_with_parent
from nyc_taxi.lineage.write.report import StepReport, describe_error, report_of, report_to_dict
from nyc_taxi.metaflow_adapter.recorder import StepContext, record, ship, spool

log = logging.getLogger(__name__)
NEW_YORK = "America/New_York"
# The run's last step waits this long beyond the shipping budget for the recorder to finish.
RECORDER_GRACE_SECONDS = 60.0


class report_lineage(package.lineage_of_step):  # noqa: N801 - used as @report_lineage, like Metaflow's decorators
    """Reports one step's run to this project's recorder (put on every step by ``@lineage``)."""

    def init(self, *args, **kwargs):  # Metaflow wants each decorator class that takes arguments to define it
        super().init(*args, **kwargs)

    def started(self, step: StepRun, flow) -> None:
        began, self._context = time.perf_counter(), None
        self._spool = spool()
        self._context = _context(step, flow, self.options, self._spool.settings)
        self._spool.put({"kind": "started", "context": dataclasses.asdict(self._context)})
        self._spool.start_recorder()
        self._spent = time.perf_counter() - began

    def finished(self, step: StepRun, flow, exception, ends_run: bool) -> None:
        if self._context is None:
            return
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
        if ends_run:  # the run is over when this step is: its lineage must be complete
            settings = self._spool.settings
            self._spool.wait_until_recorded(record, ship, settings.lineage_ship_seconds + RECORDER_GRACE_SECONDS)
            for warning in self._spool.warnings_about(f"{context.flow_name}/{context.run_id}/"):
                print(warning, flush=True)  # what the recorder warned of during this run, in the run's output
        else:
            self._spool.start_recorder()
        spent = self._spent + time.perf_counter() - began
        # one line in the step's log: what its lineage cost this step (`bash run bench flow` reads it)
        print(f"lineage of {context.pathspec} recorded in {spent:.3f} s", flush=True)


class lineage(package.lineage):  # noqa: N801
    """``@lineage(nominal_time=<parameter>, variant=<parameter>)`` above a flow: every step reports its lineage."""

    step_decorator = report_lineage

    def init(self, *args, **kwargs):
        super().init(*args, **{"timezone": NEW_YORK, **kwargs})  # the project's times are New York's

    def mutate(self, mutable_flow):
        # Every process that builds the flow (Metaflow's runtime, each step's task) ends with the process
        # that started it: a flow whose Airflow task was killed does not run on, orphaned, beside the
        # retry that resumes it (a step's Spark driver ends with the step: its gateway's input closes).
        die_with_parent()
        super().mutate(mutable_flow)


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


def _context(step: StepRun, flow, options: dict, settings) -> StepContext:
    """The step's run as plain data, for the recorder: the package's view of it and the project's."""
    undeclared = None
    if step.flow not in PIPELINES:  # a flow the registry does not know is described by its graph
        steps = [(name, (info.get("doc") or "").strip()) for name, info in _steps().items()]
        undeclared = (step.flow_description, current.graph["file"], steps)
    return StepContext(
        flow_name=step.flow,
        run_id=step.run_id,
        step=step.step,
        task_id=step.task_id,
        started_ms=step.started_ms,
        upstream=list(step.upstream),
        is_end=step.is_end,
        first_of_run=first_of_run(settings.lineage_dir / "metaflow" / "runs", step.flow, step.run_id),
        variant={name: str(getattr(flow, name)) for name in [options.get("variant")] if name},
        parameters=step.parameters,
        nominal_time=step.nominal_time,
        origin_run_id=step.origin_run_id,
        openlineage_parent_id=settings.openlineage_parent_id,
        openlineage_root_parent_id=settings.openlineage_root_parent_id,
        parent_airflow_task=settings.parent_airflow_task,
        undeclared=undeclared,
    )
