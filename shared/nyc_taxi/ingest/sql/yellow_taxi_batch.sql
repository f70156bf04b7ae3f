-- Where the staged batch is: the files it came from and the pickup days it covers (the days bound
-- every read of raw to the batch's partitions).
SELECT DISTINCT source_file, CAST(pickup_datetime AS DATE) AS pickup_day
FROM ${staging}
