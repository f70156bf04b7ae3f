"""`bash run clean`: remove the state directory (STATE_DIR, default .state/) to start over: the lake, the
catalog, Airflow's and Metaflow's homes, the lineage. The uv environment stays.

What runs on the state directory is stopped first, and named: the team deployment (with its services'
data) and the warm Spark server. An Airflow standalone of this state directory runs in another terminal,
where its user sees it: `clean` refuses, naming it, rather than remove its state from under it.
"""

from __future__ import annotations

import shutil
import sys

from nyc_taxi.core.settings import get_settings


def main() -> int:
    settings = get_settings()
    state = settings.state_dir
    from nyc_taxi.airflow_adapter.environment import running_standalone

    if standalone := running_standalone(settings):
        print(
            f"error: `bash run airflow standalone` runs on {state} (pid {standalone['pid']}, "
            f"http://127.0.0.1:{standalone['port']}): stop it first (Ctrl-C in its terminal), then clean",
            file=sys.stderr,
        )
        return 1
    if (state / "team").is_dir():  # a team deployment of this state directory: its processes and data first
        from nyc_taxi.deployment import services

        for line in services.down(settings, delete_data=True):
            print(f"    {line}")
    from nyc_taxi.core import spark_server

    if spark_server.running(settings):
        spark_server.stop(settings)
        print("    stopped the warm Spark server")
    shutil.rmtree(state, ignore_errors=True)
    print(f"removed {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
