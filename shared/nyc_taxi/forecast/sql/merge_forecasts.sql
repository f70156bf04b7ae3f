-- One forecast per zone and hour: the latest run's forecast replaces an earlier one.
MERGE INTO ${forecast} t
USING ${forecasts} s
ON t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *
