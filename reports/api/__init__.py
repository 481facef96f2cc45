"""Studies as Python calls: ``census``, ``sinks``, ``capture``, ``verify``, ... each returning a
:class:`~headlens.reports.api.result.Result` (tables as DataFrames, ``save``, ``plot``,
``_repr_html_``); :func:`~headlens.reports.api.registry.load` reads a saved folder back.

The CLI commands, the report stages and the sweep task are a few lines over these calls.
"""
