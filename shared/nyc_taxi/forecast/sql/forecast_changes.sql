-- The run's forecasts (${staging}) that the forecast table lacks ('added') or holds otherwise ('changed': another
-- count, model or origin); the time a forecast was written is not compared. Only the horizon's rows of the
-- table are read.
SELECT s.*, coalesce(s.pickup_location_id, t.pickup_location_id) AS change_zone,
  coalesce(s.forecast_hour, t.forecast_hour) AS change_hour,
  CASE WHEN t.pickup_location_id IS NULL THEN 'added' ELSE 'changed' END AS change
FROM ${staging} s
LEFT JOIN (
  SELECT * FROM ${raw} t
  WHERE t.forecast_hour >= TIMESTAMP_NTZ'${first_hour}' AND t.forecast_hour < TIMESTAMP_NTZ'${after_last_hour}'
) t
  ON t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
WHERE t.pickup_location_id IS NULL
   OR NOT (t.predicted_ride_count <=> s.predicted_ride_count AND t.model_name = s.model_name
           AND t.model_version = s.model_version AND t.as_of_datetime = s.as_of_datetime)
