"""Models compared on the forecasts they made from the same origins, as the scores table holds them
(``yellow_rides_forecast_scores``): WAPE by origin and model, and which model wins how often. What
`bash run backtest` prints and the lineage site's Backtests page shows.

An origin is compared only where every model has a score over its whole horizon (coverage 1), and the
same zone-hours (the same first and last hour, as many zone-hours: a model trained on another lookback may
know other zones): a model scored on other zone-hours than the rest would be judged on other demand. With one model there is nothing to compare: no winner."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from nyc_taxi.core import datasets as d
from nyc_taxi.core.settings import Settings, get_settings

SCORES = d.YELLOW_RIDES_FORECAST_SCORES
TIE = "tie"


@dataclass(frozen=True)
class Comparison:
    models: tuple[str, ...]
    origins: tuple[dt.datetime, ...]  # oldest first
    scores: dict[tuple[str, dt.datetime], dict]  # (model, origin) -> its row of the scores table

    def score(self, model: str, origin: dt.datetime) -> dict | None:
        return self.scores.get((model, origin))

    def comparable(self, origin: dt.datetime) -> bool:
        """Two models or more, each with a score of the origin over its whole horizon, the same zone-hours."""
        scores = [self.score(m, origin) for m in self.models]
        return (
            len(self.models) > 1
            and all(s is not None and s["coverage"] == 1 and s["wape"] is not None for s in scores)
            and len({(s["first_hour"], s["last_hour"], s["forecast_zone_hours"]) for s in scores}) == 1
        )

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


def of_rows(rows: list[dict], origins: list[dt.datetime] | None = None, models: tuple[str, ...] | None = None):
    """The comparison of score rows (the scores table's) of ``models`` at ``origins`` (default: all of them)."""
    scores = {(r["model_name"], r["as_of_datetime"]): r for r in rows}
    models = tuple(dict.fromkeys(models or sorted({m for m, _ in scores})))
    origins = sorted(origins or {o for _, o in scores})
    return Comparison(models, tuple(origins), {k: v for k, v in scores.items() if k[0] in models and k[1] in origins})


def compare(
    settings: Settings | None = None,
    origins: list[dt.datetime] | None = None,
    models: tuple[str, ...] | None = None,
) -> Comparison:
    """The scores table's comparison of ``models`` at ``origins`` (default: every model and origin it holds)."""
    from pyiceberg.exceptions import NoSuchTableError

    from nyc_taxi.core.catalog import load_table

    settings = settings or get_settings()
    try:
        rows = load_table(SCORES, settings).scan().to_arrow().to_pylist()
    except NoSuchTableError:  # nothing scored yet
        rows = []
    return of_rows(rows, origins, models)


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
        lines.append(line)
    return lines


def render(comparison: Comparison) -> str:
    """WAPE (and MAE) by origin and model, the winner of each origin, and how often each model won."""
    if not comparison.models or not comparison.origins:
        return "no scores yet: run the flow for an origin whose hours are loaded (bash run backtest)"
    width = max(16, *(len(m) for m in comparison.models)) + 2
    header = "origin            " + "".join(f"{m:<{width}}" for m in comparison.models) + "best"
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
            cells.append(f"{cell:<{width}}")
        winner = comparison.winner(origin) if len(comparison.models) > 1 else ""
        lines.append(
            f"{origin:%Y-%m-%d %H:%M}  " + "".join(cells) + (winner if winner is not None else "not comparable")
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
