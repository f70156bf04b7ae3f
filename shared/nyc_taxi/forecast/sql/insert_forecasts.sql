-- A horizon the forecast table holds no row of: the run's forecasts (${staging}) added as they are (an
-- insert-only MERGE: appended, no other file read or rewritten).
MERGE INTO ${raw} t
USING ${staging} s
ON t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
  AND t.forecast_hour >= TIMESTAMP_NTZ'${first_hour}' AND t.forecast_hour < TIMESTAMP_NTZ'${after_last_hour}'
WHEN NOT MATCHED THEN INSERT *
