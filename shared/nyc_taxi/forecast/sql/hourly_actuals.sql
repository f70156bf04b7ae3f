-- A window's actuals: every zone with a pickup in [${window_start}, ${window_end}) gets a row for every
-- hour of the window's days that have rides (${covered}: a day without a single trip has not happened or
-- is not loaded: no zero is written for it), zero when nobody was picked up. ${counts}: the window's
-- hourly counts (hourly_counts.sql for the hours counted now, kept_actuals.sql for the hours the table
-- holds as raw has them). An hour without pickups takes its hour from the generated sequence (coalesce,
-- so a SQL parser sees where pickup_hour comes from when there were pickups).
WITH zones AS (SELECT DISTINCT zone FROM ${counts} WHERE ride_count > 0),
hours AS (SELECT explode(sequence(TIMESTAMP_NTZ'${window_start}', TIMESTAMP_NTZ'${last_hour}', INTERVAL 1 HOUR)) AS hour)
SELECT
  CAST(z.zone AS INT)                              AS pickup_location_id,
  CAST(coalesce(c.hour, h.hour) AS TIMESTAMP_NTZ)  AS pickup_hour,
  CAST(coalesce(c.ride_count, 0) AS BIGINT)        AS ride_count,
  current_timestamp()                              AS computed_at
FROM zones z
CROSS JOIN hours h
LEFT JOIN ${counts} c ON c.zone = z.zone AND c.hour = h.hour
WHERE ${covered}
