-- Apply the run's score changes (see score_changes.sql), one row per model and origin.
MERGE INTO ${raw} t
USING ${changes} s
ON t.model_name = s.change_model AND t.as_of_datetime = s.change_origin
WHEN MATCHED AND s.change = 'removed' THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
