-- The staged batch's fingerprint in one scan: its rows and the exact sum of their content hashes, compared
-- with what raw holds of the batch (yellow_taxi_held.sql). Its checks are the staging table's declared
-- ones (core/datasets.py), counted as the stage wrote it.
SELECT
  count(*)                                                          AS row_count,
  coalesce(sum(CAST(${staged_content_hash} AS DECIMAL(38, 0))), 0) AS content
FROM ${staging} s
