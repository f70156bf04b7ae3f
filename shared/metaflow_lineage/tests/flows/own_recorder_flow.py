"""A caller that records each step's run its own way: a subclass of the package's step decorator."""

import json
import os

from metaflow import FlowSpec, Parameter, step

from metaflow_lineage import Dataset, record
from metaflow_lineage.decorator import lineage, lineage_of_step


class to_a_file(lineage_of_step):  # noqa: N801
    def init(self, *args, **kwargs):
        super().init(*args, **kwargs)

    def _write(self, entry: dict) -> None:
        with open(os.environ["OWN_RECORDS"], "a") as out:
            out.write(json.dumps(entry) + "\n")

    def started(self, step, flow):
        self._write({"kind": "started", "pathspec": step.pathspec, "upstream": list(step.upstream)})

    def finished(self, step, flow, exception, ends_run):
        self._write({"kind": "finished", "pathspec": step.pathspec, "ends_run": ends_run, "size": flow.size})


class own_lineage(lineage):  # noqa: N801
    step_decorator = to_a_file


@own_lineage
class OwnRecorderFlow(FlowSpec):
    size = Parameter("size", default=3)

    @step
    def start(self):
        record(wrote=[Dataset("file", "/data/out.csv").at(rows=self.size)])
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    OwnRecorderFlow()
