-- What the run's forecasts (${staging}) change in the forecast table's rows of their model and origin
-- (${model_name} as of ${as_of}): a forecast it lacks ('added'), holds with another count, model version or lookback
-- ('changed'), or holds for a zone and hour the run no longer forecasts ('removed': a shorter horizon, a
-- zone not seen in training). The time a forecast was written is not compared. Only the rows of that model
-- and origin are read: every other model's and origin's forecasts are kept as they are.
SELECT s.*, coalesce(s.pickup_location_id, t.pickup_location_id) AS change_zone,
  coalesce(s.forecast_hour, t.forecast_hour) AS change_hour,
  CASE WHEN t.pickup_location_id IS NULL THEN 'added' WHEN s.pickup_location_id IS NULL THEN 'removed' ELSE 'changed' END AS change
FROM ${staging} s
FULL OUTER JOIN (
  SELECT * FROM ${raw} t
  WHERE t.model_name = '${model_name}' AND t.as_of_datetime = TIMESTAMP_NTZ'${as_of}'
) t
  ON t.pickup_location_id = s.pickup_location_id AND t.forecast_hour = s.forecast_hour
WHERE t.pickup_location_id IS NULL OR s.pickup_location_id IS NULL
   OR NOT (t.predicted_ride_count <=> s.predicted_ride_count AND t.model_version = s.model_version
           AND t.lookback_days <=> s.lookback_days)
