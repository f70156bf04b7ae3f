-- One month of NOAA nClimGrid-Daily county files (the four variables' files as one view, 37 string
-- columns, no header), New York City's counties only, day columns turned into rows: what replaces
-- weather_staging. -999.99 marks a missing value and fills the days a short month does not have:
-- neither becomes a row value.
WITH daily AS (
  SELECT
    region_code                                                        AS county_code,
    region_name                                                        AS county_name,
    lower(variable)                                                    AS variable,
    make_date(CAST(year AS INT), CAST(month AS INT), d.day)            AS date,
    CAST(trim(d.value) AS DOUBLE)                                      AS value
  FROM ${landed}
  LATERAL VIEW stack(31, 1, day1, 2, day2, 3, day3, 4, day4, 5, day5, 6, day6, 7, day7, 8, day8, 9, day9, 10, day10, 11, day11, 12, day12, 13, day13, 14, day14, 15, day15, 16, day16, 17, day17, 18, day18, 19, day19, 20, day20, 21, day21, 22, day22, 23, day23, 24, day24, 25, day25, 26, day26, 27, day27, 28, day28, 29, day29, 30, day30, 31, day31) d AS day, value
  WHERE region_code IN (${county_codes})
    AND d.day <= day(last_day(make_date(CAST(year AS INT), CAST(month AS INT), 1)))
    AND trim(d.value) <> '-999.99'
)
SELECT
  county_code,
  max(county_name)                                   AS county_name,
  date,
  max(CASE WHEN variable = 'tmax' THEN value END)    AS tmax_c,
  max(CASE WHEN variable = 'tmin' THEN value END)    AS tmin_c,
  max(CASE WHEN variable = 'tavg' THEN value END)    AS tavg_c,
  max(CASE WHEN variable = 'prcp' THEN value END)    AS prcp_mm,
  '${status}'                                      AS source_status,
  current_timestamp()                                AS ingested_at
FROM daily
GROUP BY county_code, date
