"""Real flows, run by Metaflow: the events the user's OpenLineage transport received, the records left
for DataHub, and their identities, computed here independently of the package."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from places import FLOWS, datahub_check

from metaflow_lineage.spec import validation_errors

AIRFLOW_RUN, DAG_RUN = str(uuid.uuid4()), str(uuid.uuid4())


def _uuid(text: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "metaflow:" + text))


def _by(events, job=None, state=None, run_id=None):
    return [
        e
        for e in events
        if (job is None or e["job"]["name"] == job)
        and (state is None or e["eventType"] == state)
        and (run_id is None or e["run"]["runId"] == run_id)
    ]


def _records(outbox: Path) -> list[dict]:
    return [r for path in sorted((outbox / "pending").glob("*.datahub.json")) for r in json.loads(path.read_text())]


def test_the_readme_flow_emits_valid_events_to_the_users_transport_and_datahub_records_datahub_accepts(place):
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S)[1]
    flow = (FLOWS / "daily_orders_flow.py").read_text().split("\nif __name__")[0]
    assert [line for line in example.splitlines() if line.strip()] == [
        line for line in flow.splitlines() if line.strip()
    ]

    code, run_id, output = place.run(
        "daily_orders_flow.py",
        OPENLINEAGE_PARENT_ID=f"airflow/orders_dag.train/{AIRFLOW_RUN}",
        OPENLINEAGE_ROOT_PARENT_ID=f"airflow/orders_dag/{DAG_RUN}",
    )
    assert code == 0, output
    events = place.events()
    assert [validation_errors(e) for e in events] == [[]] * len(events)

    flow_run = _uuid(f"default/DailyOrdersFlow/{run_id}")
    assert [e["eventType"] for e in _by(events, "DailyOrdersFlow")] == ["START", "COMPLETE"]
    for event in _by(events, "DailyOrdersFlow"):
        assert event["run"]["runId"] == flow_run
        parent = event["run"]["facets"]["parent"]
        job = parent["job"]
        assert (job["namespace"], job["name"], parent["run"]["runId"]) == ("airflow", "orders_dag.train", AIRFLOW_RUN)
        assert (parent["root"]["job"]["name"], parent["root"]["run"]["runId"]) == ("orders_dag", DAG_RUN)

    start_run = _uuid(f"default/DailyOrdersFlow/{run_id}/start/1/0")
    ended = _by(events, "DailyOrdersFlow.start", "COMPLETE")
    assert [e["run"]["runId"] for e in _by(events, "DailyOrdersFlow.start")] == [start_run, start_run]
    assert ended[0]["run"]["facets"]["parent"]["run"]["runId"] == flow_run
    assert ended[0]["run"]["facets"]["parent"]["root"]["run"]["runId"] == DAG_RUN
    (read,), (wrote,) = ended[0]["inputs"], ended[0]["outputs"]
    assert (read["namespace"], read["name"], read["facets"]["version"]["datasetVersion"]) == (
        "postgres://db:5432",
        "shop.public.orders",
        "42",
    )
    assert read["inputFacets"]["inputStatistics"]["rowCount"] == 120
    assert (wrote["namespace"], wrote["name"], wrote["outputFacets"]["outputStatistics"]["rowCount"]) == (
        "s3://lake",
        "marts/daily_orders",
        7,
    )
    sources = wrote["facets"]["columnLineage"]["fields"]["orders"]["inputFields"]
    assert [(f["namespace"], f["name"], f["field"]) for f in sources] == [
        ("postgres://db:5432", "shop.public.orders", "id")
    ]
    end_deps = _by(events, "DailyOrdersFlow.end", "START")[0]["run"]["facets"]["jobDependencies"]["upstream"]
    assert [d["job"]["name"] for d in end_deps] == ["DailyOrdersFlow.start"]

    # DataHub is not set here: its records wait in the outbox, as files DataHub's own check accepts
    pending = sorted((place.outbox / "pending").glob("*.json"))
    assert pending and all(p.name.endswith(".datahub.json") for p in pending)
    assert [datahub_check(p) for p in pending] == [""] * len(pending)
    records = _records(place.outbox)
    # nothing people edit in DataHub is written; the job's lineage is added to, by a patch
    assert {r["aspectName"] for r in records} & {"ownership", "globalTags"} == set()
    job = "urn:li:dataJob:(urn:li:dataFlow:(metaflow,DailyOrdersFlow,PROD),start)"
    (io,) = [r for r in records if r["entityUrn"] == job and r["aspectName"] == "dataJobInputOutput"]
    assert io["changeType"] == "PATCH"
    orders = "urn:li:dataset:(urn:li:dataPlatform:postgres,shop.public.orders,PROD)"
    daily = "urn:li:dataset:(urn:li:dataPlatform:s3,lake/marts/daily_orders,PROD)"  # DataHub's S3 name: bucket/path
    operations = io["aspect"]["json"]
    assert {op["op"] for op in operations} == {"add"}
    edges = {(op["path"].split("/")[1], op["value"].get("destinationUrn")) for op in operations}
    assert {("inputDatasetEdges", orders), ("outputDatasetEdges", daily)} <= edges
    (fine,) = [op["path"] for op in operations if op["path"].startswith("/fineGrainedLineages/")]
    escaped = lambda urn: urn.replace("/", "~1")  # noqa: E731 - a JSON pointer's escape of "/"
    assert (
        fine
        == f"/fineGrainedLineages/NONE/urn:li:schemaField:({escaped(daily)},orders)/NONE/urn:li:schemaField:({orders},id)"
    )
    # the end step's run names the step before it, in DataHub too
    (end_io,) = [r for r in records if r["entityUrn"].endswith(",end)") and r["aspectName"] == "dataJobInputOutput"]
    assert {op["value"].get("destinationUrn") for op in end_io["aspect"]["json"]} == {job}
    # the flow's file, where it is
    location = _by(events, "DailyOrdersFlow", "START")[0]["job"]["facets"]["sourceCodeLocation"]
    assert Path(location["path"]) == FLOWS / "daily_orders_flow.py"


def test_a_foreach_a_retry_a_failure_and_a_resume_are_runs_of_their_own(place):
    code, failed_run, output = place.run("branching_flow.py", FAIL_TRAINING="1")
    assert code != 0 and "training data refused" in output
    events = place.events()
    assert [validation_errors(e) for e in events] == [[]] * len(events)
    flow_run = _uuid(f"shop/BranchingFlow/{failed_run}")

    # each split of the foreach is a task, each attempt of a task a run; part 2's first attempt failed
    counts = _by(events, "BranchingFlow.count")
    tags = [{t["key"]: t["value"] for t in e["run"]["facets"]["tags"]["tags"]} for e in counts]
    attempts = sorted({(t["metaflow.pathspec"], t["metaflow.attempt"]) for t in tags})
    retried = [pathspec for pathspec, attempt in attempts if attempt == "1"]
    assert len(attempts) == 3 and len(retried) == 1 and len({p for p, _ in attempts}) == 2, attempts
    for pathspec, attempt in attempts:
        states = [e["eventType"] for e in _by(counts, run_id=_uuid(f"shop/{pathspec}/{attempt}"))]
        assert states == (["START", "FAIL"] if (pathspec, attempt) == (retried[0], "0") else ["START", "COMPLETE"])
    assert "a transient failure of part 2" in _by(counts, state="FAIL")[0]["run"]["facets"]["errorMessage"]["message"]

    # the flow run failed once, when training failed with no retry left, not at the retried split
    assert [e["eventType"] for e in _by(events, "BranchingFlow", run_id=flow_run)] == ["START", "FAIL"]
    assert (
        "training data refused" in _by(events, "BranchingFlow", "FAIL")[0]["run"]["facets"]["errorMessage"]["message"]
    )
    assert _by(events, "BranchingFlow", "START")[0]["run"]["facets"]["nominalTime"]["nominalStartTime"].startswith(
        "2024-01-15T05:00:00"
    )

    code, resumed_run, output = place.run("branching_flow.py", resume=True)
    assert code == 0, output
    later = [e for e in place.events() if e not in events]
    resumed_flow = _uuid(f"shop/BranchingFlow/{resumed_run}")
    assert resumed_flow != flow_run
    assert [e["eventType"] for e in _by(later, "BranchingFlow")] == ["START", "COMPLETE"]
    origin = {t["key"]: t["value"] for t in _by(later, "BranchingFlow")[0]["run"]["facets"]["tags"]["tags"]}
    assert origin["metaflow.origin_run_id"] == failed_run
    # the steps resume cloned ran nothing and say nothing; the ones it ran are children of the new flow run
    assert sorted({e["job"]["name"] for e in later}) == ["BranchingFlow", "BranchingFlow.end", "BranchingFlow.train"]
    for event in _by(later, "BranchingFlow.train"):
        assert event["run"]["facets"]["parent"]["run"]["runId"] == resumed_flow

    records = _records(place.outbox)
    models = [r for r in records if r["entityType"] == "mlModel"]
    assert len(models) == 1
    model = models[0]["aspect"]["json"]
    assert model["version"]["versionTag"].startswith(f"BranchingFlow/{resumed_run}/train/")
    assert (
        models[0]["entityUrn"]
        == f"urn:li:mlModel:(urn:li:dataPlatform:metaflow,parts_model@{model['version']['versionTag']},PROD)"
    )
    assert model["groups"] == ["urn:li:mlModelGroup:(urn:li:dataPlatform:metaflow,parts_model,PROD)"]
    # the failed run's training recorded what it read, then failed: its DataJob gained nothing, no model
    failed_train = [
        r
        for p in (place.outbox / "pending").glob(f"BranchingFlow.{failed_run}.*.train.*.end.datahub.json")
        for r in json.loads(p.read_text())
    ]
    assert failed_train and not [
        r for r in failed_train if r["aspectName"] in ("dataJobInputOutput", "mlModelProperties")
    ]
    # trained by the step, and by the run of it that the resumed run ran
    train_run = [
        r["entityUrn"]
        for r in records
        if r["aspectName"] == "dataProcessInstanceProperties"
        and r["aspect"]["json"]["name"] == f"shop/{model['version']['versionTag']}/0"
    ]
    assert model["trainingJobs"] == ["urn:li:dataJob:(urn:li:dataFlow:(metaflow,BranchingFlow,PROD),train)", *train_run]
    assert len(train_run) == 1
    assert all(datahub_check(p) == "" for p in (place.outbox / "pending").glob("*.datahub.json"))


def test_a_subclass_of_the_step_decorator_records_each_steps_run_its_own_way_and_nothing_else(place):
    records = place.root / "own.jsonl"
    code, run_id, output = place.run("own_recorder_flow.py", OWN_RECORDS=str(records))
    assert code == 0, output
    entries = [json.loads(line) for line in records.read_text().splitlines()]
    start, end = f"OwnRecorderFlow/{run_id}/start/1", f"OwnRecorderFlow/{run_id}/end/2"
    assert entries == [
        {"kind": "started", "pathspec": start, "upstream": []},
        {"kind": "finished", "pathspec": start, "ends_run": False, "size": 3},
        {"kind": "started", "pathspec": end, "upstream": ["start"]},
        {"kind": "finished", "pathspec": end, "ends_run": True, "size": 3},
    ]
    assert place.events() == [] and not place.outbox.exists()


def test_a_caught_failure_fails_its_step_run_and_not_the_flow_run(place):
    code, _, output = place.run("caught_flow.py")
    assert code == 0, output
    events = place.events()
    assert [e["eventType"] for e in _by(events, "CaughtFlow")] == ["START", "COMPLETE"]
    assert [e["eventType"] for e in _by(events, "CaughtFlow.start")] == ["START", "FAIL"]
