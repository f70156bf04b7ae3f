"""`bash run lineage`: the cross-tool lineage from DataHub Lite (records loaded first, incrementally).

    bash run lineage yellow_taxi_raw                 upstream and downstream, recursively, across tools
    bash run lineage TrainForecastModelFlow.predict --json
    bash run lineage --graph [--out images]          the whole graph as SVG + HTML
    bash run lineage --runs ingest_yellow_taxi_data.merge_upsert_staging_into_raw_yellow
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from nyc_taxi.settings import REPO_ROOT, get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash run lineage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="a dataset (registry name or URN) or a job (dag.task, Flow.step)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--graph", action="store_true", help="write the whole graph as lineage.svg and lineage.html")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "images", help="where --graph writes (default images/)")
    parser.add_argument("--runs", metavar="JOB", help="run history of a job, failed runs compared with the last good one")
    args = parser.parse_args(argv)
    settings = get_settings()

    if args.runs:
        from nyc_taxi.lineage.runs import as_json, job_runs, render

        try:
            runs = job_runs(args.runs, settings)
        except KeyError as missing:
            parser.exit(2, f"error: {missing.args[0]}\n")
        print(json.dumps(as_json(runs), indent=2) if args.json else render(runs))
        return 0

    from nyc_taxi.lineage.graph import load_graph
    from nyc_taxi.lineage.store import LineageStore

    store = LineageStore(settings)
    loaded = store.load()
    graph = load_graph(settings, load=False)
    if not args.json:
        print(f"DataHub Lite: {store.database} ({loaded.new_records} new records loaded)", file=sys.stderr)
    if args.graph:
        from nyc_taxi.lineage.picture import write_picture

        svg, page = write_picture(graph, args.out)
        print(json.dumps({"svg": str(svg), "html": str(page)}) if args.json else f"wrote {svg} and {page}")
        return 0
    if args.name:
        try:
            urn = graph.resolve(args.name)
        except KeyError as missing:
            parser.exit(2, f"error: {missing.args[0]}\n")
        print(json.dumps(graph.as_json(urn), indent=2) if args.json else graph.tree(urn))
        return 0
    counts = Counter(n.label for n in graph.nodes.values())
    if args.json:
        print(json.dumps({"nodes": {u: n.as_dict() for u, n in sorted(graph.nodes.items())},
                          "edges": [list(e) for e in sorted(graph.edges)]}, indent=2))
    else:
        print(f"{len(graph.nodes)} nodes, {len(graph.edges)} edges: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        print("ask about one: bash run lineage yellow_taxi_raw   (or --graph, --runs JOB, --json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
