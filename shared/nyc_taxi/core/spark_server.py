"""A warm Spark driver that the processes of one state directory share (`bash run spark-server start`).

Every Airflow task and every Spark step of the flow is a fresh process: each starts a JVM and then
compiles Spark's hot code again (the JIT), which is most of a month's first staging. A running server
keeps one JVM warm; ``get_spark()`` in any process with the same settings attaches to it through
PySpark's own py4j gateway (on 127.0.0.1, with a secret) and gets a session of its own on the server's
SparkContext (``newSession``: its own temporary views and SQL settings, the same catalog). Detaching
leaves the server running. Without a server, or with one started for other Spark settings, a process
starts its own JVM as before. `bash run bench ingest` measures both.

The connection file (port, secret, pid) is readable by its owner only and is never logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nyc_taxi.core.processes import alive, write_private
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.spark_jvm import new_session, session_conf

log = logging.getLogger(__name__)


def connection_path(settings: Settings) -> Path:
    return settings.state_dir / "spark" / "server.json"


def log_path(settings: Settings) -> Path:
    return settings.state_dir / "spark" / "server.log"


def clients_path(settings: Settings) -> Path:
    """Where each attached process leaves its pid while it is attached (a file per process)."""
    return settings.state_dir / "spark" / "clients"


def client_tag(pid: int) -> str:
    """The job tag of an attached process's Spark jobs: the server cancels them if the process ends first."""
    return f"nyc-taxi-attached-{pid}"


def _listed(clients: Path) -> list[int]:
    """The pids listed under ``clients`` (not the ``.tmp`` files a write in progress leaves)."""
    return sorted(int(entry.name) for entry in clients.glob("*") if entry.name.isdigit()) if clients.is_dir() else []


def attached(settings: Settings) -> list[int]:
    """The processes attached to this state directory's server now (the ones still running)."""
    return [pid for pid in _listed(clients_path(settings)) if alive(pid)]


def fingerprint(settings: Settings) -> str:
    """The Spark configuration these settings give a session: a server serves only processes that would
    have started the same one (same catalog, warehouse, jars, memory)."""
    return hashlib.sha256(json.dumps(session_conf(settings), sort_keys=True).encode()).hexdigest()


def running(settings: Settings) -> dict | None:
    """The connection record of the server running for this state directory, or None."""
    try:
        record = json.loads(connection_path(settings).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if alive(record["pid"]) else None


@contextlib.contextmanager
def _gateway_environment(record: dict):
    """PySpark's launch_gateway() connects to a running JVM when these are set (what spark-submit does
    for a Python application); set only while it connects, so nothing else in the process inherits them."""
    saved = {k: os.environ.get(k) for k in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")}
    os.environ.update(PYSPARK_GATEWAY_PORT=str(record["port"]), PYSPARK_GATEWAY_SECRET=record["secret"])
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def attach(settings: Settings):
    """A new session on the running server's SparkContext, or None (no server for these settings, or it
    does not answer): the caller then starts a JVM of its own."""
    record = running(settings)
    if record is None:
        return None
    if record["fingerprint"] != fingerprint(settings):
        log.warning(
            "the Spark server (pid %s) was started for other Spark settings; this process starts its own JVM "
            "(restart the server: bash run spark-server stop; bash run spark-server start)",
            record["pid"],
        )
        return None
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        with _gateway_environment(record):
            gateway = launch_gateway()
        jvm = gateway.jvm
        context = jvm.org.apache.spark.SparkContext.getOrCreate()
        handler = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
        sc = SparkContext(gateway=gateway, jsc=jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(context))
        if handler is not None:  # PySpark's Ctrl-C handler cancels every job of the context: other processes' too
            signal.signal(signal.SIGINT, handler)
        sessions = jvm.org.apache.spark.sql.SparkSession
        served = sessions.builder().getOrCreate()  # the server's own session
        session = SparkSession(sc, jsparkSession=served.newSession())
        sessions.setDefaultSession(served)  # PySpark made this process's session the JVM's default: it would outlive it
    except Exception as error:  # a server that died or stopped between the check and now
        log.warning(
            "could not attach to the Spark server (pid %s): %s; starting a JVM of its own", record["pid"], error
        )
        _forget_context()
        return None
    global _client_file
    _client_file = clients_path(settings) / str(os.getpid())
    write_private(_client_file, {"pid": os.getpid(), "server": record["pid"]})
    tag_thread(session)
    log.info("attached to the Spark server (pid %s, application %s)", record["pid"], sc.applicationId)
    return session


_client_file: Path | None = None  # this process's entry among the attached ones, while it is attached


def tag_thread(session) -> None:
    """The Spark jobs the calling thread starts carry this process's tag (a job's tags are its thread's),
    and the server's thread that runs its calls carries its name: if the process is killed while a
    statement runs (no ``detach`` then), the server cancels its jobs and interrupts that thread (between
    two jobs, or before the commit), rather than let the statement commit beside a retry, as a process's
    own JVM would have died with it. Spark work on another thread must call ``get_spark()`` there first."""
    tag = client_tag(os.getpid())
    session.sparkContext.addJobTag(tag)
    session._jvm.java.lang.Thread.currentThread().setName(f"{tag}-calls")  # what _stop_work_of looks for


def _stop_work_of(context, pid: int) -> None:
    """Cancel the Spark jobs of attached process ``pid``, which ended, and interrupt the server's threads
    that ran its calls (``tag_thread``): what would have died with a process's own JVM."""
    tag = client_tag(pid)
    context.cancelJobsWithTag(tag)  # none running: nothing to cancel
    for thread in list(context._jvm.java.lang.Thread.getAllStackTraces().keySet()):
        if thread.getName() == f"{tag}-calls":  # exactly: pid 12's tag is a prefix of pid 123's
            thread.interrupt()


def _forget_context() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None


def detach(session) -> None:
    """Let go of an attached session: release what this process holds in the server's JVM, close its
    connections, leave the server's context running. A statement still running for it (the process
    ending on an exception or Ctrl-C) is cancelled first: its jobs would go on in the server."""
    sc = session.sparkContext
    gateway = sc._gateway
    with contextlib.suppress(Exception):  # best effort: the server may be stopping
        sc.cancelJobsWithTag(client_tag(os.getpid()))  # on a normal end nothing runs: nothing cancelled
    _close_catalog(session)
    if (accumulators := getattr(sc, "_accumulatorServer", None)) is not None:
        # Its serve loop sees a shutdown only at its next half-second poll: not waited for (0.4 s of every
        # attached process's exit); the thread is a daemon, and a new context starts a server of its own.
        # At exit (atexit) Python 3.12 starts no thread: the process's end stops the server with it.
        with contextlib.suppress(RuntimeError):
            threading.Thread(target=accumulators.shutdown, name="accumulator-server-shutdown", daemon=True).start()
    _forget_context()
    _release_java_objects(gateway)
    gateway.close()  # not shutdown(): that would stop the server's gateway
    global _client_file
    if _client_file is not None:
        _client_file.unlink(missing_ok=True)
        _client_file = None


def _close_catalog(session) -> None:
    """Each session opens its own Iceberg catalog (on the local profile, SQLite connections), which the
    session never closes: closed here, or every task would leave its connections open in the server.
    The lakehouse's catalog is the session's default one (``session_conf``)."""
    with contextlib.suppress(Exception):  # best effort: the server may be stopping
        name = session.conf.get("spark.sql.defaultCatalog")
        catalog = session._jsparkSession.sessionState().catalogManager().catalog(name)
        catalog.icebergCatalog().close()


def _release_java_objects(gateway) -> None:
    """py4j keeps every Java object a process was handed (its session, and with it the session's state)
    until that process says it is done with it, which a process does not do as it exits: 0.4-0.9 MiB
    per task the server would hold for good. Said here, for every object this process still holds, and
    at once (py4j's own release is queued to a thread that would not get to it before the exit)."""
    import gc

    from py4j.finalizer import ThreadSafeFinalizer

    client = gateway._gateway_client
    gc.collect()  # Java objects of garbage in reference cycles: their release joins the queue below
    queued = getattr(client, "finalizer_deque", None)  # releases py4j has queued and not yet sent
    while queued:
        task = queued.pop()
        if not isinstance(task, tuple):  # the worker's stop signal: its own
            queued.append(task)
            break
        with contextlib.suppress(Exception):
            client.garbage_collect_object(task[1], enqueue=False)
    with ThreadSafeFinalizer.lock:
        held = [(key, ref()) for key, ref in ThreadSafeFinalizer.finalizers.items()]
    for key, java_object in held:
        if java_object is None or getattr(java_object, "_gateway_client", None) is not client:
            continue
        ThreadSafeFinalizer.remove_finalizer(key)
        with contextlib.suppress(Exception):  # best effort: the server may be stopping
            if "enqueue" in inspect.signature(client.garbage_collect_object).parameters:  # py4j's ClientServer
                client.garbage_collect_object(java_object._target_id, enqueue=False)
            else:
                client.garbage_collect_object(java_object._target_id)


def serve(settings: Settings) -> None:
    """Run the server in this process until SIGTERM or SIGINT: one warm session, announced in the
    connection file once it answers a query. It runs at the priority of what started it, not at the
    tasks' (TASK_NICENESS): at the tasks' level it starved on a busy machine and held up every attached
    task and the standalone's own stop. Every second it cancels the jobs of attached processes that
    ended (``tag_thread``), and it stops if its JVM did (killed, out of memory), so that no process
    attaches to a dead one."""
    shutil.rmtree(clients_path(settings), ignore_errors=True)  # a former server's: none is attached to this one
    session = new_session(settings)
    session.sql("SELECT 1").collect()
    gateway = session.sparkContext._gateway
    record = {
        "pid": os.getpid(),
        "port": gateway.gateway_parameters.port,
        "secret": gateway.gateway_parameters.auth_token,
        "fingerprint": fingerprint(settings),
        "application_id": session.sparkContext.applicationId,
        "started": time.time(),
    }
    write_private(connection_path(settings), record)
    log.info("Spark server ready: pid %s, application %s", record["pid"], record["application_id"])
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopping.set())
    jvm = gateway.proc  # the JVM PySpark started for this process
    try:
        while not stopping.wait(1.0) and jvm.poll() is None:
            _cancel_jobs_of_ended_processes(session.sparkContext, clients_path(settings))
    finally:
        connection_path(settings).unlink(missing_ok=True)  # no new process attaches to a server that is stopping
        if jvm.poll() is None:
            session.stop()
        else:
            log.error("the Spark server's JVM exited (code %s): stopping", jvm.returncode)
        log.info("Spark server stopped")
    if jvm.poll() is not None:
        raise SystemExit(1)


def _cancel_jobs_of_ended_processes(context, clients: Path) -> None:
    for pid in _listed(clients):
        if not alive(pid):
            _stop_work_of(context, pid)
            (clients / str(pid)).unlink(missing_ok=True)
            log.info("process %s ended while attached: what still ran for it is cancelled", pid)


def start(settings: Settings, timeout: float = 120.0) -> dict:
    """Start a server in the background (unless one runs) and wait until it answers."""
    log_path(settings).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path(settings).with_name("server.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two starts at once: the second finds the first one's server
        record = running(settings)
        if record is not None:
            return record
        connection_path(settings).unlink(missing_ok=True)  # a record left by a server that did not stop cleanly
        return _spawn(settings, timeout)


def _spawn(settings: Settings, timeout: float) -> dict:
    env = {**os.environ, "STATE_DIR": str(settings.state_dir)}
    with open(log_path(settings), "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "nyc_taxi.cli.spark_server", "serve"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not stopped by the Ctrl-C of the shell that started it
        )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            record = running(settings)
            if record is not None and record["pid"] == process.pid:
                return record
            if process.poll() is not None:
                raise RuntimeError(f"the Spark server exited with code {process.returncode}; see {log_path(settings)}")
            time.sleep(0.2)
        raise TimeoutError(f"the Spark server did not answer within {timeout:.0f} s; see {log_path(settings)}")
    except BaseException:  # a timeout, or a start given up (Ctrl-C): no server left starting behind
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        connection_path(settings).unlink(missing_ok=True)
        raise


def stop(settings: Settings, timeout: float = 60.0) -> bool:
    """Stop the running server; False if none was running."""
    record = running(settings)
    if record is None:
        return False
    os.kill(record["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(record["pid"]):
        os.kill(record["pid"], signal.SIGKILL)
        connection_path(settings).unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def warm(settings: Settings, say=print):
    """A server for the processes of this state directory while the block runs (what `bash run demo` and
    `bash run airflow standalone` keep): started here unless one runs already, which is left as it is, or
    unless the settings say never (``SPARK_SERVER=false``); the one started here is stopped at the end,
    unless another process is attached to it at that moment (a flow's step, run by hand): then it is left
    running, and said (a flow between two steps is not attached: its next step starts its own JVM). A
    server that cannot start costs nothing but the warm start: every process starts its own JVM, as
    without one. Yields the record of the server started here, or None."""
    if not settings.spark_server:
        yield None
        return
    if (already := running(settings)) is not None:
        if already["fingerprint"] == fingerprint(settings):
            say(f"warm Spark server: pid {already['pid']}, running already: attached to, and left running")
        else:
            say(
                f"a Spark server (pid {already['pid']}) runs for other Spark settings: every process starts its own JVM"
            )
        yield None
        return
    started = time.perf_counter()
    try:
        record = start(settings)
    except (OSError, RuntimeError) as error:
        say(f"no warm Spark server ({error}): every task and step starts a JVM of its own")
        yield None
        return
    say(
        f"warm Spark server: pid {record['pid']}, started in {time.perf_counter() - started:.0f} s; the tasks and "
        f"steps of {settings.state_dir} attach to it (SPARK_SERVER=false: none)"
    )
    try:
        yield record
    finally:
        ours = (running(settings) or {}).get("pid") == record["pid"]  # not stopped, nor another started since
        others = [pid for pid in attached(settings) if pid != os.getpid()]  # a step running on it now
        if ours and others:
            say(f"warm Spark server left running: processes {others} are attached to it (bash run spark-server stop)")
        elif ours:
            stop(settings)


def status(settings: Settings | None = None) -> str:
    settings = settings or get_settings()
    record = running(settings)
    if record is None:
        return f"no Spark server for {settings.state_dir}"
    age = time.time() - record["started"]
    return f"Spark server running: pid {record['pid']}, application {record['application_id']}, up {age:.0f} s"
