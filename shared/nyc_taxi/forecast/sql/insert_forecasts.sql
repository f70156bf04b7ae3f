-- Forecasts the table lacks, added as they are: a model and origin it holds no row of (${staging}: the run's
-- forecasts), or a run whose changes only add rows (${staging}: forecast_changes.sql's). An insert-only
-- MERGE: appended, no other file read or rewritten.
MERGE INTO ${raw} t
USING ${staging} s
ON t.model_name = '${model_name}' AND t.as_of_datetime = TIMESTAMP_NTZ'${as_of}'
  AND t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
WHEN NOT MATCHED THEN INSERT *
