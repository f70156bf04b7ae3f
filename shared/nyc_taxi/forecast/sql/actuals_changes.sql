-- What a window's actuals (${staging}, see hourly_actuals.sql) change in the table, one row per zone-hour
-- of the window: one the table lacks ('added'), holds with another count ('changed'), or holds for a zone
-- with no pickup in the window ('removed'). Only the window's rows of the table are read.
SELECT s.*, coalesce(s.pickup_location_id, t.pickup_location_id) AS change_zone,
  coalesce(s.pickup_hour, t.pickup_hour) AS change_hour,
  CASE WHEN t.pickup_location_id IS NULL THEN 'added' WHEN s.pickup_location_id IS NULL THEN 'removed' ELSE 'changed' END AS change
FROM ${staging} s
FULL OUTER JOIN (
  SELECT * FROM ${raw} t
  WHERE t.pickup_hour >= TIMESTAMP_NTZ'${window_start}' AND t.pickup_hour < TIMESTAMP_NTZ'${window_end}'
) t
  ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour
WHERE t.pickup_location_id IS NULL OR s.pickup_location_id IS NULL OR t.ride_count <> s.ride_count
