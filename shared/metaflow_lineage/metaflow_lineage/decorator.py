"""``@lineage`` above a flow: every step reports its run to OpenLineage and DataHub.

``lineage`` is a FlowMutator (Metaflow's public extension API): it puts ``lineage_of_step``, a
UserStepDecorator, on every step, with what it learns of the flow when Metaflow builds it (its
parameters, each step's ``@retry``). A step's start writes its START event (and the flow run's, from
the first step of the run that runs); its end writes its COMPLETE or FAIL with what it read and wrote
(``datasets.record``), and the flow run's end after the end step or a failure with no retry left.
Each goes to the outbox first and is shipped from there by a process of its own (``delivery.py``); the
run's last step ships what is left of the run before it ends. Lineage never fails a step: a problem is
logged.
"""

from __future__ import annotations

import logging
import time

from metaflow import FlowMutator, UserStepDecorator

from metaflow_lineage import context, datasets, delivery
from metaflow_lineage import datahub_records as datahub
from metaflow_lineage import openlineage_events as openlineage

log = logging.getLogger(__name__)


def _error(exception: BaseException) -> str:
    return f"{type(exception).__name__}: {exception}"


class lineage_of_step(UserStepDecorator):  # noqa: N801 - a decorator's name, as Metaflow's are
    """Reports one step's run (``@lineage`` puts it on every step). ``started`` and ``finished`` say what a
    step's start and end record; a subclass records them its own way (the NYC taxi project spools them
    for its recorder). A subclass defines ``init`` too (calling this one): Metaflow wants each decorator
    class that takes arguments to define it."""

    def init(self, *args, **kwargs):
        self.options = kwargs

    def pre_step(self, step_name, flow, inputs=None):
        self._step = None
        try:
            datasets.forget()
            self._step = context.from_current(step_name, flow, self.options)
            self.started(self._step, flow)
        except Exception as error:  # lineage never fails the flow
            log.warning("lineage of step %s not written: %s", step_name, _error(error))

    def post_step(self, step_name, flow, exception=None):
        if self._step is not None:
            step = self._step
            try:
                failed_for_good = exception is not None and step.last_attempt and not self.options.get("caught")
                self.finished(step, flow, exception, ends_run=step.is_end or failed_for_good)
            except Exception as error:  # lineage never fails the flow
                log.warning("lineage of step %s not written: %s", step_name, _error(error))
        return (exception, None) if exception else (None, None)

    def started(self, step: context.StepRun, flow) -> None:
        """The step run's START, and the flow run's from the first step of the run that runs."""
        self._outbox = delivery.Outbox()
        events, records = [], []
        if self._outbox.first_of_run(step.flow, step.run_id):
            events.append(openlineage.flow_event(step, "START", step.started_ms))
            records += datahub.flow_started(step, self.options.get("env", "PROD"))
        events.append(openlineage.step_event(step, "START", step.started_ms))
        self._deliver("start", events, records)

    def finished(self, step: context.StepRun, flow, exception: BaseException | None, ends_run: bool) -> None:
        """The step run's end with what it read and wrote; the flow run's end after its last step."""
        env, ended = self.options.get("env", "PROD"), int(time.time() * 1000)
        used = datasets.collect(flow, step.pathspec)
        error = _error(exception) if exception is not None else None
        state = "FAIL" if error else "COMPLETE"
        events = [openlineage.step_event(step, state, ended, used, error)]
        records = datahub.step_ended(step, used, env, ended, failed=error is not None)
        if ends_run:  # a failure @catch caught does not fail the flow run, even in its last step
            flow_failed = error is not None and not self.options.get("caught")
            events.append(
                openlineage.flow_event(
                    step, "FAIL" if flow_failed else "COMPLETE", ended, error if flow_failed else None
                )
            )
            records += datahub.flow_ended(step, env, ended, failed=flow_failed)
        self._deliver("end", events, records, ends_run)

    def _deliver(self, moment: str, events: list, records: list, ends_run: bool = False) -> None:
        step = self._step
        payload = [] if delivery.openlineage_disabled() else [openlineage.as_dict(e) for e in events]
        run = f"{step.flow}.{step.run_id}."
        # named by the run, then the time it is written: a run's files sort in the order they were written
        self._outbox.put(
            f"{run}{time.time_ns():020d}.{step.step}.{step.task_id}.{step.attempt}.{moment}", payload, records
        )
        if not self.options.get("ship", True):  # written here, shipped later by `metaflow-lineage ship`
            return
        if not ends_run:
            delivery.ship_in_background(self._outbox, run)
            return
        # the run's last step sends what is left of the run before it ends: a finished run's lineage has
        # arrived, or the step's log says where it waits
        problems = self._outbox.ship(run, seconds=self.options.get("ship_seconds", 60))
        for problem in problems:
            print(problem, flush=True)
        waiting = len(self._outbox.pending_files(run))
        if waiting and not problems:  # a destination not set: nothing failed, and nothing left
            print(
                f"lineage of this run waits in {self._outbox.pending}: {waiting} file(s) for a destination not set",
                flush=True,
            )
        # what is left gets one more try after the step, by a shipper of its own, not a manual ship only
        if problems:
            delivery.ship_in_background(self._outbox, run)


class lineage(FlowMutator):  # noqa: N801
    """``@lineage`` or ``@lineage(namespace=..., env=..., nominal_time=<parameter>, timezone=..., ship=...,
    ship_seconds=...)``.
    A subclass names its own step decorator in ``step_decorator``."""

    step_decorator = lineage_of_step

    def init(self, *args, **kwargs):
        self.options = kwargs

    def mutate(self, mutable_flow):
        parameters = sorted(name for name, _ in mutable_flow.parameters)
        for _, step in mutable_flow.steps:
            specs = {name: kwargs for name, _, _, kwargs in step.decorator_specs}
            retries = int(specs["retry"].get("times", 3)) if "retry" in specs else 0
            # Metaflow calls init only where the class itself defines it: a subclass without one has no options
            options = {**getattr(self, "options", {}), "parameters": parameters, "retries": retries}
            options["caught"] = "catch" in specs  # @catch: a failure of the step does not end the flow
            step.add_decorator(self.step_decorator, deco_kwargs=options, duplicates=step.IGNORE)
