"""How `bash run` installs itself on a stock machine: uv without pip (a Python marked externally managed,
PEP 668, or one without pip, refuses `pip install`), from the package index, checked against its pin.
The whole install on a stock Debian 12 root is the system lane's (`test_stock_machine.py`)."""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import io
import json
import subprocess
import threading
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALLER = REPO / "infra" / "install_uv.py"


def installer():
    spec = importlib.util.spec_from_file_location("install_uv", INSTALLER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_wheel(version: str) -> bytes:
    """A wheel laid out as uv's: its binaries under ``uv-<version>.data/scripts/``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in ("uv", "uvx"):
            archive.writestr(f"uv-{version}.data/scripts/{name}", f"#!/bin/sh\necho {name} from the fake wheel\n")
    return buffer.getvalue()


@contextmanager
def index_serving(files: dict[str, bytes], json_api: bool = True, login: str | None = None, redirect: str = ""):
    """A package index on 127.0.0.1 whose page for uv lists ``files`` (the simple API, JSON or HTML);
    with ``login`` (user:password), one that answers 401 to a request without it; with ``redirect`` (an
    address), one that sends each file's request there, as an index in front of a CDN does (``"self"``: to
    another path of its own, ``/moved/files/``, as an index that canonicalises its paths does)."""
    import base64

    asked: list[str] = []

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            if login and self.headers.get("Authorization") != "Basic " + base64.b64encode(login.encode()).decode():
                self.send_error(401)
                return
            if redirect and self.path.startswith("/files/"):
                self.send_response(302)
                self.send_header("Location", f"/moved{self.path}" if redirect == "self" else redirect + self.path)
                self.end_headers()
                return
            self.path = self.path.removeprefix("/moved")
            if self.path == "/simple/uv/":
                if json_api:
                    body = json.dumps({"files": [{"filename": n, "url": f"/files/{n}"} for n in files]}).encode()
                    kind = "application/vnd.pypi.simple.v1+json"
                else:
                    body = "".join(f'<a href="../../files/{n}#sha256=x">{n}</a>' for n in files).encode()
                    kind = "text/html"
            elif self.path.startswith("/files/") and self.path[7:] in files:
                body, kind = files[self.path[7:]], "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/simple", asked
    finally:
        server.shutdown()


@pytest.mark.parametrize("json_api", [True, False], ids=["json-index", "html-index"])
def test_uv_is_installed_from_the_index_only_as_the_wheel_its_pin_names(tmp_path, monkeypatch, capsys, json_api):
    module = installer()
    wheel = fake_wheel(module.UV_VERSION)
    filename = "uv-fake-py3-none-any.whl"
    monkeypatch.setattr(module, "WHEELS", {module.this_machine(): (filename, hashlib.sha256(wheel).hexdigest())})
    with index_serving({filename: wheel}, json_api) as (url, asked):
        monkeypatch.setenv("UV_DEFAULT_INDEX", url)
        target = tmp_path / "bin"
        assert module.main([str(target)]) == 0
        assert asked == ["/simple/uv/", f"/files/{filename}"]
    for name in ("uv", "uvx"):
        ran = subprocess.run([target / name], capture_output=True, text=True, check=True)
        assert ran.stdout == f"{name} from the fake wheel\n"

    # the same file under a pin it does not match: refused, nothing placed
    monkeypatch.setattr(module, "WHEELS", {module.this_machine(): (filename, "0" * 64)})
    with index_serving({filename: wheel + b"changed"}, json_api) as (url, _):
        monkeypatch.setenv("UV_DEFAULT_INDEX", url)
        elsewhere = tmp_path / "other"
        assert module.main([str(elsewhere)]) == 1
    assert "not the pinned" in capsys.readouterr().err
    assert not elsewhere.exists() or not list(elsewhere.iterdir())


@pytest.mark.parametrize("given", ["in-the-url", "netrc"])
def test_an_index_that_asks_for_a_login_gets_it_as_uv_and_pip_give_it_and_it_is_never_printed(
    tmp_path, monkeypatch, capsys, given
):
    module = installer()
    wheel = fake_wheel(module.UV_VERSION)
    filename = "uv-fake-py3-none-any.whl"
    monkeypatch.setattr(module, "WHEELS", {module.this_machine(): (filename, hashlib.sha256(wheel).hexdigest())})
    with index_serving({filename: wheel}, login="reader:s3cret-pw") as (url, asked):
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login reader password s3cret-pw\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc) if given == "netrc" else str(tmp_path / "none"))
        index = url.replace("http://", "http://reader:s3cret-pw@") if given == "in-the-url" else url
        monkeypatch.setenv("UV_DEFAULT_INDEX", index)
        assert module.main([str(tmp_path / "bin")]) == 0
        assert asked == ["/simple/uv/", f"/files/{filename}"]
        monkeypatch.setenv("NETRC", str(tmp_path / "none"))
        monkeypatch.setenv("UV_DEFAULT_INDEX", url.replace("http://", "http://reader:wrong-pw@"))
        assert module.main([str(tmp_path / "other")]) == 1  # refused (401), and said without the login
    said = capsys.readouterr().err
    assert "s3cret-pw" not in said and "wrong-pw" not in said and "401" in said, said


def test_the_login_is_not_carried_to_the_host_a_wheel_is_redirected_to(tmp_path, monkeypatch):
    """The index sends the wheel's request to another host (localhost, not 127.0.0.1: another name): the
    file is fetched there without the index's login."""
    module = installer()
    wheel = fake_wheel(module.UV_VERSION)
    filename = "uv-fake-py3-none-any.whl"
    monkeypatch.setattr(module, "WHEELS", {module.this_machine(): (filename, hashlib.sha256(wheel).hexdigest())})
    with index_serving({filename: wheel}) as (cdn, _):
        seen: list[str | None] = []

        class Recording(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # the CDN: what it was sent, then the file
                seen.append(self.headers.get("Authorization"))
                self.send_response(302)
                self.send_header("Location", cdn.replace("/simple", "") + self.path)
                self.end_headers()

            def log_message(self, *args):
                pass

        recorder = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recording)
        threading.Thread(target=recorder.serve_forever, daemon=True).start()
        try:
            other = f"http://localhost:{recorder.server_port}"
            with index_serving({filename: wheel}, login="reader:s3cret-pw", redirect=other) as (url, asked):
                monkeypatch.setenv("NETRC", str(tmp_path / "none"))
                monkeypatch.setenv("UV_DEFAULT_INDEX", url.replace("http://", "http://reader:s3cret-pw@"))
                assert module.main([str(tmp_path / "bin")]) == 0
        finally:
            recorder.shutdown()
    assert asked == ["/simple/uv/", f"/files/{filename}"] and seen == [None]


def test_the_login_goes_with_a_redirect_to_the_index_s_own_host(tmp_path, monkeypatch):
    """An index that sends a file's request to another path of its own (its login asked there too): the
    file is fetched, the login sent again on the index's host, as pip and uv send it."""
    module = installer()
    wheel = fake_wheel(module.UV_VERSION)
    filename = "uv-fake-py3-none-any.whl"
    monkeypatch.setattr(module, "WHEELS", {module.this_machine(): (filename, hashlib.sha256(wheel).hexdigest())})
    with index_serving({filename: wheel}, login="reader:s3cret-pw", redirect="self") as (url, asked):
        monkeypatch.setenv("NETRC", str(tmp_path / "none"))
        monkeypatch.setenv("UV_DEFAULT_INDEX", url.replace("http://", "http://reader:s3cret-pw@"))
        assert module.main([str(tmp_path / "bin")]) == 0
    assert asked == ["/simple/uv/", f"/files/{filename}", f"/moved/files/{filename}"]


def test_every_pinned_wheel_is_uvs_of_the_pinned_version():
    module = installer()
    for (machine, libc), (filename, sha256) in module.WHEELS.items():
        assert filename.startswith(f"uv-{module.UV_VERSION}-py3-none-") and machine in filename, (machine, libc)
        assert ("musllinux" in filename) if libc == "musl" else ("manylinux" in filename)
        assert len(sha256) == 64 and int(sha256, 16) >= 0


def test_run_installs_uv_with_the_systems_python_and_never_asks_pip(tmp_path):
    """A machine without uv: `bash run setup` runs the installer with python3 and nothing else through
    it (no `python3 -m pip`). Here the index answers 404, so the install fails, and says what to do."""
    bin_dir, log = tmp_path / "bin", tmp_path / "python3.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec /usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    with index_serving({}) as (url, asked):
        ran = subprocess.run(
            ["bash", "run", "setup"],
            cwd=REPO,
            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "UV_DEFAULT_INDEX": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert ran.returncode != 0
    assert "could not install uv" in ran.stderr and "pipx install uv" in ran.stderr, ran.stderr
    assert asked == ["/simple/uv/"]
    calls = log.read_text().splitlines()
    assert calls == [f"{INSTALLER} {home}/.local/bin"], calls
    assert not (home / ".local" / "bin" / "uv").exists()
