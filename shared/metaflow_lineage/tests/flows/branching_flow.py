"""A flow with a foreach, a retried split, a model and a step that can fail: what lineage must survive."""

import os

from metaflow import FlowSpec, Parameter, current, retry, step

from metaflow_lineage import Dataset, Model, StepLineage, lineage, record

PARTS = {part: Dataset("file", f"/data/part-{part}.csv") for part in (1, 2)}
COUNTS = Dataset("file", "/data/counts.csv")


class Counted:
    """A data function's result, carrying what it read and wrote."""

    def __init__(self, part: int, rows: int):
        self.rows = rows
        self.lineage = StepLineage(inputs=[PARTS[part].at(version=f"v{part}", rows=rows)])


@lineage(namespace="shop", nominal_time="day", timezone="America/New_York")
class BranchingFlow(FlowSpec):
    """Counts parts, then trains on the counts."""

    day = Parameter("day", default="2024-01-15T00:00")

    @step
    def start(self):
        self.parts = [1, 2]
        self.next(self.count, foreach="parts")

    @retry(times=1, minutes_between_retries=0)
    @step
    def count(self):
        """Count one part."""
        if self.input == 2 and current.retry_count == 0:
            raise RuntimeError("a transient failure of part 2")
        self.counted = Counted(self.input, rows=10 * self.input)
        self.next(self.join)

    @step
    def join(self, inputs):
        total = sum(i.counted.rows for i in inputs)
        record(wrote=[COUNTS.at(rows=total, fields={"part": "int", "rows": "int"})])
        self.next(self.train)

    @step
    def train(self):
        """Train the model on the counts."""
        record(read=[COUNTS], model=Model("parts_model", version=current.pathspec))
        if os.environ.get("FAIL_TRAINING"):  # after it recorded what it read: a failed run adds none of it
            raise ValueError("training data refused")
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    BranchingFlow()
