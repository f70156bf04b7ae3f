"""Hadoop's S3 connector for Spark (``s3a://``): hadoop-aws and the AWS SDK bundle it was built
against. No Maven repository is reachable from the machines this project is built on; PyPI carries
both jars inside the source archive of ``sagemaker-pyspark`` (``deps/jars/``). `bash run setup`
downloads that archive once from PyPI, checks it against the SHA-256 PyPI publishes for it (pinned
below), and keeps the two jars in a cache outside the repository. The team and aws profiles' Spark
sessions put them on their class path; the local profile does not need them.

    python -m nyc_taxi.core.s3a_jars      # download and check, if not done yet; print where they are
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ARCHIVE_URL = (
    "https://files.pythonhosted.org/packages/df/37/88e683fd29270ca890b1b889466325be5461abb93d5ea055bc3a505d40a8/"
    "sagemaker_pyspark-1.4.5.tar.gz"
)
ARCHIVE_SHA256 = "05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb"
MEMBERS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")  # the pair Hadoop 3.3.1 was built with
MEMBER_DIR = "sagemaker_pyspark-1.4.5/deps/jars/"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nyc-taxi" / "s3a-jars"


def jars() -> list[Path]:
    """The two jars; FileNotFoundError naming the command that gets them if they are missing."""
    found = [cache_dir() / name for name in MEMBERS]
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing from {cache_dir()}: run `bash run setup`")
    return found


def ensure() -> list[Path]:
    """Download, check and unpack the jars unless they are there."""
    try:
        return jars()
    except FileNotFoundError:
        pass
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        archive = Path(tmp) / "archive.tar.gz"
        digest = hashlib.sha256()
        with urllib.request.urlopen(ARCHIVE_URL, timeout=120) as answer, archive.open("wb") as out:
            size = int(answer.headers.get("Content-Length") or 0)
            print(
                f"==> downloading Hadoop's S3 connector for Spark (sagemaker-pyspark 1.4.5 from PyPI, "
                f"{size / 1e6:.0f} MB) into {target}",
                file=sys.stderr,
                flush=True,
            )
            while block := answer.read(1 << 20):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != ARCHIVE_SHA256:
            raise RuntimeError(f"{ARCHIVE_URL}: SHA-256 {digest.hexdigest()}, expected {ARCHIVE_SHA256}")
        with tarfile.open(archive) as tar:
            for name in MEMBERS:
                source = tar.extractfile(MEMBER_DIR + name)
                partial = Path(tmp) / name
                with partial.open("wb") as out:
                    shutil.copyfileobj(source, out)
                os.replace(partial, target / name)  # whole or not at all
    return jars()


if __name__ == "__main__":
    try:
        print("\n".join(str(p) for p in ensure()))
    except (OSError, RuntimeError) as error:
        sys.exit(f"could not get Hadoop's S3 connector jars: {error}")
