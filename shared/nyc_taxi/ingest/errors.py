"""Errors that say which file, what is wrong and how to fix it."""


class NotPublishedYet(Exception):
    """The source answers 403/404 for this month: it is not out yet (a clean skip, not a failure)."""


class BadSourceFile(Exception):
    """A downloaded or landed file is not what the source publishes; nothing was loaded from it."""
