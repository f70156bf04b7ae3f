-- What the run's scores (${staging}: score_forecasts.sql's) change in the scores table: a score it lacks
-- ('added'); one it holds with other figures or of another model version ('changed'); one it holds for a
-- forecast none of whose hours the actuals hold now, or for a forecast gone from the forecast table when the
-- run read it (its score was read before: the forecast was there then) ('removed'). A score whose figures
-- are the same (to a billionth: Spark may sum in another order) is kept with the versions it was first
-- computed from; the score of a forecast written after the run read the forecast table is left as it is; and
-- a score is never replaced or removed by one whose versions were read before its own (a run that read the
-- tables first and committed last would put older figures back).
SELECT s.*, coalesce(s.model_name, t.model_name) AS change_model,
  coalesce(s.as_of_datetime, t.as_of_datetime) AS change_origin,
  CASE WHEN t.model_name IS NULL THEN 'added'
       WHEN s.model_name IS NULL OR s.scored_zone_hours = 0 THEN 'removed'
       ELSE 'changed' END AS change
FROM ${staging} s
FULL OUTER JOIN ${raw} t ON t.model_name = s.model_name AND t.as_of_datetime = s.as_of_datetime
WHERE (t.model_name IS NULL AND s.scored_zone_hours > 0)
   OR (s.model_name IS NULL AND t.scored_at < timestamp_micros(${read_at_us}))
   OR (s.model_name IS NOT NULL AND t.model_name IS NOT NULL AND s.scored_at > t.scored_at AND (
         s.scored_zone_hours = 0 OR NOT (
         t.model_version = s.model_version AND t.first_hour = s.first_hour AND t.last_hour = s.last_hour
         AND t.forecast_zone_hours = s.forecast_zone_hours AND t.scored_zone_hours = s.scored_zone_hours
         AND t.actual_rides = s.actual_rides
         AND abs(t.predicted_rides - s.predicted_rides) <= 1e-9 * greatest(abs(s.predicted_rides), 1)
         AND abs(t.mae - s.mae) <= 1e-9 * greatest(abs(s.mae), 1)
         AND coalesce(abs(t.wape - s.wape) <= 1e-9 * greatest(abs(s.wape), 1), t.wape IS NULL AND s.wape IS NULL)
         AND abs(t.bias - s.bias) <= 1e-9 * greatest(abs(s.bias), 1)
         AND t.lookback_days <=> s.lookback_days AND t.zone_set <=> s.zone_set)))
