"""`bash run upgrade-check`'s throw-away project: the workspace as the lock knows it, every member's code
linked, each member's bounds lifted."""

from __future__ import annotations

import tomllib
from pathlib import Path

from nyc_taxi.core.settings import REPO_ROOT
from nyc_taxi_proving.cli.upgrade_check import MEMBERS, PACKAGES, throwaway_project


def test_the_throwaway_project_holds_every_workspace_member_with_its_code_and_lifted_bounds(tmp_path):
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert sorted(MEMBERS) == sorted(root["tool"]["uv"]["workspace"]["members"])
    project = throwaway_project(tmp_path)
    for member in MEMBERS:
        pyproject = tomllib.loads((project / member / "pyproject.toml").read_text())
        wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
        needed = [*wheel, *([pyproject["project"]["readme"]] if "readme" in pyproject["project"] else [])]
        assert [part for part in needed if not (project / member / part).exists()] == [], member
        assert all(Path(project / member / part).resolve() == REPO_ROOT / member / part for part in needed)
    # the bounds are lifted in the members' pyprojects too: metaflow-lineage declares acryl-datahub>=1.0
    declared = (REPO_ROOT / "shared/metaflow_lineage/pyproject.toml").read_text()
    lifted = (project / "shared/metaflow_lineage/pyproject.toml").read_text()
    assert '"acryl-datahub>=1.0"' in declared and PACKAGES["acryl-datahub"] != ">=1.0"
    assert f'"acryl-datahub{PACKAGES["acryl-datahub"]}"' in lifted and '"acryl-datahub>=1.0"' not in lifted
