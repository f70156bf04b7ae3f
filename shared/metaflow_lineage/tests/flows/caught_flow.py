from metaflow import FlowSpec, catch, step

from metaflow_lineage import lineage


def fail():
    raise RuntimeError("caught, and the flow goes on")


@lineage
class CaughtFlow(FlowSpec):
    @catch(var="failure")
    @step
    def start(self):
        fail()
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    CaughtFlow()
