-- Yellow taxi pickups per zone and New York local wall-clock hour (the source's own clock), in the hours
-- being counted (${counted}: ranges of pickup_datetime, so only those days' partitions of raw are read);
-- rows with an unknown zone are left out. count(hour) counts the same rows as count(*) (hour is never
-- NULL inside a range) and lets a SQL parser see what the count is computed from.
SELECT pickup_location_id AS zone, date_trunc('HOUR', pickup_datetime) AS hour, count(date_trunc('HOUR', pickup_datetime)) AS ride_count
FROM ${raw}
WHERE ${counted}
  AND pickup_location_id BETWEEN 1 AND 265
GROUP BY pickup_location_id, date_trunc('HOUR', pickup_datetime)
