"""Errors of the forecasting flow that say what is missing and how to get it."""


class NoDataInWindow(ValueError):
    """The requested window holds no weather for a model that uses it: nothing to train on."""


class MonthNotJudged(ValueError):
    """A month of the window was committed to raw by a merge whose check never ran: not counted until the
    month's ingestion runs again and judges it."""
