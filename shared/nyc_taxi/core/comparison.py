"""Models compared on the forecasts they made from the same origins, as the scores table holds them
(``yellow_rides_forecast_scores``): WAPE by origin and model, and which model wins how often. What
`bash run backtest` prints and the lineage site's Backtests page shows.

An origin is compared only where every model's score is like the others': over its whole horizon
(coverage 1), over the same hours (first and last) and the same zones (their digest, ``zone_set``), trained
on the same lookback, and not stale (a source it was computed from has changed since, as `bash run lineage
--stale` says) nor of a run the lineage does not record (whether it is stale is not known): a model scored on other zone-hours, or trained on other days, than the rest would be judged
on other demand or be another model. ``why_not`` says which of these an origin lacks. With one model there
is nothing to compare: no winner."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from nyc_taxi.core import datasets as d
from nyc_taxi.core.jobs import UPPER_BOUND
from nyc_taxi.core.settings import Settings, get_settings

SCORES = d.YELLOW_RIDES_FORECAST_SCORES
TIE = "tie"


@dataclass(frozen=True)
class Comparison:
    models: tuple[str, ...]
    origins: tuple[dt.datetime, ...]  # oldest first
    scores: dict[tuple[str, dt.datetime], dict]  # (model, origin) -> its row of the scores table
    stale: frozenset[tuple[str, dt.datetime]] = frozenset()  # (model, origin) of the scores that are stale
    # the flow runs (Metaflow's pathspecs) whose lineage staleness was judged from; None: not asked
    judged_runs: frozenset[str] | None = None

    @property
    def unjudged(self) -> frozenset[tuple[str, dt.datetime]]:
        """(model, origin) of the scores whose run the lineage does not record (OpenLineage off, its events
        lost): whether they are stale is not known, and they are marked so, never passed as fresh."""
        if self.judged_runs is None:
            return frozenset()
        return frozenset(
            key for key, row in self.scores.items() if _flow_run(row["model_version"]) not in self.judged_runs
        )

    def score(self, model: str, origin: dt.datetime) -> dict | None:
        return self.scores.get((model, origin))

    def why_not(self, origin: dt.datetime) -> str | None:
        """Why the models' scores of ``origin`` are not compared (None: they are)."""
        scores = [self.score(m, origin) for m in self.models]
        if len(self.models) < 2:
            return "one model"
        if any(s is None for s in scores):
            return "not every model scored"
        if any((m, origin) in self.stale for m in self.models):
            return "a stale score"
        if any((m, origin) in self.unjudged for m in self.models):
            return "a score not known fresh"
        if any(s["coverage"] != 1 or s["wape"] is None for s in scores):
            return "part of its hours"
        if len({(s["first_hour"], s["last_hour"]) for s in scores}) > 1:
            return "other hours"
        if any(s.get("lookback_days") is None for s in scores) or len({s["lookback_days"] for s in scores}) > 1:
            return "other lookbacks"
        if any(s.get("zone_set") is None for s in scores) or len({s["zone_set"] for s in scores}) > 1:
            return "other zones"
        return None

    def comparable(self, origin: dt.datetime) -> bool:
        """Two models or more, each with a score of the origin like the others' (``why_not``)."""
        return self.why_not(origin) is None

    def winner(self, origin: dt.datetime) -> str | None:
        """The model with the lowest WAPE at ``origin`` (``TIE`` when two share it); None: not comparable."""
        if not self.comparable(origin):
            return None
        wapes = {m: self.score(m, origin)["wape"] for m in self.models}
        best = min(wapes.values())
        winners = [m for m, w in wapes.items() if w == best]
        return winners[0] if len(winners) == 1 else TIE

    def wins(self) -> dict[str, int]:
        """How often each model won (and ``TIE``), over the comparable origins."""
        counted = dict.fromkeys((*self.models, TIE), 0)
        for origin in self.origins:
            if (winner := self.winner(origin)) is not None:
                counted[winner] += 1
        return counted

    @property
    def compared(self) -> list[dt.datetime]:
        return [o for o in self.origins if self.winner(o) is not None]

    def mean_wape(self, model: str) -> float | None:
        """The model's WAPE over the compared origins' hours together: Σ|error| / Σ actual rides."""
        rows = [self.score(model, o) for o in self.compared]
        actual = sum(r["actual_rides"] for r in rows)
        return sum(r["mae"] * r["scored_zone_hours"] for r in rows) / actual if actual else None


def _flow_run(model_version: str) -> str:
    """The flow run of a model version (the pathspec of its training step): ``Flow/run_id``."""
    return "/".join(model_version.split("/")[:2])


def of_rows(
    rows: list[dict],
    origins: list[dt.datetime] | None = None,
    models: tuple[str, ...] | None = None,
    stale: set[tuple[str, dt.datetime]] = frozenset(),
    judged_runs: frozenset[str] | None = None,
):
    """The comparison of score rows (the scores table's) of ``models`` at ``origins`` (default: all of them);
    ``stale``, the (model, origin) of the scores a source changed under, judged from the lineage of the flow
    runs ``judged_runs`` (None: staleness not asked)."""
    scores = {(r["model_name"], r["as_of_datetime"]): r for r in rows}
    models = tuple(dict.fromkeys(models or sorted({m for m, _ in scores})))
    origins = sorted(origins or {o for _, o in scores})
    kept = {k: v for k, v in scores.items() if k[0] in models and k[1] in origins}
    judged = frozenset(judged_runs) if judged_runs is not None else None
    return Comparison(models, tuple(origins), kept, frozenset(stale) & frozenset(kept), judged)


def compare(
    settings: Settings | None = None,
    origins: list[dt.datetime] | None = None,
    models: tuple[str, ...] | None = None,
    stale: set[tuple[str, dt.datetime]] = frozenset(),
    judged_runs: frozenset[str] | None = None,
) -> Comparison:
    """The scores table's comparison of ``models`` at ``origins`` (default: every model and origin it holds)."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_table

    settings = settings or get_settings()
    try:
        rows = load_table(SCORES, settings).scan().to_arrow().to_pylist()
    except NoSuchTableError:  # nothing scored yet
        rows = []
    return of_rows(rows, origins, models, stale, judged_runs)


def featured(comparison: Comparison) -> list[str]:
    """Each model's figures in a line, as a model's page features them (DataHub's mlModelMetrics)."""
    compared = comparison.compared
    lines = []
    for model in comparison.models:
        scored = sum(1 for m, _ in comparison.scores if m == model)
        line = f"{model}: {scored} forecast{'s' if scored != 1 else ''} scored"
        wape = comparison.mean_wape(model)
        if compared and wape is not None:
            line += (
                f"; WAPE {wape:.1%} over the {len(compared)} origins every model was scored at whole "
                f"({compared[0]:%Y-%m-%d} – {compared[-1]:%Y-%m-%d}), the best at {comparison.wins()[model]}"
            )
        if model in UPPER_BOUND:
            line += f" ({UPPER_BOUND[model]})"
        lines.append(line)
    return lines


def _marked(model: str) -> str:
    """A model's name, starred where its scores are an upper bound (``jobs.UPPER_BOUND``, said below)."""
    return f"{model}*" if model in UPPER_BOUND else model


def render(comparison: Comparison) -> str:
    """WAPE (and MAE) by origin and model, the winner of each origin, and how often each model won."""
    if not comparison.models or not comparison.origins:
        return "no scores yet: run the flow for an origin whose hours are loaded (bash run backtest)"
    width = max(16, *(len(m) + 1 for m in comparison.models)) + 2
    header = "origin            " + "".join(f"{_marked(m):<{width}}" for m in comparison.models) + "best"
    lines = ["WAPE (MAE) by forecast origin — lower is better", header]
    for origin in comparison.origins:
        cells = []
        for model in comparison.models:
            score = comparison.score(model, origin)
            if score is None:
                cell = "not scored"
            else:
                wape = "—" if score["wape"] is None else f"{score['wape']:.1%}"
                cell = f"{wape} ({score['mae']:.2f})"
                if score["coverage"] < 1:
                    cell += f" {score['coverage']:.0%} of hours"
                if (model, origin) in comparison.stale:
                    cell += " stale"
                elif (model, origin) in comparison.unjudged:
                    cell += " ?"
            cells.append(f"{cell:<{width}}")
        winner = comparison.winner(origin) if len(comparison.models) > 1 else ""
        said = winner if winner is not None else f"not comparable: {comparison.why_not(origin)}"
        lines.append(f"{origin:%Y-%m-%d %H:%M}  " + "".join(cells) + said)
    lines += [f"* {m}: {UPPER_BOUND[m]}" for m in comparison.models if m in UPPER_BOUND]
    if comparison.unjudged:
        lines.append(
            "? whether the score is stale is not known: the lineage records no run of its flow, or not the raw "
            "its run read (OpenLineage off when it ran, or its events lost), and staleness is judged from those"
        )
    if len(comparison.models) < 2:
        lines.append("one model: nothing to compare it with")
        return "\n".join(lines)
    wins = comparison.wins()
    compared = len(comparison.compared)
    said = ", ".join(f"{m} {wins[m]} of {compared}" for m in comparison.models)
    lines.append(f"wins: {said}" + (f", ties {wins[TIE]}" if wins[TIE] else ""))
    means = ", ".join(f"{m} {w:.1%}" for m in comparison.models if (w := comparison.mean_wape(m)) is not None)
    if means:
        lines.append(f"WAPE over the {compared} compared origins' hours together: {means}")
    return "\n".join(lines)
