"""Circuits: which sender -> receiver edges carry a task, scored fast, confirmed exactly, with intervals.

* :mod:`~headlens.analyses.circuits.graph` -- the edge graph (embeddings, heads, MLPs, logits; q/k/v, MLP and logits inputs).
* :mod:`~headlens.analyses.circuits.hooks` -- reader and sender hook points, the bridge flags, the additivity check.
* :mod:`~headlens.analyses.circuits.split` -- per-head q/k/v readers where attention runs inside Hugging Face (GPT-Neo, OPT, GPT-J).
* :mod:`~headlens.analyses.circuits.writes` -- what a sender's edge adds to a reader's copy; Gemma 2's post-attention norm recomputed.
* :mod:`~headlens.analyses.circuits.scores` -- EAP and EAP-IG estimates (per pair).
* :mod:`~headlens.analyses.circuits.exact` -- exact edge patching (per pair, batched, late-started).
* :mod:`~headlens.analyses.circuits.summary` -- normalised scores, bootstrap intervals, stability.
* :mod:`~headlens.analyses.circuits.faithfulness` -- circuits with every other edge corrupted; the curve and its areas.
* :mod:`~headlens.analyses.circuits.heldout` -- the pairs split: one part chooses the circuit, the other measures it.
* :mod:`~headlens.analyses.circuits.confirm` -- exact confirmation of an estimate's top and of a random sample; estimate against exact.
* :mod:`~headlens.analyses.circuits.run` -- :func:`run_circuit`: scores, circuit, faithfulness, exact confirmation.
* :mod:`~headlens.analyses.circuits.roc` -- edge ROC AUC against a known edge set.
* :mod:`~headlens.analyses.circuits.config` -- :class:`CircuitConfig`.
"""
