-- Apply a window's changes (see actuals_changes.sql), one row per zone and hour: the window's rows of the
-- table then are exactly its actuals. Only the window's rows of the table can match.
MERGE INTO ${raw} t
USING ${changes} s
ON t.pickup_location_id = s.change_zone AND t.pickup_hour = s.change_hour
  AND t.pickup_hour >= TIMESTAMP_NTZ'${window_start}' AND t.pickup_hour < TIMESTAMP_NTZ'${window_end}'
WHEN MATCHED AND s.change = 'removed' THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
