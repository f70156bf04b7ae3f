-- Rows the actuals table lacks, added as they are: a window it holds no row of (${staging}: its actuals),
-- or a window whose changes only add rows (${staging}: actuals_changes.sql's). An insert-only MERGE:
-- Iceberg appends the rows the table lacks (all of them, unless another run counted the window meanwhile)
-- without reading or rewriting the table's other files.
MERGE INTO ${raw} t
USING ${staging} s
ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour
  AND t.pickup_hour >= TIMESTAMP_NTZ'${window_start}' AND t.pickup_hour < TIMESTAMP_NTZ'${window_end}'
WHEN NOT MATCHED THEN INSERT *
