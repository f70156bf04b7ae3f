"""The lineage site: everything the records know, as static pages a browser opens from ``file://``.

``collect`` reads DataHub Lite, the OpenLineage events, Iceberg's snapshot history and the Metaflow
cards into one ``SiteData``; ``drawing`` has Graphviz lay out every graph on it; ``pages`` arranges it
for the Jinja templates in ``templates/``, which hold the HTML; ``build`` writes the site (pages, ``data.js`` for the scripts, the assets); ``serve``
serves it on 127.0.0.1 and rebuilds it when new records arrive.

    bash run lineage --site [--out DIR]       # <state>/lineage/site/index.html
    bash run lineage serve [--port N]
"""
