-- Yellow taxi pickups per zone and New York local wall-clock hour (the source's own clock) in
-- [${window_start}, ${window_end}). Zones with at least one pickup in the window get a row for
-- every hour, zero when nobody was picked up. Rows outside the window or with an unknown zone
-- are left out. Only the window's partitions of raw are read.
WITH trips AS (
  SELECT pickup_location_id AS zone, date_trunc('HOUR', pickup_datetime) AS hour
  FROM ${raw}
  WHERE pickup_datetime >= TIMESTAMP_NTZ'${window_start}'
    AND pickup_datetime <  TIMESTAMP_NTZ'${window_end}'
    AND pickup_location_id BETWEEN 1 AND 265
),
counts AS (SELECT zone, hour, count(*) AS ride_count FROM trips GROUP BY zone, hour),
zones AS (SELECT DISTINCT zone FROM counts),
hours AS (SELECT explode(sequence(TIMESTAMP_NTZ'${window_start}', TIMESTAMP_NTZ'${last_hour}', INTERVAL 1 HOUR)) AS hour)
SELECT
  CAST(z.zone AS INT)                        AS pickup_location_id,
  CAST(h.hour AS TIMESTAMP_NTZ)              AS pickup_hour,
  CAST(coalesce(c.ride_count, 0) AS BIGINT)  AS ride_count,
  current_timestamp()                        AS computed_at
FROM zones z
CROSS JOIN hours h
LEFT JOIN counts c ON c.zone = z.zone AND c.hour = h.hour
