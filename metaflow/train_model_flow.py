"""
TrainForecastModelFlow: hourly yellow-taxi demand per pickup zone.

Reads `yellow_taxi_raw` (written by the Airflow DAG ingest_yellow_taxi_data), computes hourly
actuals on Spark, trains a seasonal-naive model (the same hour one week earlier; optionally
adjusted for rain with `weather_raw`), forecasts the next hours and writes them to Iceberg, kept beside
every other model's and origin's. Its last step scores every kept forecast whose hours have happened
(MAE, WAPE, bias, coverage): with an `as_of_datetime` in the past the run is a backtest, scored at once.

    bash run training-flow run --as_of_datetime 2024-02-15T00:00
    bash run training-flow run --as_of_datetime 2024-02-15T00:00 --model weather_adjusted

Every step reports its lineage (OpenLineage + DataHub) through @lineage, from the reports its data
functions return, with the dataset identities of the shared registry: this flow's input is the very
node Airflow writes.
"""

from metaflow import FlowSpec, card, current, step

from nyc_taxi.core import jobs
from nyc_taxi.forecast import card as cards
from nyc_taxi.forecast import steps as forecast
from nyc_taxi.metaflow_adapter.lineage import lineage
from nyc_taxi.metaflow_adapter.parameters import parameter


@lineage(nominal_time="as_of_datetime", variant="model")
class TrainForecastModelFlow(FlowSpec):
    as_of_datetime = parameter(jobs.AS_OF_DATETIME, required=True)
    lookback_days = parameter(jobs.LOOKBACK_DAYS)
    predict_horizon_hours = parameter(jobs.PREDICT_HORIZON_HOURS)
    model = parameter(jobs.MODEL)

    @step
    def start(self):
        """Check the configuration before any work."""
        self.as_of = jobs.parse_as_of(self.as_of_datetime)
        forecast.check_configuration(self.model, self.lookback_days, self.predict_horizon_hours)
        self.next(self.compute_actuals)

    @step
    def compute_actuals(self):
        """Hourly rides per zone from yellow_taxi_raw, MERGEd into yellow_rides_hourly_actuals."""
        self.actuals = forecast.compute_actuals(self.as_of, self.lookback_days, self.predict_horizon_hours)
        self.next(self.prepare_training_data)

    @step
    def prepare_training_data(self):
        """The lookback window of actuals up to as_of_datetime (and the rain per day, for the weather model)."""
        self.training = forecast.training_data(self.as_of, self.lookback_days, self.predict_horizon_hours, self.model)
        self.next(self.train_forecasting_model)

    @step
    def train_forecasting_model(self):
        """Fit the chosen model; it is versioned as this step's artifact and is an ML model in DataHub."""
        self.trained = forecast.train(self.training, self.model, version=current.pathspec)
        self.model_version = self.trained.version
        self.next(self.predict)

    @step
    def predict(self):
        """A forecast for every zone and hour of the horizon."""
        self.forecasts = forecast.predict(self.trained, self.training, self.as_of, self.predict_horizon_hours)
        self.next(self.write_forecasts_to_table)

    @step
    def write_forecasts_to_table(self):
        """MERGE the forecasts into yellow_rides_hourly_forecast, beside every other model's and origin's."""
        self.written = forecast.write_forecasts(self.forecasts)
        self.next(self.evaluate)

    @card(type="report", id="evaluation")
    @step
    def evaluate(self):
        """Score every kept forecast whose hours have actuals into yellow_rides_forecast_scores; this run's
        forecast against its actuals on the card (a backtest's at once, a forecast of the future once a
        later run has counted its hours)."""
        self.scores = forecast.score_forecasts()
        self.evaluation = forecast.evaluate(self.forecasts, self.predict_horizon_hours, self.scores)
        self.mae, self.wape, self.metrics = self.evaluation.mae, self.evaluation.wape, self.evaluation.metrics
        cards.evaluation_card(
            current.card["evaluation"], self.forecasts.values, self.evaluation.actual, self.metrics, self.model
        )
        self.next(self.end)

    @step
    def end(self):
        """Done: forecasts written, metrics stored as artifacts (mae, wape, metrics)."""
        print(f"{self.model}: as of {self.as_of}, MAE {self.mae}, WAPE {self.wape}")


if __name__ == "__main__":
    TrainForecastModelFlow()
