"""The team profile's lakehouse: a bucket behind the S3 API (SeaweedFS on this machine, or a given endpoint) and
the Iceberg JDBC catalog on PostgreSQL, reached by a Spark standalone cluster (``nyc_taxi.core.team``)."""

from __future__ import annotations

from nyc_taxi.core import s3a_jars, team
from nyc_taxi.core.lakehouse_base import (
    NO_DATABASE_HERE,
    ArtifactStore,
)
from nyc_taxi.core.lakehouse_local import LocalLakehouse
from nyc_taxi.core.lakehouse_s3 import S3Objects


class TeamLakehouse(S3Objects, LocalLakehouse):
    """The team profile (``nyc_taxi.core.team``): the Iceberg JDBC catalog on PostgreSQL (Spark and
    pyiceberg share its tables, many writers commit at once without SQLite's file lock), a Spark
    standalone cluster, and the lake's files (warehouse, landing area) in a bucket behind the S3 API,
    which Spark reaches through Hadoop's S3 connector (``s3a://``, Iceberg's HadoopFileIO) and Python
    through boto3 and pyarrow. Every dataset keeps the local profile's name: the lake is named after
    its catalog, wherever its files are; the storage symlinks name the bucket."""

    profile = "team"
    catalog_database = "lakehouse"
    airflow_deployment = True

    @property
    def _objects(self):
        return team.ObjectStore(self.settings)

    @property
    def root(self) -> str:
        return f"s3a://{self._objects.bucket}"

    def _s3(self):
        return self._objects.client()

    def spark_storage_conf(self) -> dict[str, str]:
        objects = self._objects
        endpoint = objects.endpoint()
        conf = {
            "spark.hadoop.fs.s3a.endpoint": endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": self.settings.aws_region,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        }
        if keys := objects.keys():
            # Spark redacts keys matching secret|password|token|access.key in its UI and event log
            conf |= {"spark.hadoop.fs.s3a.access.key": keys[0], "spark.hadoop.fs.s3a.secret.key": keys[1]}
        return conf

    def artifact_store(self) -> ArtifactStore | None:
        objects = self._objects
        credentials = objects.credentials_file if objects.keys() else None
        return ArtifactStore(f"s3://{objects.bucket}/metaflow", objects.endpoint(), credentials)

    def _create_storage(self) -> list[str]:
        self.settings.lineage_dir.mkdir(parents=True, exist_ok=True)
        self._s3().head_bucket(Bucket=self._objects.bucket)  # `team up` creates it
        return []

    def spark_catalog_conf(self, prefix: str) -> dict[str, str]:
        url, user, password = team.Postgres(self.settings).jdbc(self.catalog_database)
        return {
            f"{prefix}.type": "jdbc",
            f"{prefix}.uri": url,
            f"{prefix}.jdbc.user": user,
            f"{prefix}.jdbc.password": password,  # Spark redacts *password* keys in its UI and event log
            f"{prefix}.jdbc.schema-version": "V1",
            f"{prefix}.cache-enabled": "false",
        }

    def spark_jars(self) -> list[str]:
        if not team.POSTGRES_JDBC_JAR.is_file():
            raise FileNotFoundError(
                f"{team.POSTGRES_JDBC_JAR} is missing: run `bash run setup` (Debian package libpostgresql-jdbc-java)"
            )
        return [str(team.POSTGRES_JDBC_JAR)]

    def spark_class_path(self) -> list[str]:
        return [str(jar) for jar in s3a_jars.jars()]  # Hadoop's S3 connector: 190 MB, on this machine already

    def java_options(self) -> list[str]:
        return []

    def pyiceberg_properties(self) -> dict[str, str]:
        objects = self._objects
        properties = {
            "type": "sql",
            "uri": team.Postgres(self.settings).url(self.catalog_database),
            "warehouse": self.warehouse,
            "s3.endpoint": objects.endpoint(),
            "s3.region": self.settings.aws_region,
        }
        if keys := objects.keys():
            properties |= {"s3.access-key-id": keys[0], "s3.secret-access-key": keys[1]}
        return properties

    def prepare_catalog_file(self) -> None:
        pass

    def prepare_catalog(self) -> None:
        pass  # Spark's JDBC catalog creates its tables in PostgreSQL if they are missing

    def spark_master(self) -> str | None:
        return team.SparkCluster(self.settings).master()

    def spark_cluster_conf(self) -> dict[str, str]:
        cluster = team.SparkCluster(self.settings)
        if not cluster.master():
            return {}
        conf = cluster.authentication()  # a given cluster's: its spark-defaults.conf
        if (address := team.this_host(self.settings)[1]) != team.LOOPBACK:
            # across hosts: the executors on other hosts connect back to this driver at its host's address
            conf |= {"spark.driver.host": address, "spark.driver.bindAddress": address}
        return conf

    def airflow_services(self) -> dict[str, str]:
        # URLs with passwords are read from 0600 files when Airflow needs them: no password is in an
        # environment, and `airflow config list` shows the commands, not the URLs. Celery's workers need no
        # metadata database (their tasks report to the API server's execution API, their results go to
        # Redis): a host of workers alone is given none, and its Airflow is pointed at a database that
        # refuses, so a part of Airflow that reached for one there would say so at once.
        postgres, redis = team.Postgres(self.settings), team.Redis(self.settings)
        database = (
            {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": f"cat {postgres.airflow_url_file}"}
            if team.runs_here(self.settings, "airflow-scheduler")
            else {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": NO_DATABASE_HERE}
        )
        return {
            **database,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL_CMD": f"cat {redis.broker_url_file}",
            "AIRFLOW__CELERY__RESULT_BACKEND_CMD": f"cat {redis.results_url_file}",
            # the secrets this host is given (a host of Celery workers: only the one its log server checks
            # requests with), one on every host: none is left for Airflow to generate per host
            **{
                team.AIRFLOW_SECRETS[name]: f"cat {team.airflow_secret_file(self.settings, name)}"
                for name in team.airflow_secrets_here(self.settings)
            },
            # A task whose worker was lost is failed after 45 s without a heartbeat, one whose message never
            # reached a worker after 180 s in the queue (Airflow's defaults: 300 s and 600 s), and retried 5 s
            # later: what `bash run chaos` proves the deployment survives with (docs/reliability.md).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "45",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
            # as many tasks queued or running as the Celery workers take at once (supervisord.conf: two of
            # one task each): a task is queued only when a worker is free, so 180 s queued is a lost message,
            # never a wait behind a long task
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
            # The DAG files are parsed again every 2 minutes (Airflow's default: 30 s), in one process: an idle
            # deployment's DAG processor took 6 % of a core re-reading files that change with a deploy
            # (docs/operations.md; a new DAG file is still found at its next listing of the folder)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        }

    def _catalog_exists(self) -> bool:
        return team.Postgres(self.settings).has_table(self.catalog_database, "iceberg_tables")

    def _catalog_place(self) -> str:
        return f"PostgreSQL database {self.catalog_database!r}"

    def describe(self) -> str:
        return f"{self.root} and the Iceberg catalog in PostgreSQL"

    def destroy(self) -> list[str]:
        done = []
        catalog = self.pyiceberg_catalog()
        for namespace in catalog.list_namespaces():
            for table in catalog.list_tables(namespace):
                catalog.drop_table(table)
            catalog.drop_namespace(namespace)
            done.append(f"dropped namespace {'.'.join(namespace)!r} from the catalog")
        s3, bucket = self._s3(), self._objects.bucket
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=item["Key"])
        done.append(f"emptied s3://{bucket}")
        return done
