"""The project installs itself and runs on a stock machine, as a user's is: a fresh clone on a Debian 12
root of its own (made with debootstrap: Python 3.11 from Debian, marked externally managed, no pip, no uv,
no Java), and on this machine with only the system's Python on PATH and an empty home.

Nothing outside the root is used but the package registries (Debian's archive, PyPI); this machine's CA
bundle is carried in because its network reaches the registries through a proxy that bundle trusts, the
machine's own setup, never `bash run`'s (`SSL_CERT_FILE`, `PIP_CERT`). Both need the registries, so they
are the system lane's; the fast lane checks that `run` never asks the system's Python for pip
(`test_bootstrap.py`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap and chroot need root"),
    pytest.mark.skipif(shutil.which("debootstrap") is None, reason="debootstrap (bash run test --system installs it)"),
]

REPO = Path(__file__).resolve().parents[1]
STOCK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN = "http://deb.debian.org/debian"


def machine_ca_bundle() -> Path | None:
    """The CA bundle this machine's own tools are pointed at (its pip configuration's), if any."""
    for name in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return Path(os.environ[name])
    return None


def fresh_clone(target: Path) -> Path:
    """The repository as committed, cloned: what a user gets (no environment, no state)."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True)
    return target


def test_a_fresh_clone_runs_the_demo_on_a_stock_debian_12(tmp_path):
    root = tmp_path / "bookworm"
    made = subprocess.run(
        ["debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    mounted = []
    try:
        for kind, target in (("proc", "proc"), ("sys", "sys"), ("dev", "dev")):
            args = ["mount", "-t", "proc", "proc"] if kind == "proc" else ["mount", "--rbind", f"/{kind}"]
            subprocess.run([*args, str(root / target)], check=True)
            mounted.append(root / target)
        shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
        # every installed Debian has these two lines (the installer writes them); debootstrap's minbase does not
        (root / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
        carried = {}
        if (bundle := machine_ca_bundle()) is not None:
            shutil.copyfile(bundle, root / "root" / "machine-ca.crt")
            carried = {"SSL_CERT_FILE": "/root/machine-ca.crt", "PIP_CERT": "/root/machine-ca.crt"}
        fresh_clone(root / "root" / "project")

        def inside(command: str, timeout: int, **env: str) -> subprocess.CompletedProcess:
            variables = [f"{k}={v}" for k, v in {"PATH": STOCK_PATH, "HOME": "/root", **env}.items()]
            return subprocess.run(
                ["chroot", str(root), "env", "-i", *variables, "bash", "-c", command],
                capture_output=True,
                text=True,
                timeout=timeout,
            )

        # what a Debian 12 cloud image has: Python 3.11 from Debian, git, certificates; no pip, no venv
        base = inside(
            "apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 git ca-certificates", 600
        )
        assert base.returncode == 0, base.stderr[-3000:]
        stock = inside("python3 --version; python3 -m pip --version; ls /usr/lib/python3*/EXTERNALLY-MANAGED", 60)
        assert "Python 3.11" in stock.stdout and "No module named pip" in stock.stderr, stock
        assert "EXTERNALLY-MANAGED" in stock.stdout, stock

        demo = inside("cd /root/project && bash run demo", 3600, **carried)
        said = demo.stdout + demo.stderr
        assert demo.returncode == 0, said[-6000:]
        assert "installing uv into /root/.local/bin" in said  # no uv was there: run installed it, without pip
        assert "interpreter at: /usr/bin/python3" in said  # the system's own Python, in a venv uv made
        assert "wins: seasonal_naive" in said and "the DAG runs: ok" in said
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-R", str(target)], check=False)
    assert not [m for m in Path("/proc/mounts").read_text().splitlines() if str(root) in m]
    shutil.rmtree(root)


def test_setup_succeeds_with_the_systems_python_first_on_path_and_a_fresh_home(tmp_path):
    """Our machines have a Python of their own ahead of the system's: with it off PATH and an empty home
    (no uv, no caches), `bash run setup` in a fresh clone installs everything on the system's Python."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system Python at /usr/bin/python3")
    clone, home = fresh_clone(tmp_path / "clone"), tmp_path / "home"
    home.mkdir()
    env = {"PATH": STOCK_PATH, "HOME": str(home)}
    if (bundle := machine_ca_bundle()) is not None:
        env |= {"SSL_CERT_FILE": str(bundle), "PIP_CERT": str(bundle)}
    done = subprocess.run(["bash", "run", "setup"], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]
    system = subprocess.run(["/usr/bin/python3", "--version"], capture_output=True, text=True, check=True).stdout
    assert f"environment ready: {system.strip()}" in said, said[-2000:]
    assert (home / ".local" / "bin" / "uv").is_file() and "interpreter at: /usr/bin/python3" in said
