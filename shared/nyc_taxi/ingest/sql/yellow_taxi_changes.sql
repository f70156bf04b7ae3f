-- What a staged file changes in raw, one row per trip: a staged trip raw lacks ('added'), one raw holds
-- with other content ('changed'), and one of raw's trips from the batch's files (${source_files}) that
-- the batch no longer has ('removed': the source republished the file without it). change_key is the
-- trip's row key. Only raw's rows of the batch's files are read: Iceberg prunes raw's data files by
-- their source_file bounds, so the cost stays flat as raw grows.
SELECT s.*, coalesce(s.row_key, t.row_key) AS change_key,
  CASE WHEN t.row_key IS NULL THEN 'added' WHEN s.row_key IS NULL THEN 'removed' ELSE 'changed' END AS change
FROM ${staging} s
FULL OUTER JOIN (
  SELECT row_key, ${content_hash} AS content_hash FROM ${raw} t WHERE t.source_file IN (${source_files})
) t
ON t.row_key = s.row_key
WHERE t.row_key IS NULL OR s.row_key IS NULL OR t.content_hash <> ${staged_content_hash}
