-- The counts the actuals table holds for the hours whose trips raw has not changed since they were counted
-- (${kept}: ranges of pickup_hour), in hourly_counts.sql's shape: they need not be counted again.
SELECT pickup_location_id AS zone, pickup_hour AS hour, ride_count
FROM ${actuals}
WHERE ${kept}
