-- Every forecast ${forecast} keeps (one per model and origin) scored against the actual rides of its hours in
-- ${actuals}. A zone-hour is scored when the actuals hold its hour: its day is loaded, and a zone without a row
-- there had no pickup in the window that counted it (0 rides); the other hours have not happened or are not
-- loaded yet. Errors are forecast minus actual. A forecast none of whose hours the actuals hold is selected
-- too, with scored_zone_hours 0 (score_changes.sql removes a score it had). scored_at is when the step read
-- the two tables' versions (${read_at_us}, microseconds since 1970 UTC). A forecast's lookback and its zones (a
-- digest of their sorted ids) say what its score may be compared with (core/comparison.py).
WITH actuals AS (  -- the hours the kept forecasts forecast (${forecast_hours}: ranges of pickup_hour)
  SELECT pickup_location_id, pickup_hour, ride_count FROM ${actuals}
  WHERE ${forecast_hours}
),
held_hours AS (SELECT DISTINCT pickup_hour FROM actuals),
zone_hours AS (
  SELECT f.model_name, f.as_of_datetime, f.model_version, f.lookback_days, f.pickup_location_id, f.forecast_hour,
    f.predicted_ride_count,
    h.pickup_hour IS NOT NULL AS held,
    coalesce(a.ride_count, 0) AS ride_count
  FROM ${forecast} f
  LEFT JOIN held_hours h ON h.pickup_hour = f.forecast_hour
  LEFT JOIN actuals a ON a.pickup_location_id = f.pickup_location_id AND a.pickup_hour = f.forecast_hour
)
SELECT
  model_name,
  as_of_datetime,
  max(model_version)                                                              AS model_version,
  min(forecast_hour)                                                              AS first_hour,
  max(forecast_hour)                                                              AS last_hour,
  count(*)                                                                        AS forecast_zone_hours,
  count_if(held)                                                                  AS scored_zone_hours,
  count_if(held) / count(*)                                                       AS coverage,
  CAST(coalesce(sum(CASE WHEN held THEN ride_count END), 0) AS BIGINT)            AS actual_rides,
  coalesce(sum(CASE WHEN held THEN predicted_ride_count END), 0D)                 AS predicted_rides,
  avg(CASE WHEN held THEN abs(predicted_ride_count - ride_count) END)             AS mae,
  sum(CASE WHEN held THEN abs(predicted_ride_count - ride_count) END)
    / nullif(sum(CASE WHEN held THEN ride_count END), 0)                          AS wape,
  avg(CASE WHEN held THEN predicted_ride_count - ride_count END)                  AS bias,
  CAST(${forecast_snapshot} AS BIGINT)                                            AS forecast_snapshot_id,
  CAST(${actuals_snapshot} AS BIGINT)                                             AS actuals_snapshot_id,
  timestamp_micros(${read_at_us})                                                 AS scored_at,
  max(lookback_days)                                                              AS lookback_days,
  sha2(concat_ws(',', array_sort(collect_set(CAST(pickup_location_id AS STRING)))), 256) AS zone_set
FROM zone_hours
GROUP BY model_name, as_of_datetime
