"""The demo model's training recipe (:mod:`headlens.analyses.demo.train`), its data
(:mod:`headlens.analyses.demo.data`) and the replay of a training log (:mod:`headlens.analyses.demo.replay`).

It lives in ``analyses`` because it watches the heads it trains with the census's
stimuli; the shipped checkpoint itself is ``probes/demo/model`` (:mod:`headlens.probes.demo`).
The command line is ``headlens demo train|card|replay``. Importing this package is cheap.
"""
