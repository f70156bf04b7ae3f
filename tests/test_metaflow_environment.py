"""Metaflow's configuration (``metaflow_adapter.environment``) across hosts: Metaflow's home must be the
filer's mount there (the program metaflow-metadata); the mount itself runs in tests/test_team_hosts.py."""

from __future__ import annotations

import pytest

from nyc_taxi.core.processes import write_private
from nyc_taxi.core.settings import Settings


def test_across_hosts_metaflow_is_refused_on_a_host_whose_home_is_not_mounted(tmp_path):
    """A host of the hosts layout (its record names its own address) whose Metaflow home is a plain
    directory, not the filer's mount: Metaflow's configuration is refused there, saying which program
    mounts it; on one machine (its record names the loopback) the same plain directory is the home."""
    from nyc_taxi.core import team
    from nyc_taxi.metaflow_adapter.environment import _refuse_an_unmounted_home, metaflow_environment

    settings = Settings(_env_file=None, state_dir=tmp_path / "worker-a", profile="team")
    settings.metaflow_home.mkdir(parents=True)
    write_private(team.services_record(settings), {"host": {"name": "worker-a", "address": "198.18.0.11"}})
    with pytest.raises(RuntimeError, match="is not mounted on this host: the program metaflow-metadata mounts it"):
        metaflow_environment(settings)
    write_private(team.services_record(settings), {"host": {"name": "here", "address": team.LOOPBACK}})
    _refuse_an_unmounted_home(settings)  # not refused
