-- A window the actuals table holds no row of: its actuals (${staging}) added as they are. An insert-only
-- MERGE: Iceberg appends the rows the table lacks (none of the window's, unless another run counted it
-- meanwhile) without reading or rewriting the table's other files.
MERGE INTO ${raw} t
USING ${staging} s
ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour
  AND t.pickup_hour >= TIMESTAMP_NTZ'${window_start}' AND t.pickup_hour < TIMESTAMP_NTZ'${window_end}'
WHEN NOT MATCHED THEN INSERT *
