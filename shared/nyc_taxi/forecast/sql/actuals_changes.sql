-- Computed hours that the actuals table lacks or holds with another count.
SELECT s.*
FROM ${staging} s
LEFT ANTI JOIN ${raw} t
  ON t.pickup_location_id = s.pickup_location_id AND t.pickup_hour = s.pickup_hour AND t.ride_count = s.ride_count
