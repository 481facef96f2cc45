"""The report page: HTML and Markdown renderings of a built report.

``html.py`` renders ``templates/report.html.j2`` (one template per section in
``templates/sections/``) with Jinja2, autoescape on, and inlines ``static/report.css`` and
``static/report.js``; ``view.py``, ``heatmaps.py`` and ``script_data.py`` build what the
templates and the script show, as plain data; ``figure.py`` cleans the pruning curve's SVG
before it is inlined; ``markdown.py`` writes ``report.md``.
"""
