-- Staged county-days that raw lacks or holds with other values. Final (scaled) values replace
-- preliminary ones; a preliminary file never replaces a final value.
SELECT s.*
FROM ${staging} s
LEFT JOIN ${raw} t
  ON t.county_code = s.county_code AND t.date = s.date
WHERE t.county_code IS NULL
   OR (NOT (t.source_status = 'scaled' AND s.source_status = 'prelim')
       AND NOT (t.tmax_c <=> s.tmax_c AND t.tmin_c <=> s.tmin_c AND t.tavg_c <=> s.tavg_c
                AND t.prcp_mm <=> s.prcp_mm AND t.county_name <=> s.county_name
                AND t.source_status = s.source_status))
