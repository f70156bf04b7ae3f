-- A cheap "has anything changed?" before any join: row count and an exact sum of row-content
-- hashes of the staged batch, and the same over the raw rows of the batch's files and days.
-- Equal fingerprints: raw already holds this batch as it is.
SELECT
  staged.row_count AS staged_rows, staged.content AS staged_content,
  held.row_count   AS raw_rows,    held.content   AS raw_content
FROM
  (SELECT count(*) AS row_count, coalesce(sum(CAST(${staged_content_hash} AS DECIMAL(38, 0))), 0) AS content
   FROM ${staging} s) staged,
  (SELECT count(*) AS row_count, coalesce(sum(CAST(${content_hash} AS DECIMAL(38, 0))), 0) AS content
   FROM ${raw} t
   WHERE ${raw_days} AND t.source_file IN (SELECT DISTINCT source_file FROM ${staging})) held
