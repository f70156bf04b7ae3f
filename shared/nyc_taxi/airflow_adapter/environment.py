"""Airflow's configuration, derived from the project settings (one place):
`python -m nyc_taxi.airflow_adapter.environment` prints it as `export` lines for the task runner;
tests apply it before importing Airflow.

A user's own Airflow settings win over the project's defaults: an ``AIRFLOW__SECTION__KEY`` variable in
the environment (or, for the settings Airflow treats as sensitive, its ``_CMD`` / ``_SECRET`` form), or the
key in the airflow.cfg that ``AIRFLOW_CONFIG`` names. Only the settings the project cannot work without (``REQUIRED``, each with why; the table in
docs/operations.md) are the project's whatever the user says, and ``not_used`` names what of the user's
they replace. Two of them are where lineage goes, and a user's value there is honoured as the place
lineage is shipped to: Airflow's lineage is written to files in the state directory first (DataHub's
plugin through a ``datahub-file`` connection, the OpenLineage provider through a file transport) and
shipped from there at the end of every task (``lineage/write/delivery.py``), so a user's
``[openlineage] config_path`` or ``transport`` becomes ``OPENLINEAGE_CONFIG`` (what OpenLineage's client of
both tools reads) and ``[datahub] conn_id`` becomes ``DATAHUB_CONN_ID`` (the connection the tasks ship to).
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
from pathlib import Path

from nyc_taxi.airflow_adapter.rest_api import base_url
from nyc_taxi.core import team
from nyc_taxi.core.environments import mark, project_set
from nyc_taxi.core.lakehouse import lakehouse
from nyc_taxi.core.processes import write_private
from nyc_taxi.core.settings import REPO_ROOT, Settings, get_settings
from nyc_taxi.lineage.write.destinations import datahub_file, openlineage_file

DAGS_FOLDER = REPO_ROOT / "airflow" / "dags"
LOCAL_SETTINGS = REPO_ROOT / "airflow" / "config"  # airflow_local_settings.py: what every Airflow process loads
WORKER_LOG_SERVER_PORT = 8793  # Airflow's default: a Celery worker's task-log server, across hosts
# The AIRFLOW__ settings the project set in this environment (``core/environments``): a later reading
# tells its own from a user's.
PROJECT_SET = "NYC_TAXI_AIRFLOW_SET"

_LINEAGE_FIRST = "Airflow's lineage is written to the state directory's files first: your value is where it is shipped"
_SERVICES = "the profile's services (PROFILE; POSTGRES_URL, REDIS_URL for a team's own)"
REQUIRED = {
    "AIRFLOW__CORE__DAGS_FOLDER": "the project's DAGs",
    "AIRFLOW__OPENLINEAGE__TRANSPORT": _LINEAGE_FIRST,
    "AIRFLOW__OPENLINEAGE__CONFIG_PATH": _LINEAGE_FIRST,
    "AIRFLOW__OPENLINEAGE__CONFIG_CONN_ID": "Airflow's lineage is written to the state directory's files first; "
    "an OpenLineage configuration kept in a connection is not read: give it as openlineage.yml (OPENLINEAGE_CONFIG)",
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "both tools' jobs share one namespace: set OPENLINEAGE_NAMESPACE",
    "AIRFLOW__DATAHUB__CONN_ID": "the DataHub plugin writes to the state directory's files first: your connection "
    "is where they are shipped",
    "AIRFLOW__DATAHUB__DISABLE_OPENLINEAGE_PLUGIN": "both lineage integrations run (the DataHub plugin would silence "
    "OpenLineage's); OPENLINEAGE_DISABLED turns OpenLineage off",
    "AIRFLOW__DATAHUB__CLUSTER": "a dataset's DataHub URN is the same from both tools: set DATAHUB_ENV",
    "AIRFLOW__DATAHUB__PLATFORM_INSTANCE": "a dataset's DataHub URN is the same from both tools: set "
    "DATAHUB_PLATFORM_INSTANCE",
    "AIRFLOW__DATAHUB__CAPTURE_OL_FILE_DATASETS": "the landed files are datasets of the lineage",
    "AIRFLOW__CORE__AUTH_MANAGER": "the project's REST client signs in as the simple auth manager's admin, "
    "whose password Airflow generates into AIRFLOW_HOME",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "the project's REST client signs in as the simple auth manager's "
    "admin, whose password Airflow generates into AIRFLOW_HOME",
    "AIRFLOW__API__HOST": "the project's REST client and the tasks find the API server there",
    "AIRFLOW__API__PORT": "the project's REST client and the tasks find the API server there: set AIRFLOW_PORT",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "the tasks report to the API server: set AIRFLOW_PORT",
    "AIRFLOW__CORE__HOSTNAME_CALLABLE": "across hosts, a task's log is fetched from its host's address",
    "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": "across hosts, a task's log is fetched from its host's address",
    "AIRFLOW__CORE__EXECUTOR": _SERVICES,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _SERVICES,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": _SERVICES,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": _SERVICES,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": _SERVICES,
    "AIRFLOW__CELERY__BROKER_URL_CMD": _SERVICES,
    "AIRFLOW__CELERY__RESULT_BACKEND_CMD": _SERVICES,
}
# The settings Airflow reads in their _CMD and _SECRET forms too: its sensitive ones (Airflow's
# ``conf.sensitive_config_values``, which needs Airflow's configuration loaded: 2 s and a directory made in
# AIRFLOW_HOME, too much for every `bash run`). A _CMD of any other setting Airflow ignores, and so does the
# project. tests/test_users_settings.py compares this with Airflow's own set.
SENSITIVE = frozenset(
    {
        ("api", "secret_key"), ("api_auth", "jwt_secret"), ("atlas", "password"), ("celery", "broker_url"),
        ("celery", "flower_basic_auth"), ("celery", "result_backend"),
        ("celery_broker_transport_options", "sentinel_kwargs"),
        ("celery_result_backend_transport_options", "sentinel_kwargs"), ("core", "asset_manager_kwargs"),
        ("core", "fernet_key"), ("core", "sql_alchemy_conn"), ("database", "sql_alchemy_conn"),
        ("database", "sql_alchemy_conn_async"), ("database", "sql_alchemy_engine_args"),
        ("logging", "remote_task_handler_kwargs"), ("opensearch", "password"), ("secrets", "backend_kwargs"),
        ("sentry", "sentry_dsn"), ("webserver", "secret_key"), ("workers", "secrets_backend_kwargs"),
    }
)  # fmt: skip
# Not AIRFLOW__ settings, and the project's too: Airflow's home is the state directory's (its database,
# logs, the standalone's password; STATE_DIR moves it), and its processes load the project's local settings.
REQUIRED_HOME = "AIRFLOW_HOME"
# Required, but a user's value is handed on to both tools, not lost (``_lineage_destinations``).
HANDED_ON = ("AIRFLOW__OPENLINEAGE__CONFIG_PATH", "AIRFLOW__OPENLINEAGE__TRANSPORT", "AIRFLOW__DATAHUB__CONN_ID")


def standalone_record(settings: Settings) -> Path:
    """Where `bash run airflow standalone` names itself while it runs (its pid and port)."""
    return settings.airflow_home / "standalone.json"


def running_standalone(settings: Settings) -> dict | None:
    """The Airflow standalone that runs on this state directory now (its pid and port), if one does."""
    from nyc_taxi.core.processes import alive, read_record

    found = read_record(standalone_record(settings))
    return found if found and alive(found["pid"]) else None


def project_airflow_settings(settings: Settings) -> dict[str, str]:
    """Everything the project sets in Airflow for this profile, before a user's settings are applied."""
    instance = (
        {"AIRFLOW__DATAHUB__PLATFORM_INSTANCE": settings.datahub_platform_instance}
        if settings.datahub_platform_instance
        else {}
    )
    across_hosts = (
        # a task's host as the API server reaches it for the task's log (Airflow names it by the machine's
        # name, which every host of one machine shares)
        {
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.host_address",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(WORKER_LOG_SERVER_PORT),
        }
        if team.this_host(settings)[1] != team.LOOPBACK
        else {}
    )
    return {
        **instance,
        **across_hosts,
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # A 2-core machine: few task processes at a time, one Spark JVM each.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": str(settings.task_retries),
        **lakehouse(settings).airflow_services(),
        # the UI and the execution API that task processes report to, on this machine only
        "AIRFLOW__API__HOST": team.address(settings, "airflow-api-server"),
        "AIRFLOW__API__PORT": str(settings.airflow_port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url(settings)}/execution/",
        # Simple auth manager: user admin; Airflow generates its password into
        # $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated (never a fixed one).
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        # Both lineage integrations on (the DataHub plugin silences OpenLineage unless told not to).
        "AIRFLOW__DATAHUB__ENABLED": "True",
        "AIRFLOW__DATAHUB__DISABLE_OPENLINEAGE_PLUGIN": "False",
        "AIRFLOW__DATAHUB__CLUSTER": settings.datahub_env,
        "AIRFLOW__DATAHUB__CAPTURE_OL_FILE_DATASETS": "True",  # landed files are real inputs and outputs here
        "AIRFLOW__DATAHUB__CONN_ID": "datahub_file",
        "AIRFLOW_CONN_DATAHUB_FILE": json.dumps(
            {"conn_type": "datahub-file", "host": str(datahub_file(settings, "airflow"))}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": settings.openlineage_namespace,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(openlineage_file(settings, "airflow")), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__CONFIG_PATH": "",
        "AIRFLOW__OPENLINEAGE__CONFIG_CONN_ID": "",
    }


def _section_key(name: str) -> tuple[str, str]:
    section, _, key = name.removeprefix("AIRFLOW__").partition("__")
    return section.lower(), key.lower()


def users_airflow_settings(environ: dict[str, str] | None = None) -> dict[str, str | None]:
    """The Airflow settings the user gave, by their AIRFLOW__ name: the airflow.cfg ``AIRFLOW_CONFIG`` names,
    under the ``AIRFLOW__`` variables of the environment that the project did not set itself. A sensitive
    setting given in its ``_CMD`` or ``_SECRET`` form counts as given, its value not read (None); any other
    setting's ``_CMD`` or ``_SECRET`` is not a setting, as Airflow reads none."""
    environ = os.environ if environ is None else environ
    ours = project_set(environ, PROJECT_SET)
    given: dict[str, str | None] = {}

    def give(name: str, value: str) -> None:
        if _base(name) == name:
            given[name] = value
        elif _section_key(_base(name)) in SENSITIVE:
            given[_base(name)] = None

    if environ.get("AIRFLOW_CONFIG") and Path(environ["AIRFLOW_CONFIG"]).is_file():
        parser = configparser.RawConfigParser()
        parser.read(environ["AIRFLOW_CONFIG"])
        for section in parser.sections():
            for key, value in parser.items(section):
                give(f"AIRFLOW__{section.upper()}__{key.upper()}", value)
    for name, value in environ.items():
        if name.startswith("AIRFLOW__") and name not in ours:
            give(name, value)
    return given


def airflow_environment(
    settings: Settings | None = None, environ: dict[str, str] | None = None, lineage: bool = True
) -> dict[str, str]:
    """What to set in the environment of Airflow's processes: the project's settings, less those the user
    gave (``REQUIRED`` ones excepted), and the user's lineage destinations handed on to both tools (not with
    ``lineage`` False: a host that ships to another's receiver, across hosts)."""
    settings = settings or get_settings()
    environ = os.environ if environ is None else environ
    project, given = project_airflow_settings(settings), users_airflow_settings(environ)
    kept = {k: v for k, v in project.items() if _required(k) or not k.startswith("AIRFLOW__") or _base(k) not in given}
    paths = [str(LOCAL_SETTINGS), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **kept,
        **(_lineage_destinations(settings, given) if lineage else {}),
        REQUIRED_HOME: str(settings.airflow_home),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        PROJECT_SET: mark(kept),
    }


def replaced(settings: Settings | None = None, environ: dict[str, str] | None = None) -> list[str]:
    """The variables of the environment that the project's Airflow settings replace rather than override:
    another form of a required setting the project sets (a user's ``…_CONN`` where the profile sets
    ``…_CONN_CMD``, which Airflow would read second), and what the project set before and sets no more."""
    settings = settings or get_settings()
    environ = os.environ if environ is None else environ
    setting = airflow_environment(settings, environ, lineage=False)  # which names: no file written
    ours = project_set(environ, PROJECT_SET)
    required_here = {_base(k) for k in setting if _required(k)}
    return sorted(
        name
        for name in environ
        if name.startswith("AIRFLOW__") and name not in setting and (name in ours or _base(name) in required_here)
    )


def _required(name: str) -> bool:
    """``REQUIRED``, and every setting the project reads from a file (``_CMD``): a team deployment's secrets."""
    return name in REQUIRED or name.endswith("_CMD")


def _base(name: str) -> str:
    """A setting's name without its ``_CMD`` or ``_SECRET`` form."""
    return name.removesuffix("_CMD").removesuffix("_SECRET")


def airflow_process_environment(
    settings: Settings | None = None, environ: dict[str, str] | None = None, lineage: bool = True
) -> dict:
    """The whole environment of an Airflow process started from ``environ``: the project's settings applied
    (``airflow_environment``), and what they replace removed (``replaced``)."""
    environ = dict(os.environ if environ is None else environ)
    gone = set(replaced(settings, environ))
    return {**{k: v for k, v in environ.items() if k not in gone}, **airflow_environment(settings, environ, lineage)}


def lineage_destinations(settings: Settings | None = None, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Where the user's Airflow settings say lineage goes, as both tools read it, alone: for a flow run by
    hand (`bash run training-flow`), which then ships where a flow that Airflow starts ships."""
    return _lineage_destinations(settings or get_settings(), users_airflow_settings(environ))


def _lineage_destinations(settings: Settings, given: dict[str, str | None]) -> dict[str, str]:
    """The user's Airflow settings of where lineage goes, as the settings both tools read: their
    ``[openlineage] config_path`` (which the provider reads before ``transport``) or ``transport`` as
    ``OPENLINEAGE_CONFIG``, ``[openlineage] disabled`` as ``OPENLINEAGE_DISABLED``, ``[datahub] conn_id`` as
    ``DATAHUB_CONN_ID``."""
    handed: dict[str, str] = {}
    if path := given.get("AIRFLOW__OPENLINEAGE__CONFIG_PATH"):
        handed["OPENLINEAGE_CONFIG"] = path
    elif transport := given.get("AIRFLOW__OPENLINEAGE__TRANSPORT"):
        try:
            parsed = json.loads(transport)
        except ValueError as bad:  # as Airflow's provider would refuse it: said here, before any task
            raise ValueError(f"[openlineage] transport (AIRFLOW__OPENLINEAGE__TRANSPORT) is not JSON: {bad}") from None
        written = settings.lineage_dir / "airflow-openlineage-transport.json"  # JSON is YAML, mode 0600
        write_private(written, {"transport": parsed})
        handed["OPENLINEAGE_CONFIG"] = str(written)
    if str(given.get("AIRFLOW__OPENLINEAGE__DISABLED") or "").strip().lower() in ("true", "1", "t"):
        handed["OPENLINEAGE_DISABLED"] = "true"
    if conn_id := given.get("AIRFLOW__DATAHUB__CONN_ID"):
        handed["DATAHUB_CONN_ID"] = conn_id
    return handed


def not_used(settings: Settings | None = None, environ: dict[str, str] | None = None) -> list[str]:
    """The user's Airflow settings the project's replace, each with why (the lineage destinations are
    handed on, not lost: ``_lineage_destinations``)."""
    settings = settings or get_settings()
    environ = os.environ if environ is None else environ
    project, given = project_airflow_settings(settings), users_airflow_settings(environ)
    said = [
        f"{name} ({'[{}] {}'.format(*_section_key(name))}) is the project's: "
        + REQUIRED.get(name, REQUIRED.get(f"{name}_CMD", "the team deployment's own secret"))
        for name, value in sorted(given.items())
        if (name in REQUIRED or f"{name}_CMD" in project)
        and name not in HANDED_ON
        and value is not None
        and value != project.get(name)
    ]
    home = environ.get(REQUIRED_HOME)
    if home and Path(home).resolve() != settings.airflow_home.resolve():
        said.append(f"AIRFLOW_HOME is the state directory's ({settings.airflow_home}): STATE_DIR moves it")
    quick_start = Path(environ.get("HOME") or "/nonexistent") / "airflow" / "airflow.cfg"  # Airflow's default home
    if not home and not environ.get("AIRFLOW_CONFIG") and quick_start.is_file():
        said.append(
            f"{quick_start} (Airflow's default home) is not read: the project's Airflow home is the state "
            f"directory's ({settings.airflow_home}), where `bash run airflow connections add …` keeps a "
            "connection; AIRFLOW_CONFIG names an airflow.cfg whose settings win over the project's defaults"
        )
    return said


def host_address() -> str:
    """This host's address (Airflow's ``hostname_callable`` across hosts). Read afresh, not through the
    process's settings: a Celery worker asks it before it forks a task, which would inherit them read
    before the host was given its settings file."""
    return team.this_host(Settings())[1]


def prepare_directories(settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    for path in (
        settings.airflow_home,
        datahub_file(settings, "airflow").parent,
        openlineage_file(settings, "airflow").parent,
    ):
        path.mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    import sys

    try:
        if sys.argv[1:] == ["--lineage"]:  # where lineage goes, alone (`bash run training-flow`)
            for key, value in lineage_destinations().items():
                print(f"export {key}={shlex.quote(value)}")
            sys.exit()
        prepare_directories()
        for line in not_used():
            print(f"note: your {line}", file=sys.stderr)
        for name in replaced():
            print(f"unset {name}")
        for key, value in airflow_environment().items():
            print(f"export {key}={shlex.quote(value)}")
    except ValueError as bad:
        sys.exit(f"error: {bad}")
