"""The full report: settings, stages and the build that joins them.

``settings.py`` (:class:`ReportSettings`), ``markers.py`` (stage markers, resume keys, the
model's fingerprint), ``context.py`` (:class:`Stage`, :class:`StageContext`), one
``stage_*.py`` per stage (or family of stages) and ``stages.py`` (their registry, in run
order: how to add a stage is in its docstring), ``result.py`` (:class:`Report`), ``join.py``
(one row per head from every stage), ``folder.py`` (the output folder and its manifest),
``build.py`` (:func:`build_report`, :func:`load_report`: the orchestration).
"""
