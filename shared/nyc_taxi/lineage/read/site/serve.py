"""`bash run lineage serve [--port N]`: the lineage site on 127.0.0.1 (never another interface), rebuilt
when new records arrive.

The site is static; serving it only saves opening a file. A watcher compares the record files (size
and modification time) every few seconds; when they changed, it builds the site again into a folder
next to it and moves the new files into place name by name, so a page is never half written.
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from nyc_taxi.core.settings import Settings
from nyc_taxi.lineage.read.runs import event_files
from nyc_taxi.lineage.read.site.build import OWNED, OWNED_DIRS, build_site
from nyc_taxi.lineage.read.store import record_files

log = logging.getLogger(__name__)
HOST = "127.0.0.1"  # the site shows paths and run parameters: this machine only


def records_fingerprint(settings: Settings) -> tuple:
    """What the site is built from, as far as a change goes: every record file's size and time."""
    files = sorted(record_files(settings) + event_files(settings))
    return tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.exists())


def publish(staging: Path, out_dir: Path) -> None:
    """Move a fresh build into ``out_dir``: files by an atomic replace, folders by two renames; only
    what a build writes (``out_dir`` may hold other files)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in OWNED:
        if (staging / name).exists():
            (staging / name).replace(out_dir / name)
    for name in OWNED_DIRS:
        old = out_dir / f".{name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if (out_dir / name).exists():
            (out_dir / name).rename(old)
        if (staging / name).exists():
            (staging / name).rename(out_dir / name)
        shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        log.debug(format, *args)


class SiteServer:
    """The site's folder over HTTP on 127.0.0.1, and a watcher that rebuilds it."""

    def __init__(self, settings: Settings, out_dir: Path, port: int = 0, poll_seconds: float = 2.0, say=print):
        self.settings, self.out_dir, self.poll_seconds, self.say = settings, out_dir, poll_seconds, say
        handler = functools.partial(_QuietHandler, directory=str(out_dir))
        self.http = ThreadingHTTPServer((HOST, port), handler)
        self._stop = threading.Event()
        self._built_from: tuple = ()

    @property
    def url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host}:{port}/"

    def rebuild(self) -> None:
        fingerprint = records_fingerprint(self.settings)
        staging = self.out_dir.with_name(f".{self.out_dir.name}.next")
        shutil.rmtree(staging, ignore_errors=True)
        build_site(self.settings, staging)
        publish(staging, self.out_dir)
        self._built_from = fingerprint

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            if records_fingerprint(self.settings) == self._built_from:
                continue
            try:
                self.rebuild()
                self.say(f"rebuilt the site from the new records: {self.url}", flush=True)
            except Exception:  # records being written right now: the next look will do
                log.warning("could not rebuild the lineage site; trying again", exc_info=True)

    def start(self) -> str:
        """Build once, then serve and watch in the background; the URL."""
        self.rebuild()
        threading.Thread(target=self.http.serve_forever, daemon=True, name="lineage-site").start()
        threading.Thread(target=self._watch, daemon=True, name="lineage-site-watch").start()
        return self.url

    def stop(self) -> None:
        self._stop.set()
        self.http.shutdown()
        self.http.server_close()


def serve(settings: Settings, out_dir: Path, port: int = 0) -> None:
    """Serve until interrupted (Ctrl-C, or SIGTERM)."""
    import signal

    stopped = threading.Event()
    server = SiteServer(settings, out_dir, port)
    url = server.start()
    # our own handlers, set after the build: a library the build loads replaces SIGINT's, and Ctrl-C then
    # stopped nothing
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stopped.set())
    print(f"the lineage site: {url} (from {out_dir}; rebuilt when new records arrive; Ctrl-C stops)", flush=True)
    try:
        while not stopped.wait(1):  # timed: the handler runs in the main thread only once it wakes
            pass
    finally:
        server.stop()
