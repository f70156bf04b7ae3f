"""`bash run lineage --reproduce TARGET`: recompute a run's outputs from the input versions its lineage
recorded and compare them with what it wrote.

TARGET: a flow run (``TrainForecastModelFlow/<id>``, or any of its step runs), a version of a table a run
wrote (``yellow_rides_hourly_forecast@<snapshot>``: the run that committed it; ``yellow_taxi_raw@<snapshot>``:
a merge), or an ingestion DAG run (``ingest_yellow_taxi_data/<run id>``: its merge).

The recomputation runs the code of the commit the run recorded: this checkout's when its HEAD is that
commit (said when the working tree has changes), else that commit checked out beside it (a git worktree)
and run there. The result is kept for the lineage site (``<state>/lineage/reproductions/``).
Exit status: 0 reproduced, 1 an output differs, 2 it cannot be reproduced (the answer says why).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from nyc_taxi.core import datasets as d
from nyc_taxi.core.jobs import TRAINING_FLOW, parse_as_of
from nyc_taxi.core.reproduction import Comparison, Unreproducible
from nyc_taxi.core.settings import REPO_ROOT, Settings
from nyc_taxi.lineage.read.runs import JobRun, Runs
from nyc_taxi.lineage.read.stale import INGESTIONS

HERE = "--at-this-commit"  # the reproduction of one commit, run inside its checkout


def _git(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)


def _target_run(target: str, runs: Runs) -> JobRun:
    name, _, version = target.partition("@")
    if name in d.DATASETS and version:
        run = runs.committer(name, version)
        if run is None:
            raise Unreproducible(f"no recorded run wrote {name} @ {version}")
    else:
        try:
            run = runs.find(target)
        except KeyError as missing:
            raise Unreproducible(missing.args[0]) from None
    if run.parent and run.parent[1] in runs.by_id and runs.by_id[run.parent[1]].job == TRAINING_FLOW.name:
        run = runs.by_id[run.parent[1]]  # a step of a flow run: the flow run
    if run.job == TRAINING_FLOW.name:
        recorded = [run.code_version, *(s.code_version for s in runs.steps(run))]
        commits = sorted({c for c in recorded if c not in (None, "unknown")})
        if len(commits) > 1:  # a resume after a change of code: its cloned steps ran the earlier code
            cloned = ": it resumed a run of other code, whose steps it cloned" if run.resumed_from else ""
            raise Unreproducible(
                f"{run.label or run.run_id} and its steps ran the code of {len(commits)} commits "
                f"({', '.join(c[:12] for c in commits)}){cloned}"
            )
        return run
    if run.is_pipeline_run:  # an ingestion DAG run: its merge
        merges = [c for c in runs.children(run) if any(c.job == i.merge for i in INGESTIONS)]
        if not merges:
            raise Unreproducible(f"{target} ran no merge: nothing to reproduce")
        return merges[-1]
    return run


def _flow(run: JobRun, runs: Runs, settings: Settings) -> list[Comparison]:
    from nyc_taxi.forecast.reproduce import Recorded, reproduce

    steps = {c.job.split(".", 1)[1]: c for c in runs.steps(run)}  # a resume's cloned ones: the earlier run's
    missing = [s for s in ("compute_actuals", "train_forecasting_model", "write_forecasts_to_table") if s not in steps]
    if missing or run.state != "success":
        raise Unreproducible(
            f"{run.label} did not finish ({run.state}; no record of {', '.join(missing) or 'its end'})"
        )
    p = run.parameters
    recorded = Recorded(
        as_of=parse_as_of(p["as_of_datetime"]),
        lookback_days=int(p["lookback_days"]),
        horizon_hours=int(p["predict_horizon_hours"]),
        model=p["model"],
        raw_snapshot=steps["compute_actuals"].inputs.get(d.YELLOW_TAXI_RAW.name),
        actuals_snapshot=steps["compute_actuals"].outputs.get(d.YELLOW_RIDES_HOURLY_ACTUALS.name),
        model_version=steps["train_forecasting_model"].outputs.get(d.YELLOW_RIDES_FORECAST_MODEL.name),
        forecast_snapshot=steps["write_forecasts_to_table"].outputs.get(d.YELLOW_RIDES_HOURLY_FORECAST.name),
        weather_snapshot=steps.get("prepare_training_data", run).inputs.get(d.WEATHER_RAW.name),
    )
    return reproduce(recorded, settings)


def _merge(run: JobRun, runs: Runs, settings: Settings) -> list[Comparison]:
    from nyc_taxi.ingest.reproduce import reproduce

    ingestion = next(i for i in INGESTIONS if i.merge == run.job)
    snapshot = run.outputs.get(ingestion.raw.name)
    stage = [r for r in runs.of_job(f"{ingestion.pipeline.name}.stage_landed_files") if r.parent == run.parent]
    landed = stage[-1].inputs.get(ingestion.landed.name) if stage else None
    if snapshot is None or landed is None:
        raise Unreproducible(f"the lineage of {run.label or run.run_id} names no raw snapshot or no landed version")
    return [reproduce(ingestion.raw, int(snapshot), landed, settings)]


def reproduce_here(target: str, settings: Settings) -> tuple[int, str, JobRun | None]:
    """Reproduce with this checkout's code: (exit status, what to print, the run)."""
    runs = Runs.read(settings)
    try:
        run = _target_run(target, runs)
        comparisons = _flow(run, runs, settings) if run.job == TRAINING_FLOW.name else _merge(run, runs, settings)
    except Unreproducible as why:
        return 2, f"cannot reproduce {target}: {why}", None
    text = "\n".join(c.line() for c in comparisons)
    return (0 if all(c.equal for c in comparisons) else 1), text, run


def _record(settings: Settings, run: JobRun, status: int, text: str, code: str) -> None:
    from nyc_taxi.lineage.read.reproductions import record

    record(settings, run.run_id, {"status": ["reproduced", "differs", "cannot"][status], "text": text, "code": code})


def reproduce(target: str, settings: Settings) -> int:
    """Print the answer; keep it for the site; the exit status."""
    runs = Runs.read(settings)
    try:
        run = _target_run(target, runs)
    except Unreproducible as why:
        print(f"cannot reproduce {target}: {why}", file=sys.stderr)
        return 2
    head = _git("rev-parse", "HEAD").stdout.strip()
    recorded = run.code_version or next((c.code_version for c in runs.steps(run) if c.code_version), None)
    if recorded in (None, "unknown", head):
        dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        code = f"this checkout ({head[:12]})" + (", with uncommitted changes" if dirty else "")
        status, text, _ = reproduce_here(target, settings)
    else:
        code = f"commit {recorded[:12]} (the run's; this checkout is at {head[:12]})"
        status, text = _at_commit(recorded, target, settings)
    print(f"code: {code}")
    (print if status < 2 else (lambda t: print(t, file=sys.stderr)))(text)
    _record(settings, run, status, text, code)
    return status


def _at_commit(commit: str, target: str, settings: Settings) -> tuple[int, str]:
    """The reproduction run by the code of ``commit``, checked out in a temporary worktree."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
        return (
            2,
            f"cannot reproduce {target}: commit {commit} is not in this repository: the code that ran is unknown here",
        )
    with tempfile.TemporaryDirectory(prefix="reproduce-") as tmp:
        tree = Path(tmp) / "tree"
        added = _git("worktree", "add", "--detach", str(tree), commit)
        if added.returncode:
            return 2, f"cannot reproduce {target}: checking out {commit} failed: {added.stderr.strip()}"
        try:
            env = {**os.environ, "PYTHONPATH": str(tree / "shared"), "STATE_DIR": str(settings.state_dir)}
            done = subprocess.run(
                [sys.executable, "-m", "nyc_taxi.cli.lineage", "--reproduce", target, HERE],
                env=env,
                capture_output=True,
                text=True,
                cwd=tree,
            )
        finally:
            _git("worktree", "remove", "--force", str(tree))
    if done.returncode == 2 and HERE in done.stderr:  # argparse: that commit predates reproduction
        return 2, f"cannot reproduce {target}: the code of commit {commit[:12]} cannot reproduce runs (it predates it)"
    return done.returncode, (done.stdout + done.stderr).strip()


def main_here(target: str, settings: Settings) -> int:
    """`--reproduce TARGET --at-this-commit`: inside a checkout of the run's commit."""
    status, text, _ = reproduce_here(target, settings)
    print(text, file=sys.stderr if status == 2 else sys.stdout)
    return status
