"""`bash run chaos --hosts` for real: the mission on the hosts layout under its seven faults of hosts and
links, each proven and survived, the run's own checks all clean; then, read from control's network
before `team down`, raw holds each published taxi file exactly and the weather each month's files (the
suite's own reading, not the chaos run's); and `team down --delete-data` leaves no namespace or process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from team_deployment import in_network, missing_lake_file_story, network_of, processes_of, settings_given, team_cli

pytestmark = [
    pytest.mark.team,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None,
        reason="network namespaces and iptables take root, iproute2 and iptables",
    ),
]


@pytest.mark.system
def test_a_chaos_run_across_hosts_survives_seven_proven_host_and_link_faults_and_ends_as_the_published_files(
    tmp_path_factory,
):

    from nyc_taxi.core.settings import Settings
    from nyc_taxi_proving.chaos import host_faults, hosts_plan, mission
    from nyc_taxi_proving.chaos.run import RECOVERY_BOUND
    from nyc_taxi_proving.deployment.across_hosts import host_settings
    from nyc_taxi_proving.deployment.hosts import Network

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and not k.endswith("_BASE_URL")}
    # a short path: supervisord's socket lies under it, and a Unix socket's path has at most 107 bytes
    tmp_path = tmp_path_factory.mktemp("chaos")
    env["NYC_TAXI_CHAOS_WORK"] = str(tmp_path)
    report_path, state = tmp_path / "report.json", tmp_path / "state"
    command = [
        sys.executable,
        "-m",
        "nyc_taxi_proving.cli.chaos",
        "--hosts",
        "--seed",
        "3",
        "--report",
        str(report_path),
    ]
    network = Network(Settings(_env_file=None, profile="team", state_dir=state))
    try:
        done = subprocess.run([*command, "--keep"], env=env, capture_output=True, text=True, timeout=3600)
        assert report_path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
        report = json.loads(report_path.read_text())
        assert done.returncode == 0 and report["passed"], done.stdout[-6000:]
        faults = {f["moment"]: f for f in report["faults"]}
        assert set(faults) == set(host_faults.MOMENTS) and len(report["faults"]) == 7
        assert all(f["proven"] and not f["error"] and 0 <= f["recovered_s"] <= RECOVERY_BOUND for f in faults.values())
        for lost in (
            hosts_plan.LOST_MID_MERGE,
            hosts_plan.LOST_IN_FLOW,
        ):  # the host's try died with it; a later one did it
            fault = faults[lost]
            assert fault["pids"] and fault["task"]["done_by_try"] > fault["task"]["try_number"], fault
        flow = faults[hosts_plan.LOST_IN_FLOW]["task"]
        assert flow["resumed"].startswith("TrainForecastModelFlow/"), flow  # "<the lost try's run> as <its resume>"
        assert all(not found for name, found in report["checks"].items() if name != "rows"), report["checks"]
        # the lake, read from control's network (a process of its own there) by the suite's own reading of
        # the published files
        control = host_settings(network.settings, network, "control")
        site = network.directory("control") / "chaos-site"
        taxi_files = [str(f) for f in sorted(site.rglob("yellow_tripdata_*.parquet"))]
        try:
            read = in_network(
                network.namespace("control"), "team_deployment:lake_as_published",
                settings_given(control), taxi_files, str(site), mission.MONTHS, False, env=env,
            )  # fmt: skip
        except AssertionError as error:  # a file of the lake missing or wrong: all that tells how
            with network_of(network.namespace("control")):
                story = missing_lake_file_story(network, error)
            raise AssertionError(
                f"{error}\nthe snapshots as the run's checks began: {report['snapshots']}\n{story}"
            ) from error
        assert len(taxi_files) == len(mission.MONTHS), taxi_files
        assert read == sum(pq.ParquetFile(f).metadata.num_rows for f in taxi_files) > 0, read  # the files' own count
    finally:
        down = team_cli(env | {"PROFILE": "team", "STATE_DIR": str(state)}, "down", "--delete-data")
    assert down.returncode == 0, down.stdout + down.stderr
    assert network.namespaces() == [] and network.cgroups() == []
    assert processes_of(state) == []
