"""Hourly ride actuals and forecasts per pickup zone (run by the Metaflow flow)."""
