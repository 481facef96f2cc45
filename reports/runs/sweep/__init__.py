"""``headlens sweep``: one census per (model, revision or checkpoint folder), run as Ray tasks.

* :mod:`~headlens.reports.runs.sweep.plan`: the task list (models x revisions, folders of
  checkpoints), each task's step and folder name, the sweep settings;
* :mod:`~headlens.reports.runs.sweep.task`: what one task does (load, census, held-out loss,
  write its folder): the library calls ``headlens detect`` makes, so results are equal;
* :mod:`~headlens.reports.runs.sweep.engine`: the tasks as jobs of :mod:`headlens.probes.cluster`'s pool
  (local Ray or ``--address``; Ctrl-C and SIGTERM stop it in order, exit 130), skipping finished
  tasks, collecting failures as one line each;
* :mod:`~headlens.reports.runs.sweep.gather`: the tasks' tables as one partitioned Parquet dataset.

Ray and pyarrow are the ``sweep`` extra (``pip install 'headlens[sweep]'``); nothing here
imports them at module level.
"""
