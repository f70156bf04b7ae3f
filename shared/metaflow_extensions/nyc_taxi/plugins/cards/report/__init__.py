"""The `report` card: Metaflow's blank card, rendered once when its step has finished.

Metaflow renders a card that can update while its step runs (the blank and the default card) in two
processes after the step, `card create` to render it and again to refresh it, each loading the flow;
a card whose content is complete when the step ends needs one. Used as ``@card(type="report")``, with
components added as to a blank card (``current.card[...]``). Found by Metaflow through its extension
namespace (``metaflow_extensions.<name>.plugins.cards``), installed with the project's package.
"""

from metaflow.cards import BlankCard


class ReportCard(BlankCard):
    type = "report"
    RUNTIME_UPDATABLE = False


CARDS = [ReportCard]
