"""
TrainForecastModelFlow: hourly yellow-taxi demand per pickup zone.

Reads `yellow_taxi_raw` (written by the Airflow DAG ingest_yellow_taxi_data), computes hourly
actuals on Spark, trains a seasonal-naive model (the same hour one week earlier; optionally
adjusted for rain with `weather_raw`), forecasts the next hours and writes them to Iceberg. With an
`as_of_datetime` in the past the run is a backtest and is evaluated (MAE, WAPE).

    bash run training-flow run --as_of_datetime 2024-02-15T00:00
    bash run training-flow run --as_of_datetime 2024-02-15T00:00 --model weather_adjusted

Every step reports its lineage (OpenLineage + DataHub) through @lineage, with the dataset
identities of the shared registry, so this flow's input is the very node Airflow writes.
"""

from metaflow import FlowSpec, Parameter, card, current, step

from nyc_taxi import registry
from nyc_taxi.forecast import model as models
from nyc_taxi.forecast import steps as forecast
from nyc_taxi.lineage.report import DatasetUse, StepReport
from nyc_taxi.metaflow_lineage import lineage


class TrainForecastModelFlow(FlowSpec):
    as_of_datetime = Parameter("as_of_datetime", required=True, type=str,
                               help="Forecast origin, New York local time (e.g. 2024-02-15T00:00): "
                                    "training uses the hours before it, forecasts start at it")
    lookback_days = Parameter("lookback_days", default=30, type=int, help="Days of actuals to train on")
    predict_horizon_hours = Parameter("predict_horizon_hours", default=24, type=int, help="Hours to forecast")
    model = Parameter("model", default="seasonal_naive", type=str,
                      help="seasonal_naive, or weather_adjusted (also reads weather_raw)")

    @step
    @lineage
    def start(self):
        """Check the configuration before any work."""
        self.as_of = forecast.parse_as_of(self.as_of_datetime)
        if self.model not in models.MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {', '.join(models.MODELS)}")
        if self.lookback_days < 7:
            raise ValueError("lookback_days must be at least 7: the seasonal-naive model looks one week back")
        if not 1 <= self.predict_horizon_hours <= 24 * 14:
            raise ValueError("predict_horizon_hours must be between 1 and 336")
        self.next(self.compute_actuals)

    @step
    @lineage
    def compute_actuals(self):
        """Hourly rides per zone from yellow_taxi_raw, MERGEd into yellow_rides_hourly_actuals."""
        self.lineage_report = forecast.compute_actuals(self.as_of, self.lookback_days, self.predict_horizon_hours)
        self.actuals_summary = self.lineage_report.summary
        self.next(self.prepare_training_data)

    @step
    @lineage
    def prepare_training_data(self):
        """The lookback window of actuals up to as_of_datetime (and the rain per day, for the weather model)."""
        self.training, self.lineage_report = forecast.training_data(self.as_of, self.lookback_days)
        self.daily_prcp_mm = {}
        if self.model == "weather_adjusted":
            window = forecast.windows(self.as_of, self.lookback_days, self.predict_horizon_hours)
            self.daily_prcp_mm, weather = forecast.daily_precipitation(window["train_start"], window["horizon_end"])
            self.lineage_report.inputs.append(weather)
        self.next(self.train_forecasting_model)

    @step
    @lineage
    def train_forecasting_model(self):
        """Fit the chosen model; it is versioned as this step's artifact and is an ML model in DataHub."""
        self.trained_model = models.MODELS[self.model].fit(self.training, daily_prcp_mm=self.daily_prcp_mm)
        self.model_version = current.pathspec
        self.lineage_report = StepReport(
            inputs=[DatasetUse(registry.YELLOW_RIDES_HOURLY_ACTUALS, row_count=len(self.training))],
            outputs=[DatasetUse(registry.YELLOW_RIDES_FORECAST_MODEL, snapshot_id=self.model_version,
                                used_by=("predict",))])
        self.next(self.predict)

    @step
    @lineage
    def predict(self):
        """A forecast for every zone and hour of the horizon."""
        hours = forecast.horizon_hours(self.as_of, self.predict_horizon_hours)
        zones = sorted({r["pickup_location_id"] for r in self.training})
        self.forecasts = self.trained_model.predict(zones, hours)
        self.lineage_report = StepReport(inputs=[DatasetUse(registry.YELLOW_RIDES_FORECAST_MODEL, snapshot_id=self.model_version)])
        self.next(self.write_forecasts_to_table)

    @step
    @lineage
    def write_forecasts_to_table(self):
        """MERGE the forecasts into yellow_rides_hourly_forecast, keyed by zone and hour."""
        self.lineage_report = forecast.write_forecasts(self.forecasts, self.model, self.model_version, self.as_of)
        self.next(self.evaluate)

    @card(type="blank", id="evaluation")
    @step
    @lineage
    def evaluate(self):
        """MAE and WAPE per zone and overall where the forecast hours have actuals (a backtest)."""
        actual, read = forecast.observed(self.as_of, self.predict_horizon_hours)
        self.metrics = models.evaluate(self.forecasts, actual)
        overall = self.metrics["overall"]
        self.mae = overall["mae"] if overall else None
        self.wape = overall["wape"] if overall else None
        self.lineage_report = StepReport(inputs=[read], summary={"mae": self.mae, "wape": self.wape})
        from nyc_taxi.forecast.card import evaluation_card

        evaluation_card(current.card["evaluation"], self.forecasts, actual, self.metrics, self.model)
        self.next(self.end)

    @step
    @lineage
    def end(self):
        """Done: forecasts written, metrics stored as artifacts (mae, wape, metrics)."""
        print(f"{self.model}: as of {self.as_of}, MAE {self.mae}, WAPE {self.wape}")


if __name__ == "__main__":
    TrainForecastModelFlow()
