"""How every tool names a dataset and a job: the naming rules, applied to the declarations.

Datasets (see README, "How one table gets one name"):
- Iceberg tables: DataHub platform ``iceberg``, name ``[<platform instance>.]<database>.<table>`` (the
  name DataHub's own Iceberg source gives a table); Airflow Asset ``iceberg://<that name>``, which
  DataHub's Airflow plugin turns into exactly that URN; OpenLineage namespace ``iceberg://<catalog>``
  and the same dotted name, so DataHub's OpenLineage translation lands on the same URN. The storage
  location and, on aws, the Glue table are OpenLineage symlinks, as the naming spec describes.
- Published files: the OpenLineage naming for a URL, ``<scheme>://<host>[:<port>]`` + path, the
  month in the path as ``*`` (one logical dataset; each run's file is its version). A loopback
  host's port is left out: a fixture server listens on a new port every run, yet it is one source.
- Landed files: the lake's logical name (``file://<catalog>`` + path in the lake locally,
  ``s3://<bucket>`` + key on aws), never the checkout's absolute path, so the same lake is the same
  node from every clone; the physical location is a symlink.
- The model: an ML model in DataHub, a dataset in the ``metaflow://`` namespace in OpenLineage.

DataHub URNs are built with DataHub's own builder, imported only when a URN is asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from nyc_taxi.core import aws
from nyc_taxi.core.datasets import Dataset, LandedFiles, Model, PublishedFiles, Table
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from nyc_taxi.core.jobs import Job, Pipeline

ICEBERG_PLATFORM = "iceberg"
MODEL_PLATFORM = "metaflow"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
DEFAULT_PORTS = {"http": 80, "https": 443}
# DataHub's OpenLineage translation: these schemes are storage, the authority stays in the name.
STORAGE_SCHEMES = {"s3": "s3", "s3a": "s3", "file": "file"}


@dataclass(frozen=True)
class Symlink:
    namespace: str
    name: str
    type: str  # LOCATION | TABLE


@dataclass(frozen=True)
class Identity:
    """How every tool names one dataset under one profile."""

    key: str  # the registry name
    datahub_urn: str
    ol_namespace: str
    ol_name: str
    ol_symlinks: tuple[Symlink, ...] = ()
    asset_uri: str | None = None
    location: str | None = None  # where the bytes are: a local path, an s3:// URI or a URL

    def openlineage_dataset(self):
        """The OpenLineage dataset (with its symlinks), as the OpenLineage client types it."""
        from openlineage.client.event_v2 import Dataset as OLDataset
        from openlineage.client.facet_v2 import symlinks_dataset

        facets = {}
        if self.ol_symlinks:
            facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
                identifiers=[
                    symlinks_dataset.Identifier(namespace=s.namespace, name=s.name, type=s.type)
                    for s in self.ol_symlinks
                ]
            )
        return OLDataset(namespace=self.ol_namespace, name=self.ol_name, facets=facets)


# ---- tables -------------------------------------------------------------------------------


def iceberg_identifier(table: Table, settings: Settings | None = None) -> str:
    """The table inside the catalog: ``<database>.<table>``."""
    return f"{(settings or get_settings()).database}.{table.name}"


def spark_table(table: Table, settings: Settings | None = None) -> str:
    """The table for Spark SQL: ``<catalog>.<database>.<table>``."""
    settings = settings or get_settings()
    return f"{settings.catalog_name}.{iceberg_identifier(table, settings)}"


def table_location(table: Table, settings: Settings | None = None) -> str:
    settings = settings or get_settings()
    return f"{lakehouse(settings).warehouse}/{settings.database}/{table.name}"


def _instance_name(name: str, settings: Settings) -> str:
    instance = settings.datahub_platform_instance
    return f"{instance}.{name}" if instance else name


# ---- files --------------------------------------------------------------------------------


def published_url(
    published: PublishedFiles, year: int, month: int, settings: Settings | None = None, **parts: str
) -> str:
    """The URL of one period's file on the publisher's site (or the fixture server standing in for it)."""
    base = getattr(settings or get_settings(), published.base_url_setting)
    return base + published.path.format(year=year, month=month, **parts)


def landed_folder(landed: LandedFiles) -> str:
    """The landed files' folder, relative to the lake root."""
    return f"landing/{landed.name}"


def landed_location(landed: LandedFiles, year: int, month: int, settings: Settings | None = None, **parts: str) -> str:
    """Where one landed file is (a local path or an s3:// URI)."""
    folder = lakehouse(settings).location(landed_folder(landed))
    return f"{folder}/{landed.file_name.format(year=year, month=month, **parts)}"


def _url_namespace(base_url: str) -> str:
    parts = urlsplit(base_url)
    port = parts.port
    if port is None or port == DEFAULT_PORTS.get(parts.scheme) or parts.hostname in LOOPBACK_HOSTS:
        return f"{parts.scheme}://{parts.hostname}"
    return f"{parts.scheme}://{parts.hostname}:{port}"


def _logical_path(template: str) -> str:
    """The path template with every varying part as ``*``: the logical dataset of all periods."""
    return re.sub(r"\{[^}]*\}(?:[-_]?\{[^}]*\})*", "*", template)


# ---- every dataset ------------------------------------------------------------------------


def _datahub_urn(ol_namespace: str, ol_name: str, settings: Settings) -> str:
    """DataHub's translation of an OpenLineage dataset, as DataHub's Airflow plugin does it."""
    from datahub.emitter.mce_builder import make_dataset_urn

    scheme, _, authority = ol_namespace.partition("://")
    if scheme in STORAGE_SCHEMES and authority:
        return make_dataset_urn(
            STORAGE_SCHEMES[scheme], f"{authority.rstrip('/')}/{ol_name.lstrip('/')}".rstrip("/"), settings.datahub_env
        )
    return make_dataset_urn(scheme if authority else ol_namespace, ol_name, settings.datahub_env)


def identity(dataset: Dataset, settings: Settings | None = None) -> Identity:
    """Every name of ``dataset`` under the active profile."""
    settings = settings or get_settings()
    lake = lakehouse(settings)
    if isinstance(dataset, Table):
        name = _instance_name(iceberg_identifier(dataset, settings), settings)
        location = table_location(dataset, settings)
        symlinks = [Symlink(*lake.storage_name(location), "LOCATION")]
        if settings.profile == "aws":
            from openlineage.client.naming.dataset import AWSGlue

            glue = AWSGlue(
                region_name=settings.aws_region,
                account_id=aws.account_id(settings),
                database_name=settings.database,
                table_name=dataset.name,
            )
            symlinks.append(Symlink(glue.get_namespace(), glue.get_name(), "TABLE"))
        from datahub.emitter.mce_builder import make_dataset_urn

        return Identity(
            dataset.name,
            make_dataset_urn(ICEBERG_PLATFORM, name, settings.datahub_env),
            f"{ICEBERG_PLATFORM}://{settings.catalog_name}",
            name,
            tuple(symlinks),
            asset_uri=f"{ICEBERG_PLATFORM}://{name}",
            location=location,
        )
    if isinstance(dataset, LandedFiles):
        namespace, name = lake.logical_name(landed_folder(dataset))
        location = lake.location(landed_folder(dataset))
        physical = lake.storage_name(location)
        symlinks = () if physical == (namespace, name) else (Symlink(*physical, "LOCATION"),)
        return Identity(
            dataset.name,
            _datahub_urn(namespace, name, settings),
            namespace,
            name,
            symlinks,
            asset_uri=f"{namespace}{name}" if name.startswith("/") else f"{namespace}/{name}",
            location=location,
        )
    if isinstance(dataset, PublishedFiles):
        base = getattr(settings, dataset.base_url_setting)
        namespace, name = _url_namespace(base), _logical_path(dataset.path)
        return Identity(dataset.name, _datahub_urn(namespace, name, settings), namespace, name, location=base + name)
    if isinstance(dataset, Model):
        from datahub.emitter.mce_builder import make_ml_model_urn

        name = _instance_name(f"{settings.database}.{dataset.name}", settings)
        return Identity(
            dataset.name,
            make_ml_model_urn(MODEL_PLATFORM, name, settings.datahub_env),
            f"{MODEL_PLATFORM}://{settings.openlineage_namespace}",
            name,
        )
    raise TypeError(f"not a dataset of the registry: {dataset!r}")


def asset_uri(table: Table, settings: Settings | None = None) -> str:
    """The Airflow Asset URI of a table (no cloud call and no SDK: safe while a DAG file is parsed)."""
    settings = settings or get_settings()
    return f"{ICEBERG_PLATFORM}://{_instance_name(iceberg_identifier(table, settings), settings)}"


# ---- jobs ---------------------------------------------------------------------------------


def datahub_flow_urn(pipeline: Pipeline, settings: Settings | None = None) -> str:
    """The DataFlow URN of a DAG or flow (the cluster is DataHub's env, as the Airflow plugin sets it)."""
    from datahub.emitter.mce_builder import make_data_flow_urn

    settings = settings or get_settings()
    return make_data_flow_urn(
        pipeline.orchestrator, pipeline.name, settings.datahub_env, settings.datahub_platform_instance
    )


def datahub_job_urn(pipeline: Pipeline, job: Job | str, settings: Settings | None = None) -> str:
    """The DataJob URN of a task or step of ``pipeline``."""
    from datahub.emitter.mce_builder import make_data_job_urn_with_flow

    return make_data_job_urn_with_flow(datahub_flow_urn(pipeline, settings), getattr(job, "name", job))
