-- One forecast per zone and hour: the run's new and changed forecasts (see forecast_changes.sql) replace
-- the table's. Only the horizon's rows of the table can match: no other file is read or rewritten.
MERGE INTO ${raw} t
USING ${changes} s
ON t.pickup_location_id = s.change_zone AND t.forecast_hour = s.change_hour
  AND t.forecast_hour >= TIMESTAMP_NTZ'${first_hour}' AND t.forecast_hour < TIMESTAMP_NTZ'${after_last_hour}'
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *
