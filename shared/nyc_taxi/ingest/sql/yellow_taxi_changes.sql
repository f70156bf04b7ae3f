-- Staged rows that raw does not already hold with the same content: new rows and changed rows.
-- Only the raw rows of the batch's pickup days are read (${raw_days} is a partition-pruning
-- range predicate on t.pickup_datetime, with IS NULL if the batch has rows without a pickup time),
-- so the cost stays flat as raw grows.
SELECT s.*
FROM ${staging} s
LEFT ANTI JOIN (
  SELECT row_key, ${content_hash} AS content_hash FROM ${raw} t WHERE ${raw_days}
) t
ON t.row_key = s.row_key AND t.content_hash = ${staged_content_hash}
