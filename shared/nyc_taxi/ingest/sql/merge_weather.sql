-- Upsert the changed county-days (see weather_changes.sql) into raw, one row per county and date.
MERGE INTO ${raw} t
USING ${changes} s
ON t.county_code = s.county_code AND t.date = s.date
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *
