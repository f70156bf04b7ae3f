"""The site's pages: the facts each shows, arranged for its template (``templates/pages/``): the graph, the
evolution, the catalog, what is stale and the re-run plan, the backtests, a page per dataset, per job (task,
step, DAG, flow) and per run. The markup is in the templates, layout and behaviour in ``assets/``; the pictures
come in already drawn (``drawing``, ``plot``).
"""

from __future__ import annotations

import json

from markupsafe import Markup

from nyc_taxi.core import datasets as d
from nyc_taxi.core.comparison import TIE
from nyc_taxi.core.jobs import UPPER_BOUND
from nyc_taxi.lineage.read.graph import LineageGraph
from nyc_taxi.lineage.read.site.collect import SiteData
from nyc_taxi.lineage.read.site.dataset_page import DatasetPage
from nyc_taxi.lineage.read.site.drawing import STATE_COLOURS, STYLE
from nyc_taxi.lineage.read.site.parts import Page, stale_entries
from nyc_taxi.lineage.read.site.plot import versions_chart
from nyc_taxi.lineage.read.site.run_pages import JobAndRunPages


class Pages(DatasetPage, JobAndRunPages):
    """Every page of the site, from the collected facts and the drawn pictures (keyed as ``build``
    keys them: ``graph``, ``evolution``, ``mini:<name>``, ``column:<dataset>.<column>``)."""

    def __init__(self, data: SiteData, svgs: dict[str, str]):
        self.data = data
        # drawn by code that escapes every text it writes: the templates show them as they are
        self.svgs = {key: Markup(svg) for key, svg in svgs.items()}
        self.graph: LineageGraph = data.graph
        self.node_by_name = {n.name: n for n in self.graph.nodes.values()}

    def all(self) -> list[Page]:
        pages = [self.graph_page(), self.evolution_page(), self.catalog_page(), self.stale_page()]
        pages.append(self.backtests_page())
        pages += [self.dataset_page(facts) for facts in self.data.datasets.values()]
        pages += [self.job_page(job) for job in self.data.jobs.values()]
        pages += [self.run_page(run) for run in self.data.runs]
        return pages

    def graph_page(self) -> Page:
        facts = {
            "nodes": len(self.graph.nodes),
            "edges": len(self.graph.edges),
            "picture": self.svgs["graph"],
            "tool_colours": STYLE,
            "state_colours": STATE_COLOURS,
        }
        return Page("index.html", "Cross-tool lineage", "graph", "pages/graph.html", facts)

    def stale_page(self) -> Page:
        report = self.data.stale
        facts = {
            "entries": stale_entries(report.items, self.data.runs),
            "plan": [(planned, json.dumps(planned.conf, sort_keys=True)) for planned in report.plan],
            "checked_sources": report.checked_sources,
        }
        return Page("stale.html", "Stale", "stale", "pages/stale.html", facts)

    def _stale(self, items) -> list:
        return stale_entries(items, self.data.runs)

    def backtests_page(self) -> Page:
        compared = self.data.backtests
        facts = {"scores": d.YELLOW_RIDES_FORECAST_SCORES.name, "scored": bool(compared and compared.scores)}
        if facts["scored"]:
            facts.update(self._backtests(compared))
        return Page("backtests.html", "Backtests", "backtests", "pages/backtests.html", facts)

    @staticmethod
    def _backtests(compared) -> dict:
        labels = [f"{o:%Y-%m-%d %H:%M}" for o in compared.origins]
        series = {
            m: [
                None if (s := compared.score(m, o)) is None or s["wape"] is None else 100 * s["wape"]
                for o in compared.origins
            ]
            for m in compared.models
        }
        chart = versions_chart(
            "WAPE by forecast origin",
            labels,
            series,
            "WAPE, %",
            x_label="forecast origin (oldest left)",
            short=lambda o: o[5:10],
        )
        rows = [
            {
                "origin": label,
                "cells": [
                    {
                        "score": compared.score(model, origin),
                        "stale": (model, origin) in compared.stale,
                        "unjudged": (model, origin) in compared.unjudged,
                    }
                    for model in compared.models
                ],
                "winner": compared.winner(origin),
                "why_not": compared.why_not(origin),
            }
            for origin, label in zip(compared.origins, labels, strict=True)
        ]
        wins = compared.wins()
        models = [
            {
                "name": m,
                "header": f"{m}*" if m in UPPER_BOUND else m,
                "caveat": UPPER_BOUND.get(m),
                "wins": wins[m],
                "mean_wape": compared.mean_wape(m),
            }
            for m in compared.models
        ]
        return {
            "chart": Markup(chart),  # drawn by ``plot``, which escapes its texts
            "rows": rows,
            "models": models,
            "compared": len(compared.compared),
            "ties": wins[TIE],
        }

    def evolution_page(self) -> Page:
        facts = {"runs": self.data.evolution.pipeline_runs, "picture": self.svgs["evolution"]}
        return Page("evolution.html", "Evolution", "evolution", "pages/evolution.html", facts)

    def catalog_page(self) -> Page:
        datasets = [
            {"node": f.node, "description": getattr(f.declared, "description", "")} for f in self.data.datasets.values()
        ]
        jobs = [
            {
                "name": j.name,
                "kind": self._job_kind(j),
                "description": getattr(j.declared, "description", ""),
                "last": j.runs[-1] if j.runs else None,
            }
            for j in self.data.jobs.values()
        ]
        facts = {"datasets": datasets, "jobs": jobs, "runs": list(reversed(list(self.data.runs)))}
        return Page("catalog.html", "Datasets, jobs and runs", "catalog", "pages/catalog.html", facts)
