-- Forecasts the table lacks, added as they are: a horizon it holds no row of (${staging}: the run's
-- forecasts), or a horizon whose changes only add rows (${staging}: forecast_changes.sql's). An insert-only
-- MERGE: appended, no other file read or rewritten.
MERGE INTO ${raw} t
USING ${staging} s
ON t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
  AND t.forecast_hour >= TIMESTAMP_NTZ'${first_hour}' AND t.forecast_hour < TIMESTAMP_NTZ'${after_last_hour}'
WHEN NOT MATCHED THEN INSERT *
