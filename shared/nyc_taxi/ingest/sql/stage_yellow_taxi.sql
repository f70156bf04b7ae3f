-- One landed TLC month, cast to the one target schema: what replaces yellow_taxi_staging. ${landed} is
-- the parquet file as read, with missing optional columns added as NULL; Spark matches column names
-- case-insensitively, so Airport_fee (2024+) and airport_fee (2022-2023) both land in airport_fee.
-- The row key is the file name and the row's position in it: the same file gives the same keys.
SELECT
  concat(source_file, ':', CAST(source_row_index AS STRING)) AS row_key,
  source_file,
  current_timestamp()                             AS ingested_at,
  CAST(VendorID AS INT)                           AS vendor_id,
  CAST(tpep_pickup_datetime AS TIMESTAMP_NTZ)     AS pickup_datetime,
  CAST(tpep_dropoff_datetime AS TIMESTAMP_NTZ)    AS dropoff_datetime,
  CAST(passenger_count AS BIGINT)                 AS passenger_count,
  CAST(trip_distance AS DOUBLE)                   AS trip_distance,
  CAST(RatecodeID AS BIGINT)                      AS ratecode_id,
  CAST(store_and_fwd_flag AS STRING)              AS store_and_fwd_flag,
  CAST(PULocationID AS INT)                       AS pickup_location_id,
  CAST(DOLocationID AS INT)                       AS dropoff_location_id,
  CAST(payment_type AS BIGINT)                    AS payment_type,
  CAST(fare_amount AS DOUBLE)                     AS fare_amount,
  CAST(extra AS DOUBLE)                           AS extra,
  CAST(mta_tax AS DOUBLE)                         AS mta_tax,
  CAST(tip_amount AS DOUBLE)                      AS tip_amount,
  CAST(tolls_amount AS DOUBLE)                    AS tolls_amount,
  CAST(improvement_surcharge AS DOUBLE)           AS improvement_surcharge,
  CAST(total_amount AS DOUBLE)                    AS total_amount,
  CAST(congestion_surcharge AS DOUBLE)            AS congestion_surcharge,
  CAST(airport_fee AS DOUBLE)                     AS airport_fee,
  CAST(cbd_congestion_fee AS DOUBLE)              AS cbd_congestion_fee
FROM ${landed}
