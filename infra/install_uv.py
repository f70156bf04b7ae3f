"""Install uv without pip and without touching the system's Python: `python3 infra/install_uv.py DIR`.

A stock Debian or Ubuntu has a Python marked externally managed (PEP 668) and often no pip, so
`pip install uv` is refused or impossible there. uv is one static binary, published on PyPI as a wheel
(a zip file). This fetches the wheel of the pinned version for this machine from the package index
(PyPI, or the one `UV_DEFAULT_INDEX`, `UV_INDEX_URL` or `PIP_INDEX_URL` names), checks it against the
SHA-256 pinned below, and puts its `uv` and `uvx` into DIR, where uv's own installer puts them
(`~/.local/bin`). It uses the standard library only, so any python3 runs it; proxies
(`https_proxy`) and a CA bundle (`SSL_CERT_FILE`) are the standard library's own settings. An index
that asks for a login gets it as uv and pip give it: in the index URL (`https://user:password@host/…`),
else from `~/.netrc` (or the file `NETRC` names) for the index's host; it is sent to that host only, and
never printed.

A newer uv: set UV_VERSION and the wheels' SHA-256 from the index's page of that release.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import netrc
import os
import platform
import re
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile

UV_VERSION = "0.13.9"
# (machine, C library) -> the wheel of UV_VERSION for it and its SHA-256, as PyPI publishes them
WHEELS = {
    ("x86_64", "glibc"): (
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    ("x86_64", "musl"): (
        "uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl",
        "2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25",
    ),
    ("aarch64", "glibc"): (
        "uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
    ("aarch64", "musl"): (
        "uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
}
DEFAULT_INDEX = "https://pypi.org/simple"
BINARIES = ("uv", "uvx")


class NotInstalled(RuntimeError):
    pass


def index_url() -> str:
    """The package index the user's tools are configured with (uv's settings first, then pip's)."""
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(name):
            return os.environ[name].rstrip("/")
    return DEFAULT_INDEX


def shown(address: str) -> str:
    """An address as it may be printed: without a login in it."""
    parts = urllib.parse.urlsplit(address)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def login_for(index: str) -> tuple[str, str] | None:
    """The index's login: the URL's own user and password, else ~/.netrc's (or NETRC's) for its host."""
    parts = urllib.parse.urlsplit(index)
    if parts.username is not None:
        return urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
    try:
        found = netrc.netrc(os.environ.get("NETRC") or None).authenticators(parts.hostname or "")
    except (FileNotFoundError, netrc.NetrcParseError):
        return None
    return (found[0], found[2] or "") if found else None


def fetch(address: str, index: str, headers: dict[str, str] | None = None):
    """``address`` opened, with the index's login wherever it is on the index's host, redirected there too (as
    pip and uv send it); a wheel on another host, a CDN's or a redirect's, gets none."""
    login = login_for(index)
    host = urllib.parse.urlsplit(index).hostname

    def with_login(request: urllib.request.Request) -> urllib.request.Request:
        if login and urllib.parse.urlsplit(request.full_url).hostname == host:
            # unredirected: urllib would carry a plain header to any host a redirect names
            basic = base64.b64encode(":".join(login).encode()).decode()
            request.add_unredirected_header("Authorization", f"Basic {basic}")
        return request

    class Redirected(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, hdrs, newurl):
            new = super().redirect_request(req, fp, code, msg, hdrs, newurl)
            return with_login(new) if new is not None else None

    request = with_login(urllib.request.Request(shown(address), headers=dict(headers or {})))
    return urllib.request.build_opener(Redirected).open(request, timeout=120)


def this_machine() -> tuple[str, str]:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    libc = "glibc" if platform.libc_ver()[0] == "glibc" else "musl"
    return machine, libc


def wheel_address(index: str, filename: str) -> str:
    """The wheel's address on the index's page for uv (the simple API: JSON where the index speaks it,
    else its HTML links)."""
    page = f"{shown(index)}/uv/"
    accept = {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    with fetch(page, index, accept) as response:
        body, kind = response.read(), response.headers.get("Content-Type", "")
    if "json" in kind:
        links = [f["url"] for f in json.loads(body)["files"] if f["filename"] == filename]
    else:
        links = [href for href in re.findall(r'href="([^"]+)"', body.decode()) if filename in href]
    if not links:
        raise NotInstalled(f"{page} lists no {filename}")
    return urllib.parse.urljoin(page, links[0].split("#")[0])


def download(address: str, expected_sha256: str, index: str = DEFAULT_INDEX) -> bytes:
    with fetch(address, index) as response:
        size = int(response.headers.get("Content-Length") or 0)
        print(f"    downloading {address.rsplit('/', 1)[-1]} ({size / 1e6:.1f} MB)", file=sys.stderr, flush=True)
        data = response.read()
    found = hashlib.sha256(data).hexdigest()
    if found != expected_sha256:
        raise NotInstalled(f"{shown(address)} has SHA-256 {found}, not the pinned {expected_sha256}: not installed")
    return data


def install(directory: str, wheel: bytes) -> list[str]:
    """Each binary of the wheel into ``directory``, whole or not at all (a rename)."""
    os.makedirs(directory, exist_ok=True)
    placed = []
    with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
        for name in BINARIES:
            member = f"uv-{UV_VERSION}.data/scripts/{name}"
            with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{name}.", delete=False) as out:
                out.write(archive.read(member))
            os.chmod(out.name, 0o755)
            os.replace(out.name, os.path.join(directory, name))
            placed.append(os.path.join(directory, name))
    return placed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    machine = this_machine()
    if machine not in WHEELS:
        print(f"error: no pinned uv wheel for {machine[0]} ({machine[1]}); install uv yourself", file=sys.stderr)
        return 1
    filename, sha256 = WHEELS[machine]
    index = index_url()
    try:
        placed = install(argv[0], download(wheel_address(index, filename), sha256, index))
    except (OSError, NotInstalled, KeyError, ValueError, zipfile.BadZipFile) as error:
        print(f"error: uv {UV_VERSION} not installed from {shown(index)}: {error}", file=sys.stderr)
        return 1
    print(f"    uv {UV_VERSION} installed: {', '.join(placed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
