"""`bash run upgrade-check`: what the next releases of the tools this project is built on would break.

The project's own environment is locked (uv.lock). This resolves the newest releases of the packages it
names — apache-airflow and its providers, the DataHub plugin and acryl-datahub, metaflow, pyspark within
the Spark line Iceberg's runtime jar is built for (3.5), pyiceberg, boto3, openlineage-python — into a
throw-away environment beside the lock (copies of the project files with those packages' upper bounds
lifted; the lock itself is untouched), runs the fast lane of the tests, every test that guards an
internal of those packages the code uses (marked ``guards``, listed in docs/architecture.md) and the demo
there, and prints a table: each package's locked version → the newest that resolves, and what broke (the first failing test
or step and its error) or "ok". When something breaks, each upgraded package is tried alone with what
broke, to name the package that breaks it. Airflow's own CI has a "latest dependencies" job for the
same reason.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from nyc_taxi.core.settings import REPO_ROOT

# the packages the project names, and the range an upgrade is looked for in
PACKAGES = {
    "apache-airflow": ">=3.3",
    "apache-airflow-task-sdk": "",
    "apache-airflow-providers-openlineage": "",
    "apache-airflow-providers-celery": "",
    "acryl-datahub-airflow-plugin": ">=1.7.0",
    "acryl-datahub": ">=1.7.0",
    "metaflow": ">=2.19",
    "pyspark": ">=3.5,<3.6",  # the Iceberg runtime jar (iceberg-spark-runtime-3.5) is for Spark 3.5
    "pyiceberg": ">=0.12",
    "boto3": "",
    "openlineage-python": ">=1.54",
}
# the tests that guard another project's internals the code uses (docs/architecture.md): each fails when
# the internal moves, so they run on the newest releases too, besides the fast lane
GUARDS = "guards"


def locked_versions(lock: Path) -> dict[str, str]:
    packages = tomllib.loads(lock.read_text()).get("package", [])
    return {p["name"]: p.get("version", "") for p in packages}


def _lifted(text: str, packages: dict[str, str]) -> str:
    """A pyproject's dependency lines with each of ``packages``' bounds replaced by its upgrade range (in
    its dependency tables, which come before its tool settings)."""
    head, tools = (text.split("\n[tool.", 1) + [""])[:2]
    for name, wanted in packages.items():
        # the name, its extras, its specifiers: "apache-airflow>=3.3,<3.4", not "apache-airflow-providers-…"
        pattern = re.compile(rf'"{re.escape(name)}(\[[^\]]*\])?(\s*[<>=!~][^"]*)?"')
        head = pattern.sub(lambda m, name=name, wanted=wanted: f'"{name}{m.group(1) or ""}{wanted}"', head)
    return head + ("\n[tool." + tools if tools else "")


# the workspace's members beside the root (pyproject.toml's [tool.uv.workspace]): each a pyproject and its code
MEMBERS = {
    "shared": ("nyc_taxi", "metaflow_extensions"),
    "shared/metaflow_lineage": ("metaflow_lineage", "README.md"),
    "shared/nyc_taxi_proving": ("nyc_taxi_proving",),
}


def throwaway_project(work: Path, only: str | None = None) -> Path:
    """Copies of the project's files with the named packages' bounds lifted (``only``: that one), every
    workspace member's code linked, not copied: the tests run the checkout's code on the new versions."""
    project = work / "project"
    project.mkdir(parents=True)
    for part in ("pyproject.toml", "uv.lock"):
        shutil.copy(REPO_ROOT / part, project / part)
    lifted = PACKAGES if only is None else {only: PACKAGES[only]}
    pyprojects = [project / "pyproject.toml"]
    for member, parts in MEMBERS.items():
        (project / member).mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / member / "pyproject.toml", project / member / "pyproject.toml")
        pyprojects.append(project / member / "pyproject.toml")
        for part in parts:
            (project / member / part).symlink_to(REPO_ROOT / member / part)
    for path in pyprojects:
        path.write_text(_lifted(path.read_text(), lifted))
    return project


def _uv(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(project / ".venv")}
    uv = shutil.which("uv") or "uv"
    return subprocess.run([uv, *args, "--project", str(project)], env=env, capture_output=True, text=True)


def resolve(project: Path, packages: list[str]) -> str | None:
    """The newest versions that resolve, into the throw-away lock and environment; an error, or None."""
    upgrades = [item for name in packages for item in ("--upgrade-package", name)]
    locked = _uv(project, "lock", *upgrades)
    if locked.returncode:
        return "does not resolve: " + _first_error(locked.stderr)
    synced = _uv(project, "sync", "--all-groups", "--frozen", "--quiet")
    if synced.returncode:
        return "does not install: " + _first_error(synced.stderr)
    return None


def published(name: str) -> str:
    """The newest release the package index has in the package's upgrade range (from what
    `pip index versions` lists), or "?"."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    python = shutil.which("python3") or sys.executable
    done = subprocess.run(
        [python, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"], capture_output=True, text=True
    )
    listed = re.search(r"Available versions: (.*)", done.stdout)
    wanted = SpecifierSet(PACKAGES.get(name, ""))
    versions = []
    for text in listed.group(1).split(", ") if listed else []:
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease and version in wanted:
            versions.append(version)
    return str(max(versions)) if versions else "?"


def _first_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    picked = next((line for line in lines if "error" in line.lower() or "×" in line), lines[-1] if lines else "")
    return picked[:300]


def tests(project: Path, select: list[str] | None = None) -> str | None:
    """The fast lane of the tests, then every test that guards an internal, on the throw-away environment:
    the first failing test and its error (``select``: only these tests)."""
    python = project / ".venv" / "bin" / "python"
    for lane in [["--fast"], ["-m", GUARDS, "--all-lanes"]] if select is None else [["--all-lanes"]]:
        done = subprocess.run(
            [str(python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *lane, *(select or [])],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 5):  # 5: no test selected
            failed = re.search(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$", done.stdout, flags=re.M)
            if failed:
                return f"{failed.group(2)}: {(failed.group(3) or '').strip()[:250]}"
            return f"the tests ({' '.join(lane)}): " + _first_error(done.stdout + done.stderr)
    return None


def demo(project: Path, work: Path) -> str | None:
    """`bash run demo`'s pipeline on the throw-away environment: its first failing step and error."""
    python = project / ".venv" / "bin" / "python"
    state = work / "demo-state"
    env = {**os.environ, "STATE_DIR": str(state), "PROFILE": "local"}
    for name in ("TLC_BASE_URL", "NOAA_BASE_URL", "OPENLINEAGE_URL", "DATAHUB_GMS_URL"):
        env.pop(name, None)
    done = subprocess.run([str(python), "-m", "nyc_taxi_proving.cli.demo"], env=env, capture_output=True, text=True)
    if done.returncode == 0:
        return None
    said = done.stdout + done.stderr
    step = re.findall(r"^==> (.*)$", done.stdout, flags=re.M)
    return f"the demo, at {step[-1] if step else 'its start'}: {_first_error(said)}"


def check(packages: list[str], work: Path, with_demo: bool, say) -> tuple[dict[str, str], str | None, str | None]:
    """Resolve ``packages``' newest versions together; (versions, what broke in the fast lane, in the demo)."""
    project = throwaway_project(work)
    failed = resolve(project, packages)
    versions = locked_versions(project / "uv.lock")
    if failed:
        return versions, failed, None
    say("… the fast lane of the tests, then the tests that guard another project's internals")
    broke_tests = tests(project)
    say("… the demo" if with_demo else "… (no demo)")
    broke_demo = demo(project, work) if with_demo else None
    return versions, broke_tests, broke_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run upgrade-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the throw-away environment (its path is printed)")
    parser.add_argument("--no-demo", action="store_true", help="the fast lane and the guards, no demo")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="upgrade-check-"))
    say = lambda text: print(text, flush=True)  # noqa: E731
    locked = locked_versions(REPO_ROOT / "uv.lock")
    packages = [p for p in PACKAGES if p in locked]
    try:
        say(f"upgrade check: the newest releases of {len(packages)} packages, in {work}")
        versions, broke_tests, broke_demo = check(packages, work / "all", not args.no_demo, say)
        blame: dict[str, str] = {}
        for what, broke in (("tests", broke_tests), ("demo", broke_demo)):
            if not broke:
                continue
            # each upgraded package alone, with what broke: the ones that break it
            test_id = broke.split(":", 1)[0] if what == "tests" and "::" in broke else None
            for name in packages:
                if versions.get(name) == locked.get(name):
                    continue
                say(f"… {name} alone")
                alone = work / f"alone-{name}"
                project = throwaway_project(alone, only=name)
                failed = resolve(project, [name])
                if failed is None:
                    failed = tests(project, [test_id]) if what == "tests" else demo(project, alone)
                if failed:
                    blame[name] = failed
        print()
        print(f"{'package':<38} {'locked':>10}   {'resolves':<10} {'published':<10} what broke")
        for name in packages:
            old, new, newest = locked.get(name, "?"), versions.get(name, "?"), published(name)
            if name in blame:
                verdict = blame[name]
            elif old == new:
                verdict = "ok (no newer release)" if newest == old else f"ok; {newest} does not resolve with the rest"
            elif broke_tests or broke_demo:
                verdict = "ok alone" if blame else f"fails together: {broke_tests or broke_demo}"
            else:
                verdict = "ok"
            print(f"{name:<38} {old:>10} → {new:<10} {newest:<10} {verdict}")
        if (broke_tests or broke_demo) and not blame:
            print(f"\ntogether: {broke_tests or ''} {broke_demo or ''}".rstrip())
        return 0
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
