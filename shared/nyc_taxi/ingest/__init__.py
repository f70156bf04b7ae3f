"""Ingestion steps run by the Airflow DAGs: download and validate source files, stage them with
Spark, MERGE staging into raw. Transformations are the SQL files in sql/."""
