-- Raw holds none of the batch's rows yet (a new month): append it in one commit, no join needed.
INSERT INTO ${raw}
SELECT * FROM ${staging}
