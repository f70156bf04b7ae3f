"""Metaflow's configuration: the user's where they gave one, the project's local default where not.
`python -m nyc_taxi.metaflow_adapter.environment` prints it as `export` lines for the task runner.

Metaflow reads a setting from its ``METAFLOW_…`` variable, else from its configuration file: ``config.json``
(or ``config_<METAFLOW_PROFILE>.json``) in ``METAFLOW_HOME``, ``~/.metaflowconfig`` by default. The project
sets only the settings the user gave in neither: local metadata and datastore under the state directory's
``metaflow`` (across hosts, a mount of the filer every host shares), or the team profile's bucket. So a
user's Metaflow profile (a metadata service, an S3 datastore) is the one the flow runs with, and the
lineage, `--reproduce` and the DAG's resume find its runs through Metaflow's client wherever they are.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
from pathlib import Path

from nyc_taxi.core.environments import mark, project_set
from nyc_taxi.core.settings import Settings, get_settings

# The METAFLOW_ names the project set in this environment: a later reading tells its own from a user's.
PROJECT_SET = "NYC_TAXI_METAFLOW_SET"
# The settings that say where artifacts are kept: a user who gives one gets none of the project's datastore
# settings (``DATASTORE_PARTS``: its bucket's endpoint and credentials would otherwise go with theirs)
DATASTORE = ("METAFLOW_DEFAULT_DATASTORE", "METAFLOW_DATASTORE_SYSROOT_")
DATASTORE_PARTS = (*DATASTORE, "METAFLOW_S3_ENDPOINT_URL", "AWS_")


def _user() -> str:
    for name in (os.environ.get("METAFLOW_USER"), os.environ.get("USER"), getpass.getuser()):
        if name and name != "root":
            return name
    return "nyc-taxi"


def users_metaflow_config(environ: dict[str, str] | None = None) -> tuple[Path | None, dict]:
    """The configuration file Metaflow would read, and what it holds (None, {} when there is none). A
    METAFLOW_PROFILE without its file is refused, as Metaflow refuses it."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("METAFLOW_HOME") or "~/.metaflowconfig").expanduser()
    profile = environ.get("METAFLOW_PROFILE")
    path = home / (f"config_{profile}.json" if profile else "config.json")
    if not path.is_file():
        if profile:
            raise RuntimeError(f"METAFLOW_PROFILE={profile}: Metaflow's configuration {path} does not exist")
        return None, {}
    return path, json.loads(path.read_text() or "{}")


def project_metaflow_settings(settings: Settings) -> dict[str, str]:
    """The project's Metaflow settings for this profile, before a user's are applied."""
    home, downloads = settings.metaflow_home, str(settings.state_dir / "metaflow-tmp")
    return {
        "METAFLOW_DEFAULT_DATASTORE": "local",
        "METAFLOW_DEFAULT_METADATA": "local",
        "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(home),
        "METAFLOW_CARD_LOCALROOT": str(home / "mf.cards"),
        # where Metaflow's S3 datastore and its S3 client download to (by default the working directory, often
        # the clone, where a step killed mid-transfer leaves its `metaflow.s3.*`): the state directory, this
        # host's own
        "METAFLOW_ARTIFACT_LOCALROOT": downloads,
        "METAFLOW_TEMPDIR": downloads,
        # Metaflow needs a user name and refuses "root" (CI and containers often run as root).
        "METAFLOW_USER": _user(),
        **_datastore(settings),
    }


def metaflow_environment(settings: Settings | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """What to set in the environment of a flow's processes: the project's settings the user gave in
    neither a METAFLOW_ variable nor their Metaflow configuration."""
    settings = settings or get_settings()
    environ = os.environ if environ is None else environ
    _refuse_an_unmounted_home(settings)
    ours = project_set(environ, PROJECT_SET)
    _, configured = users_metaflow_config(environ)
    given = {k for k in environ if k.startswith("METAFLOW_") and k not in ours} | set(configured)
    kept = {k: v for k, v in project_metaflow_settings(settings).items() if k not in given}
    if any(k.startswith(DATASTORE) for k in given):  # a datastore of theirs: none of the project's parts with it
        kept = {k: v for k, v in kept.items() if not k.startswith(DATASTORE_PARTS)}
    for directory in ("METAFLOW_DATASTORE_SYSROOT_LOCAL", "METAFLOW_ARTIFACT_LOCALROOT", "METAFLOW_TEMPDIR"):
        if directory in kept:
            Path(kept[directory]).mkdir(parents=True, exist_ok=True)
    return {**kept, PROJECT_SET: mark(kept)}


def _refuse_an_unmounted_home(settings: Settings) -> None:
    """Across hosts, Metaflow's home is the filer's, mounted on every host (the program metaflow-metadata):
    a run recorded in the directory beneath while the mount is down would be seen by no other host, and
    hidden here once the mount is back, so nothing is run or read without it."""
    from nyc_taxi.core import team

    across_hosts = settings.profile == "team" and team.this_host(settings)[1] != team.LOOPBACK
    if across_hosts and not os.path.ismount(settings.metaflow_home):
        raise RuntimeError(
            f"Metaflow's home {settings.metaflow_home} is not mounted on this host: the program "
            "metaflow-metadata mounts it (bash run team status --hosts)"
        )


def _datastore(settings: Settings) -> dict[str, str]:
    """Metaflow's S3 datastore where the profile keeps files in object storage (the team profile's
    bucket); its keys reach boto3 as a shared credentials file (mode 0600), never as a variable."""
    from nyc_taxi.core.lakehouse import lakehouse

    store = lakehouse(settings).artifact_store()
    if store is None:
        return {}
    return {
        "METAFLOW_DEFAULT_DATASTORE": "s3",
        "METAFLOW_DATASTORE_SYSROOT_S3": store.root,
        "METAFLOW_S3_ENDPOINT_URL": store.endpoint,
        "AWS_DEFAULT_REGION": settings.aws_region,
        **({"AWS_SHARED_CREDENTIALS_FILE": str(store.credentials_file)} if store.credentials_file else {}),
    }


if __name__ == "__main__":
    for key, value in metaflow_environment().items():
        print(f"export {key}={shlex.quote(value)}")
