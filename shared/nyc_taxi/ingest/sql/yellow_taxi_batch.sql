-- The staged batch in one scan, per file and pickup day: where it is (the days bound every read of
-- raw to the batch's partitions) and the rows a consumer should know about. Those are kept as the
-- source has them, only counted; the caller adds the days up.
SELECT
  source_file,
  CAST(pickup_datetime AS DATE)                                                   AS pickup_day,
  count(*)                                                                        AS row_count,
  count_if(pickup_datetime < TIMESTAMP_NTZ'${month_start}'
           OR pickup_datetime >= TIMESTAMP_NTZ'${next_month_start}')              AS pickup_outside_month,
  count_if(dropoff_datetime <= pickup_datetime)                                   AS dropoff_not_after_pickup,
  count_if(dropoff_datetime > pickup_datetime + INTERVAL 3 HOURS)                 AS trip_over_3_hours,
  count_if(total_amount <= 0)                                                     AS non_positive_total,
  count_if(fare_amount > 10000 OR trip_distance > 1000)                           AS absurd_fare_or_distance,
  count_if(payment_type = 0)                                                      AS flex_fare_null_block,
  count_if(pickup_location_id NOT BETWEEN 1 AND 265)                              AS unknown_pickup_zone
FROM ${staging}
GROUP BY source_file, CAST(pickup_datetime AS DATE)
