"""The demo model's training recipe (:mod:`analyses.demo.train`), its data
(:mod:`analyses.demo.data`) and the replay of a training log (:mod:`analyses.demo.replay`).

It lives in ``analyses`` because it watches the heads it trains with the census's
stimuli; the shipped checkpoint itself is ``probes/demo/model`` (:mod:`probes.demo`).
The command line is ``headlens demo train|card|replay``. Importing this package is cheap.
"""
