-- What the run's scores (${staging}: score_forecasts.sql's) change in the scores table: a score it lacks
-- ('added'), holds with other figures or of another model version ('changed'), or holds for a forecast none
-- of whose hours the actuals hold now ('removed'). A score whose figures are the same (to a billionth: Spark
-- may sum in another order) is kept with the versions it was first computed from; the score of a forecast
-- the run did not read (written after it read the forecast table) is left as it is.
SELECT s.*,
  CASE WHEN t.model_name IS NULL THEN 'added' WHEN s.scored_zone_hours = 0 THEN 'removed' ELSE 'changed' END AS change
FROM ${staging} s
LEFT JOIN ${raw} t ON t.model_name = s.model_name AND t.as_of_datetime = s.as_of_datetime
WHERE (t.model_name IS NULL AND s.scored_zone_hours > 0)
   OR (t.model_name IS NOT NULL AND s.scored_zone_hours = 0)
   OR (t.model_name IS NOT NULL AND NOT (
         t.model_version = s.model_version AND t.first_hour = s.first_hour AND t.last_hour = s.last_hour
         AND t.forecast_zone_hours = s.forecast_zone_hours AND t.scored_zone_hours = s.scored_zone_hours
         AND t.actual_rides = s.actual_rides
         AND abs(t.predicted_rides - s.predicted_rides) <= 1e-9 * greatest(abs(s.predicted_rides), 1)
         AND abs(t.mae - s.mae) <= 1e-9 * greatest(abs(s.mae), 1)
         AND coalesce(abs(t.wape - s.wape) <= 1e-9 * greatest(abs(s.wape), 1), t.wape IS NULL AND s.wape IS NULL)
         AND abs(t.bias - s.bias) <= 1e-9 * greatest(abs(s.bias), 1)))
