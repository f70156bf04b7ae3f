-- The staged batch in one scan: its rows, the exact sum of their content hashes (compared with what raw
-- holds of the batch, yellow_taxi_held.sql; the caller passes 0 as the hash of a new month's rows, which
-- are not hashed), and the rows a consumer should know about: kept as they are, only counted.
SELECT
  count(*)                                                                        AS row_count,
  coalesce(sum(CAST(${staged_content_hash} AS DECIMAL(38, 0))), 0)               AS content,
  count_if(pickup_datetime IS NULL)                                               AS pickup_missing,
  count_if(pickup_datetime < TIMESTAMP_NTZ'${month_start}'
           OR pickup_datetime >= TIMESTAMP_NTZ'${next_month_start}')              AS pickup_outside_month,
  count_if(dropoff_datetime <= pickup_datetime)                                   AS dropoff_not_after_pickup,
  count_if(dropoff_datetime > pickup_datetime + INTERVAL 3 HOURS)                 AS trip_over_3_hours,
  count_if(total_amount <= 0)                                                     AS non_positive_total,
  count_if(fare_amount > 10000 OR trip_distance > 1000)                           AS absurd_fare_or_distance,
  count_if(payment_type = 0)                                                      AS flex_fare_null_block,
  count_if(pickup_location_id NOT BETWEEN 1 AND 265)                              AS unknown_pickup_zone
FROM ${staging} s
