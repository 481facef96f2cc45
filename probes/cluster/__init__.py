"""Work on Ray: the one engine that runs headlens' jobs on a local Ray or a cluster.

* :mod:`~headlens.probes.cluster.pool`: a pool of workers, each holding what its ``setup`` builds once (a model),
  running jobs; a lost worker's job reruns on another;
* :mod:`~headlens.probes.cluster.session`: Ray started or joined (``address``: ``auto``, ``HOST:PORT``,
  ``$RAY_ADDRESS``, or a local Ray) and shut down in order;
* :mod:`~headlens.probes.cluster.interrupts`: Ctrl-C and SIGTERM recorded while Ray runs and acted on where stopping
  is safe;
* :mod:`~headlens.probes.cluster.journal`: a JSONL journal of finished jobs, so that a rerun runs only the missing ones.

Ray is the ``sweep`` extra (``pip install 'headlens[sweep]'``); nothing here imports it at module level.
"""

from __future__ import annotations

from headlens.probes.cluster.journal import Journal
from headlens.probes.cluster.pool import Cluster, Finished, Job, PoolOutcome, run_pool

__all__ = ["Cluster", "Finished", "Job", "Journal", "PoolOutcome", "run_pool"]
