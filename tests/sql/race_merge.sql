-- Upsert the changed zone-hours.
MERGE INTO ${raw} t
USING ${changes} s
ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *
