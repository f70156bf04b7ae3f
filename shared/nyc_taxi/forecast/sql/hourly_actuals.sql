-- The hourly counts (${counts}, see hourly_counts.sql) zero-filled: zones with at least one pickup
-- in the window get a row for every hour of [${window_start}, ${window_end}), zero when nobody was
-- picked up. An hour without pickups takes its hour from the generated sequence (coalesce, so a
-- SQL parser sees where pickup_hour comes from when there were pickups).
WITH zones AS (SELECT DISTINCT zone FROM ${counts}),
hours AS (SELECT explode(sequence(TIMESTAMP_NTZ'${window_start}', TIMESTAMP_NTZ'${last_hour}', INTERVAL 1 HOUR)) AS hour)
SELECT
  CAST(z.zone AS INT)                              AS pickup_location_id,
  CAST(coalesce(c.hour, h.hour) AS TIMESTAMP_NTZ)  AS pickup_hour,
  CAST(coalesce(c.ride_count, 0) AS BIGINT)        AS ride_count,
  current_timestamp()                              AS computed_at
FROM zones z
CROSS JOIN hours h
LEFT JOIN ${counts} c ON c.zone = z.zone AND c.hour = h.hour
