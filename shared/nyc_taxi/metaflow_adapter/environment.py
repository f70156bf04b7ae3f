"""Metaflow's configuration from the project settings: local datastore and metadata under the state
directory. `python -m nyc_taxi.metaflow_adapter.environment` prints it as `export` lines for the task runner."""

from __future__ import annotations

import getpass
import os
import shlex

from nyc_taxi.core.settings import Settings, get_settings


def _user() -> str:
    for name in (os.environ.get("METAFLOW_USER"), os.environ.get("USER"), getpass.getuser()):
        if name and name != "root":
            return name
    return "nyc-taxi"


def metaflow_environment(settings: Settings | None = None) -> dict[str, str]:
    settings = settings or get_settings()
    home = settings.metaflow_home
    _refuse_an_unmounted_home(settings)
    return {
        "METAFLOW_HOME": str(home),
        "METAFLOW_DEFAULT_DATASTORE": "local",
        "METAFLOW_DEFAULT_METADATA": "local",
        "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(home),
        "METAFLOW_CARD_LOCALROOT": str(home / "mf.cards"),
        # Metaflow needs a user name and refuses "root" (CI and containers often run as root).
        "METAFLOW_USER": _user(),
        **_datastore(settings),
    }


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
    environment = metaflow_environment()
    os.makedirs(environment["METAFLOW_HOME"], exist_ok=True)
    for key, value in environment.items():
        print(f"export {key}={shlex.quote(value)}")
