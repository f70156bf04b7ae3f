-- What raw already holds of the batch: its rows from the batch's files (${source_files}; Iceberg prunes
-- raw's data files by their source_file bounds), counted, and an exact sum of their content hashes
-- (compared with yellow_taxi_fingerprint.sql). No rows: the month is new and is appended without hashing
-- the staged batch at all.
SELECT count(*) AS row_count, coalesce(sum(CAST(${content_hash} AS DECIMAL(38, 0))), 0) AS content
FROM ${raw} t
WHERE t.source_file IN (${source_files})
