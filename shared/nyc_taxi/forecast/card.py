"""The evaluation card: forecast vs actual for the busiest zones, and the error figures."""

from __future__ import annotations

from nyc_taxi.core.jobs import UPPER_BOUND
from nyc_taxi.core.zones import zones


def evaluation_card(card, forecasts: dict, actual: dict, metrics: dict, model_name: str, busiest: int = 4) -> None:
    from metaflow.cards import Markdown, Table, VegaChart

    names = {z.location_id: z.zone for z in zones()}
    totals: dict[int, int] = {}
    for (zone, _), count in actual.items():
        totals[zone] = totals.get(zone, 0) + count
    top = sorted(totals, key=totals.get, reverse=True)[:busiest]
    overall = metrics["overall"]
    card.append(Markdown(f"# Forecast vs actual — {model_name}"))
    if model_name in UPPER_BOUND:
        card.append(Markdown(f"*{model_name}: {UPPER_BOUND[model_name]}.*"))
    if not overall:
        card.append(Markdown("No actuals for the forecast hours yet: nothing to evaluate."))
        return
    wape = f", **WAPE {overall['wape']:.1%}**" if overall["wape"] is not None else ""
    card.append(
        Markdown(
            f"Over {overall['hours']} zone-hours ({overall['coverage']:.0%} of the forecast's): **MAE "
            f"{overall['mae']:.2f}**{wape}, bias {overall['bias']:+.2f} rides per zone-hour (forecast minus actual)"
        )
    )
    values = []
    for (zone, hour), predicted in sorted(forecasts.items(), key=lambda kv: kv[0][1]):
        if zone in top:
            label = f"{zone} {names.get(zone, '')}"
            values.append({"hour": hour.isoformat(), "zone": label, "series": "forecast", "rides": predicted})
            if (zone, hour) in actual:
                values.append(
                    {"hour": hour.isoformat(), "zone": label, "series": "actual", "rides": actual[(zone, hour)]}
                )
    card.append(VegaChart(forecast_vs_actual_chart(values)))
    rows = [
        [
            f"{zone} {names.get(zone, '')}",
            f"{metrics['per_zone'][zone]['mae']:.2f}",
            "-" if metrics["per_zone"][zone]["wape"] is None else f"{metrics['per_zone'][zone]['wape']:.1%}",
        ]
        for zone in top
        if zone in metrics["per_zone"]
    ]
    card.append(Table(rows, headers=["zone", "MAE", "WAPE"]))


SERIES = ["actual", "forecast"]  # one legend entry per line: actual solid, forecast dashed


def forecast_vs_actual_chart(values: list[dict]) -> dict:
    """Vega-Lite: one panel per zone, two panels a row (a card is about 1,000 px wide), and a legend
    above them that says which line is the forecast and which the actual."""
    # colour and dash encode the same field with the same legend, so Vega-Lite draws one legend for both
    legend = {"orient": "top", "labelFontSize": 13, "symbolStrokeWidth": 3}
    series = {"field": "series", "type": "nominal", "title": None, "scale": {"domain": SERIES}, "legend": legend}
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": values},
        # `columns` belongs to the facet chart, not to the facet field: inside the field Vega-Lite
        # ignores it and puts every panel in one row
        "columns": 2,
        "facet": {"field": "zone", "type": "nominal", "title": None},
        "spec": {
            "width": 300,
            "height": 160,
            "mark": "line",
            "encoding": {
                "x": {"field": "hour", "type": "temporal", "title": "New York local hour"},
                "y": {"field": "rides", "type": "quantitative", "title": "rides"},
                "color": series,
                "strokeDash": series,
            },
        },
    }
