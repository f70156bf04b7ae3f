"""Shipping the local lineage files to the servers, exactly once and in order.

The local files (``outbox``) are the source of truth. For each server the user's settings name
(``destinations``: OpenLineage's transport as its client finds it, DataHub's GMS) a ledger remembers,
per local file, how many of its records the server has accepted. Shipping sends the records after
that, in file order, one at a time, and writes the ledger after each one; it stops at the first
failure (down, refusing, too slow) so that order is kept, and whoever ships next — the next task or
step, or `bash run lineage-replay` — continues from there. Every task and step ships at its end within
a time budget (``LINEAGE_SHIP_SECONDS``); a server that is down costs a task at most that, and never a
record. A transport that does not raise when an event is lost (Kafka's producer logs a failed
delivery) is taken at its word.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.lineage.write.destinations import (
    DEFAULT_ENDPOINT,
    DataHubTarget,
    OpenLineageTarget,
    datahub_target,
    openlineage_disabled,
    openlineage_events_dir,
    openlineage_targets,
)
from nyc_taxi.lineage.write.outbox import datahub_files, read_datahub_file, read_openlineage_file, replace_file

log = logging.getLogger(__name__)
# Each request says where its record is in the local files: which file, and its place there with the
# file's head (``<index> <head>``). A server keeps each file's records once by them (the lineage receiver);
# others ignore the headers.
SOURCE_HEADER = "X-Lineage-Source"
POSITION_HEADER = "X-Lineage-Position"


def position(path: Path, index: int, head: str) -> dict[str, str]:
    return {SOURCE_HEADER: path.name, POSITION_HEADER: f"{index} {head}"}


class Server:
    """A lineage server the local files are shipped to."""

    name: str

    def __init__(self, settings: Settings, target: OpenLineageTarget | DataHubTarget | None = None):
        self.settings, self.target = settings, target  # no target: only its files are read

    @property
    def url(self) -> str:
        """What the server is, for people (never a key or token)."""
        return self.target.label

    def files(self) -> list[Path]: ...

    def read(self, path: Path) -> list[dict]: ...

    def sender(self) -> Callable[[dict, dict[str, str]], None]:
        """Sends one record with its ``position`` headers; raises unless the server accepted it."""

    @property
    def ledger_path(self) -> Path:
        """One ledger per server (its URL, its transport): another server gets every record again. A ledger
        the project kept before ledgers were named by the transport (by the server's URL alone) is taken
        over, so an upgrade sends nothing again."""
        path = self.settings.lineage_dir / "delivery" / f"{self.name}-{self.target.key}_ledger.json"
        if not path.exists() and (url := self._url_alone()):
            named = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:12]
            with contextlib.suppress(FileNotFoundError):  # none, or another process took it over first
                (path.parent / f"{self.name}-{named}_ledger.json").rename(path)
        return path

    def _url_alone(self) -> str | None:
        """The server's URL where it was all that named its ledger before (a plain HTTP server)."""
        return None


class OpenLineageServer(Server):
    name = "openlineage"

    def _url_alone(self) -> str | None:  # OPENLINEAGE_URL, posted to at OpenLineage's default endpoint
        config = self.target.config
        plain = config.get("type") == "http" and config.get("endpoint", DEFAULT_ENDPOINT).strip("/") == DEFAULT_ENDPOINT
        return config.get("url") if plain else None

    def files(self) -> list[Path]:
        return sorted(openlineage_events_dir(self.settings).glob("*.jsonl"))

    def read(self, path: Path) -> list[dict]:
        return read_openlineage_file(path)

    def sender(self) -> Callable[[dict, dict[str, str]], None]:
        transport = self.target.transport(self.settings.lineage_request_timeout)

        def send(record: dict, headers: dict[str, str]) -> None:
            if transport.kind == "http":  # read by every request the transport makes
                transport.config.custom_headers = {**self.target.config.get("custom_headers", {}), **headers}
            transport.emit(record)

        return send


class DataHubServer(Server):
    name = "datahub"

    def files(self) -> list[Path]:
        return datahub_files(self.settings)

    def read(self, path: Path) -> list[dict]:
        return read_datahub_file(path)

    def sender(self) -> Callable[[dict, dict[str, str]], None]:
        def send(record: dict, headers: dict[str, str]) -> None:
            # an emitter per record: DataHub's takes its headers once, into its session (one request each:
            # without OpenAPI ingestion it asks the server nothing else)
            emitter = datahub_emitter(self.target, self.settings.lineage_request_timeout, headers)
            try:
                emitter.emit(_proposal(copy.deepcopy(record)))  # DataHub's from_obj changes what it is given
            finally:
                emitter.close()

        return send


def datahub_emitter(target: DataHubTarget, timeout: float, headers: dict[str, str] | None = None):
    """DataHub's REST emitter to the target making one try per request, cut off by the request timeout:
    whoever ships next tries again, so retries here would only make a task wait."""
    from datahub.emitter.rest_emitter import DataHubRestEmitter

    ours = ("retry_max_times", "connect_timeout_sec", "read_timeout_sec", "timeout_sec", "openapi_ingestion")
    given = {k: v for k, v in target.extra.items() if k not in (*ours, "extra_headers")}  # a connection's extra
    return DataHubRestEmitter(
        target.url,
        token=target.token,
        **given,
        retry_max_times=0,
        connect_timeout_sec=timeout,
        read_timeout_sec=timeout,
        openapi_ingestion=False,
        extra_headers={**(target.extra.get("extra_headers") or {}), **(headers or {})},
    )


def _proposal(record: dict):
    """A record of DataHub's file format as the typed object DataHub's emitter sends (its file source's rule)."""
    from datahub.emitter.mcp import MetadataChangeProposalWrapper
    from datahub.metadata.schema_classes import MetadataChangeEventClass

    if "proposedSnapshot" in record:
        return MetadataChangeEventClass.from_obj(record)
    return MetadataChangeProposalWrapper.from_obj(record)


def servers(
    settings: Settings,
    datahub: list[DataHubTarget] | None = None,
    openlineage: list[OpenLineageTarget] | None = None,
) -> list[Server]:
    """The servers this state directory ships to: those the user's settings name (``datahub``: the
    DataHub servers an Airflow task's connection names, before DataHub's own settings; ``openlineage``:
    transports given instead of OpenLineage's own settings); on a host of the
    team deployment across hosts other than the receiver's, the lineage receiver on control instead,
    which speaks both endpoints (control ships on to the servers configured there)."""
    from nyc_taxi.core.team import LineageReceiver

    receiver = LineageReceiver(settings)
    if receiver.elsewhere():
        url, token = receiver.url(), receiver.token()
        auth = {"type": "api_key", "apiKey": token}
        receiving = [DataHubServer(settings, DataHubTarget(url, token, "the receiver"))]
        if not openlineage_disabled():  # OpenLineage's own switch, on this host too
            receiving.insert(
                0,
                OpenLineageServer(
                    settings, OpenLineageTarget({"type": "http", "url": url, "auth": auth}, "the receiver")
                ),
            )
        return receiving
    targets = datahub if datahub else [t for t in [datahub_target(settings)] if t]
    unique = {}
    for target in targets:
        unique.setdefault(target.key, target)
    openlineage = openlineage if openlineage is not None else openlineage_targets()
    return [OpenLineageServer(settings, t) for t in openlineage] + [DataHubServer(settings, t) for t in unique.values()]


def file_head(records: list[dict]) -> str:
    """A file is only ever appended to; a different first record means it was replaced."""
    return hashlib.sha256(json.dumps(records[:1], sort_keys=True).encode()).hexdigest()[:16]


def _ledger(server: Server) -> dict:
    path = server.ledger_path
    return json.loads(path.read_text()) if path.exists() else {}


def _shipped(ledger: dict, path: Path, records: list[dict]) -> int:
    entry = ledger.get(path.name, {})
    return (
        entry.get("shipped", 0)
        if entry.get("head") == file_head(records) and entry.get("shipped", 0) <= len(records)
        else 0
    )


@dataclass
class Shipment:
    server: str
    url: str
    sent: int = 0
    pending: int = 0
    error: str | None = None
    skipped: bool = False  # another process was shipping to this server


@dataclass
class ShipResult:
    shipments: list[Shipment] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return sum(s.sent for s in self.shipments)

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.shipments)


def ship(
    settings: Settings | None = None,
    budget_seconds: float | None = None,
    datahub: list[DataHubTarget] | None = None,
    openlineage: list[OpenLineageTarget] | None = None,
) -> ShipResult:
    """Send every record not sent yet to every configured server; within ``budget_seconds`` if given."""
    from filelock import FileLock, Timeout

    settings = settings or get_settings()
    deadline = time.monotonic() + budget_seconds if budget_seconds is not None else None
    result = ShipResult()
    for server in servers(settings, datahub, openlineage):
        shipment = Shipment(server.name, server.url)
        result.shipments.append(shipment)
        server.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(server.ledger_path.with_suffix(".lock")), timeout=0 if deadline else -1):
                _ship_to(server, shipment, deadline)
        except Timeout:
            shipment.skipped = True
    return result


def _ship_to(server: Server, shipment: Shipment, deadline: float | None) -> None:
    ledger, send = _ledger(server), None
    for path in server.files():
        records = server.read(path)
        start, head = _shipped(ledger, path, records), file_head(records)
        for index in range(start, len(records)):
            if shipment.error is not None or (deadline is not None and time.monotonic() > deadline):
                shipment.pending += len(records) - index
                break
            try:
                send = send or server.sender()
                send(records[index], position(path, index, head))
            except Exception as error:  # down, refusing, timing out: keep the rest for later, in order
                shipment.error = _why(error)
                shipment.pending += len(records) - index
                break
            shipment.sent += 1
            ledger[path.name] = {"shipped": index + 1, "head": head}
            replace_file(server.ledger_path, json.dumps(ledger, indent=1))


def _why(error: Exception) -> str:
    """What went wrong sending a record, with the server's own reason where it gave one (the body of an
    HTTP error, which OpenLineage's transport does not put in its exception)."""
    said = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
    body = getattr(getattr(error, "response", None), "text", None)
    return f"{said}: {body[:500]}" if body else said


def ship_at_end_of(what: str, settings: Settings | None = None, datahub: list[DataHubTarget] | None = None) -> None:
    """A task or step ships what is pending, within the time budget; never fails the work."""
    try:
        settings = settings or get_settings()
        if not servers(settings, datahub):
            return
        result = ship(settings, settings.lineage_ship_seconds, datahub)
    except Exception as error:  # lineage must never fail the data work
        log.warning(
            "lineage not shipped after %s: %s; it stays in the local files (bash run lineage-replay)", what, error
        )
        return
    for shipment in result.shipments:
        if shipment.error or shipment.pending:
            log.warning(
                "%s: %d lineage records sent to %s, %d kept for later%s (bash run lineage-replay)",
                what,
                shipment.sent,
                shipment.url,
                shipment.pending,
                f" ({shipment.error})" if shipment.error else "",
            )


@dataclass
class Pending:
    server: str
    file: str
    shipped: int
    total: int


def status(settings: Settings | None = None, datahub: list[DataHubTarget] | None = None) -> list[Pending]:
    """For every configured server and local file: how many records it has, how many were shipped."""
    settings = settings or get_settings()
    rows = []
    for server in servers(settings, datahub):
        ledger = _ledger(server)
        for path in server.files():
            records = server.read(path)
            rows.append(Pending(server.name, str(path), _shipped(ledger, path, records), len(records)))
    return rows
