"""Fetch a source file over HTTP(S), check it is what the source publishes, land it atomically."""

from __future__ import annotations

import logging
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from nyc_taxi.ingest import landing
from nyc_taxi.ingest.errors import BadSourceFile, NotPublishedYet
from nyc_taxi.settings import Settings

log = logging.getLogger(__name__)

USER_AGENT = "nyc-taxi-lineage/0.1"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Landed:
    url: str
    location: str
    fetched: bool  # False: an already landed, complete file was reused
    size: int


def _http_get(url: str, dest: Path, timeout: float) -> int:
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, dest.open("wb") as out:
            expected = response.headers.get("Content-Length")
            size = 0
            while chunk := response.read(CHUNK):
                out.write(chunk)
                size += len(chunk)
    except urllib.error.HTTPError as error:
        if error.code in (403, 404):
            raise NotPublishedYet(f"{url} answered HTTP {error.code}: not published yet") from None
        raise
    if expected is not None and int(expected) != size:
        raise BadSourceFile(f"{url}: got {size} bytes of the announced {expected} (connection cut short); "
                            "nothing was landed — re-run the task to fetch it again")
    return size


def fetch(url: str, location: str, validate: Callable[[Path, str], None], settings: Settings,
          refetch: bool = False, timeout: float = 300.0) -> Landed:
    """Land ``url`` at ``location`` unless a complete, valid copy is already there.

    ``validate(path, url)`` raises BadSourceFile for anything the source would not publish;
    the landed file is replaced only by a file that passed it.
    """
    if not refetch and landing.exists(location, settings):
        with landing.local_copy(location, settings) as path:
            try:
                validate(path, location)
                log.info("already landed and complete: %s", location)
                return Landed(url, location, fetched=False, size=path.stat().st_size)
            except BadSourceFile as problem:
                log.warning("landed copy is not usable (%s); fetching again", problem)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(location).name
        size = _http_get(url, path, timeout)
        validate(path, url)
        landing.publish(path, location, settings)
    log.info("landed %s (%d bytes) at %s", url, size, location)
    return Landed(url, location, fetched=True, size=size)
