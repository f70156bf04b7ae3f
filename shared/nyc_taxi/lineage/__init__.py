"""Lineage, in two rooms: ``write`` (what runs record: the neutral step report, the OpenLineage and
DataHub builders, the local files and their delivery to servers) and ``read`` (what people ask: the
DataHub Lite store, the graph, runs, traces, renderers)."""
