-- Apply a staged month's changes (see weather_changes.sql) to raw, one row per county and date, in one
-- commit: new and changed county-days written, county-days the month's files no longer have removed.
MERGE INTO ${raw} t
USING ${changes} s
ON t.county_code = s.change_county AND t.date = s.change_date
WHEN MATCHED AND s.change = 'removed' THEN DELETE
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED AND s.change <> 'removed' THEN INSERT *
