"""The report page: HTML and Markdown renderings of a built report, from one context.

``view.py`` builds the context both are rendered from (:func:`~headlens.reports.render.page.view.page_context`,
plain data; ``heatmaps.py``, ``design_view.py``, ``evidence_view.py``, ``markdown_view.py`` build
parts of it, ``script_data.py`` the page script's data).  ``html.py`` renders
``templates/report.html.j2`` with Jinja2, autoescape on, and inlines ``static/report.css`` and
``static/report.js``; ``markdown.py`` renders ``templates/report.md.j2`` (the ``md`` filter
escapes).  Each has one template per section in ``templates/sections/`` (``*.html.j2``,
``*.md.j2``).  ``figure.py`` cleans the pruning curve's SVG before it is inlined.
"""
