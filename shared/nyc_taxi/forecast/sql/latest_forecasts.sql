-- "The forecast for this hour": for every zone and hour, the forecast of ${model_name} from the latest origin
-- that forecast it (the most recent data the model had seen). The forecast table keeps every model's and
-- origin's forecasts (its key: model_name, as_of_datetime, pickup_location_id, forecast_hour); a reader who
-- wants one number per zone and hour takes it from here, never from whichever run wrote last.
-- (docs/pipelines.md, "Every forecast kept, and scored once its hours have happened")
SELECT pickup_location_id, forecast_hour, predicted_ride_count, model_name, model_version, as_of_datetime
FROM (
  SELECT f.*, row_number() OVER (PARTITION BY pickup_location_id, forecast_hour ORDER BY as_of_datetime DESC) AS newest
  FROM ${forecast} f
  WHERE model_name = '${model_name}'
) latest
WHERE newest = 1
