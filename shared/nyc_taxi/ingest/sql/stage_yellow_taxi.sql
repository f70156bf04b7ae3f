-- One landed TLC month, cast to the one target schema: what replaces yellow_taxi_staging. ${landed} is
-- the parquet file as read, with missing optional columns added as NULL; Spark matches column names
-- case-insensitively, so Airport_fee (2024+) and airport_fee (2022-2023) both land in airport_fee.
-- The row key follows the trip, not its place in the file (TLC publishes no trip id): the file, a hash
-- of what identifies a trip (vendor, pickup and drop-off time, pickup and drop-off zone, as cast) and,
-- for trips that share all five, their order in the file. A corrected fare keeps the trip's key; a trip
-- added or dropped when the TLC republishes the file changes no other trip's key.
WITH cast_trips AS (
  SELECT
    source_file,
    source_row_index,
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
),
identified AS (
  SELECT *, xxhash64(vendor_id, pickup_datetime, dropoff_datetime, pickup_location_id, dropoff_location_id,
                    isnull(vendor_id), isnull(pickup_datetime), isnull(dropoff_datetime),
                    isnull(pickup_location_id), isnull(dropoff_location_id)) AS trip
  FROM cast_trips
)
SELECT
  concat(source_file, ':', lpad(hex(trip), 16, '0'), ':',
         CAST(row_number() OVER (PARTITION BY trip ORDER BY source_row_index) AS STRING)) AS row_key,
  source_file,
  current_timestamp()                             AS ingested_at,
  vendor_id,
  pickup_datetime,
  dropoff_datetime,
  passenger_count,
  trip_distance,
  ratecode_id,
  store_and_fwd_flag,
  pickup_location_id,
  dropoff_location_id,
  payment_type,
  fare_amount,
  extra,
  mta_tax,
  tip_amount,
  tolls_amount,
  improvement_surcharge,
  total_amount,
  congestion_surcharge,
  airport_fee,
  cbd_congestion_fee
FROM identified
