"""Fetch a published file over HTTP(S), check it is what the source publishes, land it atomically,
and remember which version of it landed.

Each landed file has a small record beside it (``<file>.source.json``): the URL, the server's ETag
and Last-Modified, the size and the sha256 of the bytes. The next download asks the server for the
file only if it changed (If-None-Match / If-Modified-Since, as browsers and CDNs do): an unchanged
file is not fetched again, a republished one is, and lineage records which version each run used.

A version the source replaced is kept, with its record, under ``versions/<sha256>/<file>`` beside the
landed file, for ``LANDED_VERSION_RETENTION_DAYS`` (30 by default; older ones are removed at the file's
next download): reproducing a load of it (`bash run lineage --reproduce`) reads it there.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from nyc_taxi.core.datasets import LandedFiles, PublishedFiles
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.naming import landed_folder
from nyc_taxi.core.settings import Settings
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.lineage.write.report import ColumnLineage, ColumnSource

log = logging.getLogger(__name__)

USER_AGENT = "nyc-taxi-lineage/0.1"
CHUNK = 1 << 20
SIDECAR = ".source.json"


@dataclass(frozen=True)
class FileVersion:
    """One version of a published file, as the server described it and as its bytes are."""

    url: str
    size: int
    sha256: str
    etag: str | None = None
    last_modified: str | None = None
    rows: int | None = None  # the rows the file holds, as its check read them (None: landed before it was kept)

    @property
    def published_version(self) -> str:
        """How the publisher versions it: the ETag, else Last-Modified and size, else the bytes' sha256."""
        if self.etag:
            return f"etag:{self.etag}"
        if self.last_modified:
            return f"last-modified:{self.last_modified};size:{self.size}"
        return f"sha256:{self.sha256}"

    @property
    def landed_version(self) -> str:
        return f"sha256:{self.sha256}"


@dataclass(frozen=True)
class Landed:
    location: str
    version: FileVersion
    fetched: bool  # False: the server said the landed copy is current


def byte_for_byte(published: PublishedFiles) -> ColumnLineage:
    """A landed file is the published file, byte for byte: every column is the published one."""
    return {c.name: (ColumnSource(published, c.name),) for c in published.columns}


def sidecar(location: str) -> str:
    return location + SIDECAR


def landed_version(location: str, settings: Settings) -> FileVersion | None:
    """What is known of the landed file at ``location`` (None: nothing landed, or landed without a record)."""
    lake = lakehouse(settings)
    if not lake.exists(location):
        return None
    known = lake.read_json(sidecar(location))
    return FileVersion(**known) if known else None


def retained_location(location: str, sha256: str) -> str:
    """Where a replaced version of a landed file is kept (the same file name, so it stages the same)."""
    folder, _, name = location.rpartition("/")
    return f"{folder}/versions/{sha256}/{name}"


def _retain(location: str, known: FileVersion, settings: Settings) -> None:
    """Keep the landed version about to be replaced, and drop the kept ones past the retention."""
    import datetime as dt

    lake = lakehouse(settings)
    kept = retained_location(location, known.sha256)
    if not lake.exists(kept):  # named by its content: a version kept before (A, B, A, B) is this one
        lake.share(location, kept)
    lake.write_json(sidecar(kept), asdict(known))
    folder, _, name = location.rpartition("/")
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=settings.landed_version_retention_days)
    for old, modified in lake.listing(f"{folder}/versions"):
        if old.endswith("/" + name) and modified < cutoff:
            lake.remove(old)
            lake.remove(sidecar(old))


def retained(landed: LandedFiles, name: str, version: str, settings: Settings) -> str | None:
    """The landed file ``name`` in ``version`` (``sha256:…``): the landed file itself while it is that
    version, else its retained copy; None when it is kept no more."""
    location = f"{lakehouse(settings).location(landed_folder(landed))}/{name}"
    sha = version.removeprefix("sha256:")
    current = landed_version(location, settings)
    if current is not None and current.sha256 == sha:
        return location
    kept = retained_location(location, sha)
    return kept if lakehouse(settings).exists(kept) else None


def head(url: str, timeout: float = 10.0) -> str | None:
    """The version the server publishes at ``url`` now, as ``published_version`` names it (a HEAD request:
    nothing downloaded); None when the server names none (neither ETag nor Last-Modified)."""
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            headers = response.headers
    except urllib.error.HTTPError as error:
        if error.code in (403, 404):
            raise NotPublishedYet(f"{url} answered HTTP {error.code}") from None
        raise
    size = int(headers.get("Content-Length") or 0)
    version = FileVersion(url, size, "", headers.get("ETag"), headers.get("Last-Modified"))
    return version.published_version if (version.etag or version.last_modified) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _request(url: str, known: FileVersion | None) -> urllib.request.Request:
    headers = {"User-Agent": USER_AGENT}
    if known and known.etag:
        headers["If-None-Match"] = known.etag
    elif known and known.last_modified:
        headers["If-Modified-Since"] = known.last_modified
    return urllib.request.Request(url, headers=headers)


def _get(url: str, known: FileVersion | None, dest: Path, timeout: float) -> FileVersion | None:
    """Download ``url`` to ``dest``; None when the server answers 304 (the known version is current)."""
    try:
        with urllib.request.urlopen(_request(url, known), timeout=timeout) as response, dest.open("wb") as out:
            expected = response.headers.get("Content-Length")
            size = 0
            while chunk := response.read(CHUNK):
                out.write(chunk)
                size += len(chunk)
            etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
    except urllib.error.HTTPError as error:
        if error.code == 304:
            return None
        if error.code in (403, 404):
            raise NotPublishedYet(f"{url} answered HTTP {error.code}: not published yet") from None
        raise
    if expected is not None and int(expected) != size:
        raise BadSourceFile(
            f"{url}: got {size} bytes of the announced {expected} (connection cut short); "
            "nothing was landed — re-run the task to fetch it again"
        )
    return FileVersion(url=url, size=size, sha256=_sha256(dest), etag=etag, last_modified=modified)


def fetch(
    url: str, location: str, validate: Callable[[Path, str], int], settings: Settings, timeout: float = 300.0
) -> Landed:
    """Land ``url`` at ``location`` unless the landed copy is the server's current version.

    ``validate(path, origin)`` raises BadSourceFile for anything the source would not publish, and returns
    the rows the file holds (kept in its record: what staging it must give); the landed file is replaced
    only by a file that passed it, and its record only after the file.
    """
    lake = lakehouse(settings)
    known = landed_version(location, settings)
    if known is not None:
        with lake.local_copy(location) as path:
            if _sha256(path) != known.sha256:
                log.warning("landed copy of %s is not the version that landed; fetching it again", location)
                known = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(location).name
        try:
            fetched = _get(url, known, path, timeout)
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            if known is None or isinstance(error, urllib.error.HTTPError):
                raise
            log.warning(
                "%s cannot be reached (%s); using the landed copy, version %s", url, error, known.published_version
            )
            return Landed(location, known, fetched=False)
        if fetched is None:
            log.info("not modified since it landed (%s): %s", known.published_version, location)
            return Landed(location, known, fetched=False)
        fetched = replace(fetched, rows=validate(path, url))
        if known is not None:
            _retain(location, known, settings)
        lake.publish(path, location)
    lake.write_json(sidecar(location), asdict(fetched))
    log.info("landed %s (%d bytes, %s) at %s", url, fetched.size, fetched.published_version, location)
    return Landed(location, fetched, fetched=True)
