-- One forecast per model, origin, zone and hour: the run's changes (see forecast_changes.sql) make the table's
-- rows of its model and origin exactly its forecasts. Only those rows can match: no other model's or
-- origin's forecast is rewritten.
MERGE INTO ${raw} t
USING ${changes} s
ON t.model_name = '${model_name}' AND t.as_of_datetime = TIMESTAMP_NTZ'${as_of}'
  AND t.pickup_location_id = s.change_zone AND t.forecast_hour = s.change_hour
WHEN MATCHED AND s.change = 'removed' THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
