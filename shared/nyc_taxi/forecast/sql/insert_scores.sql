-- Scores the table lacks, added as they are (${staging}: score_changes.sql's, all of them 'added'): an
-- insert-only MERGE, no other file read or rewritten.
MERGE INTO ${raw} t
USING ${staging} s
ON t.model_name = s.model_name AND t.as_of_datetime = s.as_of_datetime
WHEN NOT MATCHED THEN INSERT *
