"""The one SparkSession of a process: Iceberg extensions and the lakehouse's catalog.

``get_spark()`` attaches to a warm Spark server when one runs for these settings (`bash run
spark-server start`, ``spark_server``), and otherwise starts a JVM of the process's own
(``spark_jvm``: configuration, class-data-sharing archive).
"""

from __future__ import annotations

import atexit
import logging
import threading

from nyc_taxi.core import spark_server
from nyc_taxi.core.naming import spark_table
from nyc_taxi.core.settings import Settings, get_settings
from nyc_taxi.core.spark_jvm import new_session

log = logging.getLogger(__name__)
_lock = threading.Lock()
_session = None
_attached = False  # the session is a running Spark server's (core/spark_server.py), not this process's own


def get_spark(settings: Settings | None = None, small: bool = False):
    """The process's SparkSession, created on first use and reused afterwards. ``small``: this process
    works on small data, so its JVM uses the quick compiler tier only (the first caller decides).
    With a Spark server running for these settings (`bash run spark-server start`), a session of the
    server's instead: no JVM of its own, and Spark's code already compiled."""
    global _session, _attached
    with _lock:
        if _session is not None and _session._jsc is not None:  # not stopped
            if _attached:
                spark_server.tag_thread(_session)  # this thread's jobs too: cancelled if the process ends first
            return _session
        settings = settings or get_settings()
        _session = _server_session(settings)
        _attached = _session is not None
        if _attached:
            atexit.register(stop_spark)  # let go of the server's session as the process ends
        else:
            _session = new_session(settings, small=small)
        return _session


def _server_session(settings: Settings):
    if not settings.spark_server:
        return None
    return spark_server.attach(settings)


def start_spark(settings: Settings | None = None, small: bool = False) -> None:
    """Begin creating the process's session in a thread of its own, so that its JVM starts while the
    caller does its catalog work (pyiceberg's imports and reads: about a second on two cores);
    ``get_spark()`` then waits for it. A session that fails to start here is started again, and fails
    with its own error, in ``get_spark()``."""

    def start() -> None:
        try:
            get_spark(settings, small=small)
        except Exception:  # get_spark() in the caller's thread says what went wrong
            log.debug("starting Spark in the background failed; the caller's get_spark() will retry", exc_info=True)

    threading.Thread(target=start, name="spark-start", daemon=True).start()


def java_table(spark, table, settings: Settings):
    """A registry table through Iceberg's Java API in the session's JVM and catalog (the one Spark's own
    writes use), for the commits Spark SQL does not offer."""
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, spark_table(table, settings)
    )


def stop_spark() -> None:
    """Stop the process's session; an attached one is only let go of (the server runs on)."""
    global _session
    with _lock:
        if _session is not None and _attached:
            spark_server.detach(_session)
        elif _session is not None:
            _session.stop()
        _session = None
