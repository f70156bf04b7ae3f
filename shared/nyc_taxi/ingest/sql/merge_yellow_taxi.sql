-- Apply a staged file's changes (see yellow_taxi_changes.sql) to raw in one commit: new and changed
-- trips written, trips the file no longer has removed. Only raw's rows of the batch's files can match,
-- and only the data files holding a changed or removed trip are rewritten; an unchanged re-run has no
-- changes and is not run at all.
MERGE INTO ${raw} t
USING ${changes} s
ON t.row_key = s.change_key AND t.source_file IN (${source_files})
WHEN MATCHED AND s.change = 'removed' THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
