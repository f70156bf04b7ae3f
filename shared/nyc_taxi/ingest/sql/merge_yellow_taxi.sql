-- Upsert the changed rows into raw on the row key; a re-run of an unchanged month has no changes
-- and is not run at all. ${raw_days} limits the target to the batch's pickup days.
MERGE INTO ${raw} t
USING ${changes} s
ON t.row_key = s.row_key AND ${raw_days}
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *
