"""Lineage for Metaflow flows: OpenLineage run events and DataHub records from one flow decorator.

from metaflow import FlowSpec, step
from metaflow_lineage import Dataset, lineage, record

@lineage
class CountFlow(FlowSpec):
    @step
    def start(self):
        record(read=[Dataset("file", "/data/in.csv")], wrote=[Dataset("file", "/data/out.csv").at(rows=3)])
        self.next(self.end)
    ...
"""

from metaflow_lineage.datasets import Dataset, Model, StepLineage, record

__all__ = ["Dataset", "Model", "StepLineage", "lineage", "record"]


def __getattr__(name: str):
    # the decorator imports Metaflow: only a flow needs it, not `metaflow-lineage ship`
    if name == "lineage":
        from metaflow_lineage.decorator import lineage

        return lineage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
