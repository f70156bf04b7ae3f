-- Apply the run's score changes (see score_changes.sql), one row per model and origin. The guard of
-- score_changes.sql is repeated here, on the table as the MERGE reads it: a score another run committed
-- after the changes were computed, from versions read after this run's (${read_at_us}), is left as it is.
MERGE INTO ${raw} t
USING ${changes} s
ON t.model_name = s.change_model AND t.as_of_datetime = s.change_origin
WHEN MATCHED AND s.change = 'removed' AND coalesce(s.scored_at, timestamp_micros(${read_at_us})) > t.scored_at
  THEN DELETE
WHEN MATCHED AND s.change <> 'removed' AND s.scored_at > t.scored_at THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
