"""`bash run lineage`: the cross-tool lineage (DataHub Lite, the OpenLineage events, Iceberg's history).

bash run lineage yellow_taxi_raw                 upstream and downstream, recursively, across tools
bash run lineage TrainForecastModelFlow.predict --json
bash run lineage yellow_rides_hourly_forecast.predicted_ride_count   a column, back to the source file's
bash run lineage --trace yellow_rides_hourly_forecast   the exact versions and runs behind it (also
                 name@<snapshot id>, TrainForecastModelFlow/<run id>, <dag_id>/<run_id>)
bash run lineage --as-of 2024-05-01T12:00        the graph as the runs up to then recorded it (or a run)
bash run lineage --diff RUN_A RUN_B              two runs of a job, a DAG or a flow, compared
bash run lineage --graph [--out DIR]             the whole graph as SVG + HTML
bash run lineage --site [--out DIR]              the lineage site: a page per dataset, job and run (file://)
bash run lineage serve [--port N] [--out DIR]    the site on 127.0.0.1, rebuilt when new records arrive
bash run lineage --runs ingest_yellow_taxi_data.merge_upsert_staging_into_raw_yellow
bash run lineage --quality yellow_taxi_staging   its checks, the last result of each, their history by run
                 and version, and its profile over versions
bash run lineage --stale [--json]                what is stale now (sources asked), and the re-run plan
bash run lineage --stale --rerun                 carry the plan out through Airflow and Metaflow
bash run lineage --reproduce TrainForecastModelFlow/<run id>   recompute a run's outputs from its recorded
                 inputs and compare (also yellow_rides_hourly_forecast@<snapshot>, yellow_taxi_raw@<snapshot>)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nyc_taxi.core.datasets import DATASETS
from nyc_taxi.core.settings import get_settings
from nyc_taxi.metaflow_adapter.recorder import record_leftovers


def serve(argv: list[str]) -> int:
    """`bash run lineage serve`: the site on 127.0.0.1 until Ctrl-C."""
    from nyc_taxi.lineage.read.site.build import default_dir
    from nyc_taxi.lineage.read.site.serve import serve as serve_site

    parser = argparse.ArgumentParser(prog="bash run lineage serve", description=serve.__doc__)
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--out", type=Path, help="where the site is written (default: <state>/lineage/site)")
    args = parser.parse_args(argv)
    settings = get_settings()
    serve_site(settings, args.out or default_dir(settings), args.port)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # a subcommand, though `name` is positional: serve is no dataset or job
        return serve(argv[1:])
    parser = argparse.ArgumentParser(
        prog="bash run lineage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", nargs="?", help="a dataset (registry name or URN) or a job (dag.task, Flow.step)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--graph", action="store_true", help="write the whole graph as lineage.svg and lineage.html")
    parser.add_argument("--site", action="store_true", help="write the lineage site (default: <state>/lineage/site)")
    parser.add_argument(
        "--out",
        type=Path,
        help="where --graph or --site writes (default: <state>/lineage/picture, <state>/lineage/site)",
    )
    parser.add_argument(
        "--runs", metavar="JOB", help="run history of a job, failed runs compared with the last good one"
    )
    parser.add_argument("--trace", metavar="TARGET", help="the versions and runs behind a dataset version or a run")
    parser.add_argument(
        "--quality", metavar="DATASET", help="a dataset's checks and their results by version, and its profiles"
    )
    parser.add_argument("--as-of", metavar="WHEN", help="the graph as it stood at a time (UTC) or after a run")
    parser.add_argument("--diff", nargs=2, metavar=("RUN_A", "RUN_B"), help="what changed between two runs")
    parser.add_argument("--stale", action="store_true", help="what is stale now, with the reason and the re-run plan")
    parser.add_argument("--rerun", action="store_true", help="with --stale: run the plan (Airflow, Metaflow)")
    parser.add_argument(
        "--reproduce", metavar="TARGET", help="recompute a run's outputs from the versions it read, and compare"
    )
    parser.add_argument("--at-this-commit", action="store_true", help=argparse.SUPPRESS)  # --reproduce, inside
    args = parser.parse_args(argv)
    settings = get_settings()
    record_leftovers(settings)  # a Metaflow step's lineage whose recorder was killed

    if args.reproduce:
        from nyc_taxi.cli.reproduce import main_here, reproduce

        return main_here(args.reproduce, settings) if args.at_this_commit else reproduce(args.reproduce, settings)
    if args.rerun and not args.stale:
        parser.error("--rerun carries out the plan of --stale: give both")
    if args.stale:
        return stale(settings, args.json, args.rerun)
    if args.site:
        from nyc_taxi.cli.stale import stale as check_stale
        from nyc_taxi.lineage.read.site.build import build_site, default_dir

        index = build_site(settings, args.out or default_dir(settings), stale=check_stale(settings))
        print(json.dumps({"site": str(index)}) if args.json else f"wrote the lineage site: {index}")
        return 0
    try:
        if args.quality:
            from nyc_taxi.core.registry import get
            from nyc_taxi.lineage.read import quality

            found = quality.read(settings).of(get(args.quality).name)
            print(json.dumps(found.as_dict(), indent=2) if args.json else quality.render(found))
            return 0
        if args.trace:
            from nyc_taxi.lineage.read.trace import render as render_trace
            from nyc_taxi.lineage.read.trace import trace, verdict_of

            step = trace(args.trace, settings)
            answer = {**step.as_dict(), "checks_verdict": verdict_of(step).as_dict()}
            print(json.dumps(answer, indent=2) if args.json else render_trace(step))
            return 0
        if args.diff:
            from nyc_taxi.lineage.read.evolution import diff, render_diff

            change = diff(*args.diff, settings=settings)
            print(json.dumps(change.as_dict(), indent=2) if args.json else render_diff(change))
            return 0
        if args.name and "." in args.name and args.name.rpartition(".")[0] in DATASETS:
            from nyc_taxi.lineage.read.columns import render as render_columns
            from nyc_taxi.lineage.read.columns import upstream_of

            column = upstream_of(args.name, settings)
            print(json.dumps(column.as_dict(), indent=2) if args.json else render_columns(column))
            return 0
    except (KeyError, ValueError) as problem:
        parser.exit(2, f"error: {problem.args[0]}\n")

    if args.runs:
        from nyc_taxi.lineage.read.runs import as_json, job_runs, render

        try:
            runs = job_runs(args.runs, settings)
        except KeyError as missing:
            parser.exit(2, f"error: {missing.args[0]}\n")
        print(json.dumps(as_json(runs), indent=2) if args.json else render(runs))
        return 0

    from nyc_taxi.lineage.read import render
    from nyc_taxi.lineage.read.lite import load_graph
    from nyc_taxi.lineage.read.store import LineageStore

    store = LineageStore(settings)
    loaded = store.load()
    if args.as_of:
        from nyc_taxi.lineage.read.evolution import graph_as_of

        graph = graph_as_of(args.as_of, settings)
    else:
        graph = load_graph(settings, load=False)
    if not args.json:
        print(f"DataHub Lite: {store.database} ({loaded.new_records} new records loaded)", file=sys.stderr)
    if args.graph:
        from nyc_taxi.lineage.read.site.picture import write_picture

        svg, page = write_picture(graph, args.out or settings.lineage_dir / "picture")
        print(json.dumps({"svg": str(svg), "html": str(page)}) if args.json else f"wrote {svg} and {page}")
        return 0
    if args.name:
        try:
            urn = graph.resolve(args.name)
        except KeyError as missing:
            parser.exit(2, f"error: {missing.args[0]}\n")
        print(json.dumps(graph.as_json(urn), indent=2) if args.json else render.tree(graph, urn))
        return 0
    if args.json:
        print(json.dumps(graph.everything_as_json(), indent=2))
    else:
        print(render.summary(graph))
        print("ask about one: bash run lineage yellow_taxi_raw   (or --graph, --runs JOB, --json)")
    return 0


def stale(settings, as_json: bool, rerun: bool) -> int:
    """`--stale [--rerun]`: the report; with --rerun the plan carried out, then the report again."""
    from nyc_taxi.cli.stale import rerun as run_plan
    from nyc_taxi.cli.stale import stale as check
    from nyc_taxi.lineage.read.stale import render

    report = check(settings)
    print(json.dumps(report.as_dict(), indent=2) if as_json else render(report))
    if not rerun or not report.plan:
        return 0
    try:
        results = run_plan(report, settings)
    except RuntimeError as why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    from nyc_taxi.cli.dag_run_results import describe

    for result in results:
        print("\n".join(f"ran {text}" for text in describe(result, settings)))
    after = check(settings)
    print(json.dumps(after.as_dict(), indent=2) if as_json else render(after))
    return 0 if not after.items else 1


if __name__ == "__main__":
    sys.exit(main())
