-- What a staged month changes in raw, one row per county-day: a county-day raw lacks ('added'), one it
-- holds with other values ('changed'), and one of the month's county-days in raw that the staged files
-- no longer have ('removed': NOAA dropped a day or a county). Final (scaled) values replace preliminary
-- ones; a preliminary file never replaces, nor removes, a final value. change_key is the county-day.
SELECT s.*, coalesce(s.county_code, t.county_code) AS change_county, coalesce(s.date, t.date) AS change_date,
  CASE WHEN t.county_code IS NULL THEN 'added' WHEN s.county_code IS NULL THEN 'removed' ELSE 'changed' END AS change
FROM ${staging} s
FULL OUTER JOIN (
  SELECT * FROM ${raw} t WHERE t.date >= DATE'${month_start}' AND t.date < DATE'${next_month_start}'
) t
  ON t.county_code = s.county_code AND t.date = s.date
WHERE (t.county_code IS NULL)
   OR (s.county_code IS NULL AND NOT (t.source_status = 'scaled' AND '${status}' = 'prelim'))
   OR (s.county_code IS NOT NULL
       AND NOT (t.source_status = 'scaled' AND s.source_status = 'prelim')
       AND NOT (t.tmax_c <=> s.tmax_c AND t.tmin_c <=> s.tmin_c AND t.tavg_c <=> s.tavg_c
                AND t.prcp_mm <=> s.prcp_mm AND t.county_name <=> s.county_name
                AND t.source_status = s.source_status))
