-- The batch's zone-hours that the table lacks ('added') or holds with another count ('changed').
SELECT s.*, CASE WHEN t.pickup_location_id IS NULL THEN 'added' ELSE 'changed' END AS change
FROM ${staging} s
LEFT JOIN ${raw} t
  ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour
WHERE t.pickup_location_id IS NULL OR t.ride_count <> s.ride_count
