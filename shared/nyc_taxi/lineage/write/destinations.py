"""Where lineage goes: files in the state directory, always; and the servers the user's own settings name,
as each tool's own documentation says they are named (``delivery`` ships the files to them):

- OpenLineage: the transport OpenLineage's client finds (``OPENLINEAGE_CONFIG``, ``openlineage.yml`` in the
  working directory or ``~/.openlineage/``, ``OPENLINEAGE__…`` variables, ``OPENLINEAGE_URL`` with
  ``OPENLINEAGE_API_KEY`` and ``OPENLINEAGE_ENDPOINT``); none when ``OPENLINEAGE_DISABLED`` is true.
- DataHub: the DataHub plugin's own connection first (in an Airflow task, the Airflow adapter reads it as
  Airflow does and hands it to ``delivery``; elsewhere, where it is an ``AIRFLOW_CONN_…`` variable); else
  ``DATAHUB_GMS_URL`` (or ``DATAHUB_GMS_HOST`` and ``_PORT``) with ``DATAHUB_GMS_TOKEN``, else the ``gms``
  section of ``~/.datahubenv`` (what `datahub init` writes).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from nyc_taxi.core.settings import Settings


def datahub_records_dir(settings: Settings) -> Path:
    """Where every tool's DataHub record files (MCPs, JSON) live."""
    return settings.lineage_dir / "datahub"


def openlineage_events_dir(settings: Settings) -> Path:
    """Where every tool's OpenLineage events (JSON lines) live."""
    return settings.lineage_dir / "openlineage"


def datahub_file(settings: Settings, tool: str) -> Path:
    """The DataHub records one tool (airflow, metaflow, catalog) writes."""
    return datahub_records_dir(settings) / f"{tool}_mcps.json"


def openlineage_file(settings: Settings, tool: str) -> Path:
    """The OpenLineage events one tool (airflow, metaflow) writes."""
    return openlineage_events_dir(settings) / f"{tool}_events.jsonl"


def openlineage_disabled() -> bool:
    """OpenLineage's own switch (``OPENLINEAGE_DISABLED``, read as Airflow's provider reads it: true, 1 or
    t; OpenLineage's client takes only true): no event is made or sent, by either tool."""
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() in ("true", "1", "t")


def _digest(value: dict) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class OpenLineageTarget:
    """An OpenLineage transport, configured as OpenLineage's client takes it."""

    config: dict = field(hash=False)  # the transport's configuration: it may hold a key, never shown
    origin: str  # where the configuration came from, for people

    @property
    def key(self) -> str:
        """Names the target's ledger by where the events go, not how: another server (its type, URL,
        endpoint, topic...) gets every event again; a new key, password, timeout or name of the same server
        does not, nor the same server named with its default endpoint or without."""
        return _digest(_where(self.config))

    @property
    def label(self) -> str:
        url = self.config.get("url")
        return f"{url}/{self.config.get('endpoint', DEFAULT_ENDPOINT)}" if url else f"a {self.config['type']} transport"

    def transport(self, request_timeout: float):
        """The transport, with one try per request cut off by ``request_timeout`` unless the configuration
        says otherwise (whoever ships next tries again: retries here would only make a task wait)."""
        from openlineage.client.transport import get_default_factory

        # a copy: the factory takes a composite member's name and priority out of what it is given
        return get_default_factory().create(_one_try(copy.deepcopy(self.config), request_timeout))


# what of a transport's configuration says how it sends, not where: not part of its ledger's name
HOW_NOT_WHERE = ("auth", "timeout", "retry", "custom_headers", "compression", "name", "priority", "verify")
SECRET_WORDS = ("password", "secret", "token", "apikey", "api_key", "credential", "sasl")  # at any depth
DEFAULT_ENDPOINT = "api/v1/lineage"  # the http transport's, when none is given


def _where(config: dict) -> dict:
    """A transport's configuration as where it sends: without ``HOW_NOT_WHERE`` (at the top) and any key
    that names a secret (at any depth: a Kafka client's ``sasl.password``), an http transport's URL with
    its endpoint as the transport resolves it."""

    def kept(value):
        if isinstance(value, dict):
            return {k: kept(v) for k, v in value.items() if not any(w in str(k).lower() for w in SECRET_WORDS)}
        return value

    where = kept({k: v for k, v in config.items() if k not in HOW_NOT_WHERE})
    if where.get("type") == "http":
        where["url"] = str(where.get("url", "")).rstrip("/")
        where["endpoint"] = str(where.get("endpoint") or DEFAULT_ENDPOINT).strip("/")
    return where


def _one_try(config: dict, timeout: float) -> dict:
    return {"timeout": timeout, "retry": {"total": 0}, **config} if config.get("type") == "http" else config


def _members(transport: dict) -> list[dict]:
    """A composite transport as its members: each is shipped to on its own, with a ledger of its own, so
    one that is down neither loses its events nor holds back the others'."""
    if transport.get("type") != "composite":
        return [transport]
    members = transport.get("transports") or []
    members = [{**t, "name": n} for n, t in members.items() if t] if isinstance(members, dict) else members
    return [part for member in members for part in _members(member)]


def openlineage_config_file() -> Path | None:
    """The YAML file OpenLineage's client reads, in its documented order: OPENLINEAGE_CONFIG, then
    openlineage.yml in the working directory, then ~/.openlineage/openlineage.yml."""
    for candidate in (os.environ.get("OPENLINEAGE_CONFIG"), "openlineage.yml", "~/.openlineage/openlineage.yml"):
        if candidate and Path(candidate).expanduser().is_file():
            return Path(candidate).expanduser().resolve()
    return None


def openlineage_targets() -> list[OpenLineageTarget]:
    """The transports the user's OpenLineage settings name, as OpenLineage's client resolves them (a
    composite's members each on its own); none when OpenLineage is disabled or nothing is configured
    (where the client would print to the console)."""
    if openlineage_disabled():
        return []
    file = openlineage_config_file()
    if file is None and not any(k.startswith("OPENLINEAGE__") or k == "OPENLINEAGE_URL" for k in os.environ):
        return []
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.noop import NoopConfig, NoopTransport

    before, said = set(os.environ), logging.getLogger("openlineage.client.client")
    level = said.level
    said.setLevel(logging.WARNING)  # not "will use the noop transport": it is only asked
    try:  # the file over OPENLINEAGE__ variables; the client adds OPENLINEAGE_URL to a composite's members
        # A transport handed to the client: the configured one is built per server when shipping, where a
        # failure (a Kafka transport without its library) stops that server alone, not DataHub's delivery.
        client = OpenLineageClient(transport=NoopTransport(NoopConfig()))
        transport = dict(client.config.transport or {})
    finally:  # which it does by setting OPENLINEAGE__ variables of its own in this process: taken back
        said.setLevel(level)
        for name in set(os.environ) - before:
            del os.environ[name]
    if transport.get("type"):
        origin = f"the OpenLineage configuration {file}" if file else "OPENLINEAGE__ variables"
        return [OpenLineageTarget(member, origin) for member in _members(transport)]
    if url := os.environ.get("OPENLINEAGE_URL"):
        config = {"type": "http", "url": url, "endpoint": os.environ.get("OPENLINEAGE_ENDPOINT", DEFAULT_ENDPOINT)}
        if key := os.environ.get("OPENLINEAGE_API_KEY"):
            config["auth"] = {"type": "api_key", "apiKey": key}
        return [OpenLineageTarget(config, "OPENLINEAGE_URL")]
    return []


@dataclass(frozen=True)
class DataHubTarget:
    """A DataHub server (its GMS), the token it asks for, and what else its emitter is given (a connection's
    extra, as the DataHub plugin hands it on: extra headers, a CA certificate…)."""

    url: str
    token: str | None = field(default=None, repr=False)
    origin: str = ""
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.url.rstrip("/").encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        return self.url


def datahub_target(settings: Settings) -> DataHubTarget | None:
    """The DataHub the user's settings name: the DataHub plugin's Airflow connection where it is given as an
    ``AIRFLOW_CONN_…`` variable (``connection_target``: so a flow run by hand ships where Airflow's tasks do);
    else DataHub's own: DATAHUB_GMS_URL (or DATAHUB_GMS_HOST and _PORT) and DATAHUB_GMS_TOKEN, else the
    ``gms`` section of ``~/.datahubenv`` (unless DATAHUB_SKIP_CONFIG)."""
    token = settings.datahub_gms_token.get_secret_value() if settings.datahub_gms_token else None
    for conn_id in filter(None, (c.strip() for c in settings.datahub_conn_id.split(","))):
        if target := connection_target(os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}"), conn_id, settings):
            return target
    if settings.datahub_gms_url:
        return DataHubTarget(settings.datahub_gms_url, token, "DATAHUB_GMS_URL")
    from datahub.cli import config_utils

    if url := config_utils.get_url_from_env():
        return DataHubTarget(url, token, "DATAHUB_GMS_HOST")
    path = Path(config_utils.DATAHUB_CONFIG_PATH)
    if os.environ.get(config_utils.ENV_SKIP_CONFIG, "").lower() in ("true", "1") or not path.is_file():
        return None
    import yaml

    gms = (yaml.safe_load(path.read_text()) or {}).get("gms") or {}
    if not gms.get("server"):
        return None
    return DataHubTarget(gms["server"], token or gms.get("token") or None, str(path))


def connection_token(password: str | None, host: str, settings: Settings) -> str | None:
    """A DataHub connection's token: its password; without one, DATAHUB_GMS_TOKEN, unless DATAHUB_GMS_URL (or
    DATAHUB_GMS_HOST and _PORT) names another server (that token is that server's, never sent elsewhere)."""
    if password or not settings.datahub_gms_token:
        return password or None
    from datahub.cli import config_utils

    named = settings.datahub_gms_url or config_utils.get_url_from_env()
    if named and _server(named) != _server(host):
        return None
    return settings.datahub_gms_token.get_secret_value()


def _server(url: str) -> tuple[str, int | None]:
    from urllib.parse import urlsplit

    parts = urlsplit(url if "://" in url else f"http://{url}")
    return (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


def connection_target(value: str | None, conn_id: str, settings: Settings) -> DataHubTarget | None:
    """The DataHub of a ``datahub-rest`` Airflow connection as an ``AIRFLOW_CONN_…`` variable holds it (JSON, or
    Airflow's URI form), read as the DataHub plugin reads it: its host (and port) the GMS, its password the
    token (``connection_token``), its extra what the emitter is given. Read here without Airflow, whose import
    would set up an Airflow home where none is wanted (a flow run by hand); ``tests/test_users_settings.py``
    compares the reading with Airflow's own."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    if not value:
        return None
    if value.lstrip().startswith("{"):
        fields = json.loads(value)
        conn_type, host, port, password = (fields.get(k) for k in ("conn_type", "host", "port", "password"))
        extra = fields.get("extra") or {}
        extra = json.loads(extra) if isinstance(extra, str) else extra
    else:  # conn-type://login:password@host:port?extra, the host's own scheme percent-encoded or a second ://
        conn_type, _, rest = value.partition("://")
        if urlsplit(value).scheme != conn_type.lower():  # not a URI scheme ('_' in it): Airflow reads no type
            return None
        parts = urlsplit(rest if "://" in rest else f"//{rest}")
        host = unquote(parts.hostname or "")
        if "/" in host:  # an encoded scheme: the host as written (urlsplit lowercases and cuts it)
            host = unquote(parts.netloc.rsplit("@", 1)[-1].split(":", 1)[0])
        if host and "://" in rest:
            host = f"{parts.scheme}://{host}"
        port, password = parts.port, unquote(parts.password) if parts.password else None
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        extra = json.loads(query["__extra__"]) if "__extra__" in query else {k: _json_or(v) for k, v in query.items()}
    if (conn_type or "").replace("_", "-") != "datahub-rest" or not host:
        return None
    host = f"{host}:{port}" if port else host
    return DataHubTarget(host, connection_token(password, host, settings), f"the Airflow connection {conn_id}", extra)


def _json_or(value: str):
    """A URI's query value as Airflow reads a connection's extra from it: JSON where it parses."""
    try:
        return json.loads(value) if value else value
    except ValueError:
        return value
