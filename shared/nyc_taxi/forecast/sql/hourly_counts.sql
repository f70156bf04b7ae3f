-- Yellow taxi pickups per zone and New York local wall-clock hour (the source's own clock) in
-- [${window_start}, ${window_end}); rows outside the window or with an unknown zone are left out.
-- Only the window's partitions of raw are read. count(hour) counts the same rows as count(*) (hour is
-- never NULL inside the window) and lets a SQL parser see what the count is computed from.
SELECT pickup_location_id AS zone, date_trunc('HOUR', pickup_datetime) AS hour, count(date_trunc('HOUR', pickup_datetime)) AS ride_count
FROM ${raw}
WHERE pickup_datetime >= TIMESTAMP_NTZ'${window_start}'
  AND pickup_datetime <  TIMESTAMP_NTZ'${window_end}'
  AND pickup_location_id BETWEEN 1 AND 265
GROUP BY pickup_location_id, date_trunc('HOUR', pickup_datetime)
