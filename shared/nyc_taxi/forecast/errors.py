"""Errors of the forecasting flow that say what is missing and how to get it."""


class NoDataInWindow(ValueError):
    """The requested window holds no weather for a model that uses it: nothing to train on."""
