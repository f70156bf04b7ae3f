from metaflow import FlowSpec, step

from metaflow_lineage import Dataset, lineage, record

ORDERS = Dataset("postgres://db:5432", "shop.public.orders")
DAILY = Dataset("s3://lake", "marts/daily_orders")


@lineage
class DailyOrdersFlow(FlowSpec):
    @step
    def start(self):
        record(
            read=[ORDERS.at(version="42", rows=120)],
            wrote=[DAILY.at(rows=7, columns_from={"orders": [(ORDERS, "id")]})],
        )
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    DailyOrdersFlow()
