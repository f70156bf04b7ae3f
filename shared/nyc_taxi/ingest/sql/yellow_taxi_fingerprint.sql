-- A cheap "has anything changed?" before any join: the staged batch's row count and an exact sum of
-- its row-content hashes. Equal to what raw holds of it (yellow_taxi_held.sql): nothing to do.
SELECT count(*) AS row_count, coalesce(sum(CAST(${staged_content_hash} AS DECIMAL(38, 0))), 0) AS content
FROM ${staging} s
