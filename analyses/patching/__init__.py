"""Causal evidence about heads: activation patching, path patching, attribution patching,
direct logit attribution, and the evidence each census role is tested by.

* :mod:`~headlens.analyses.patching.pairs` -- tasks of (clean, corrupted) pairs and their metric;
  :mod:`~headlens.analyses.patching.builtin` -- the built-in tasks (induction, names, referent).
* :mod:`~headlens.analyses.patching.runs` -- cached runs and batched patched forwards.
* :mod:`~headlens.analyses.patching.effects` -- the normalised metric (0 corrupted .. 1 clean) and its interval.
* :mod:`~headlens.analyses.patching.activation` -- per-head activation patching (denoising, noising).
* :mod:`~headlens.analyses.patching.path` -- path patching (sender head -> receiver head's q, k or v).
* :mod:`~headlens.analyses.patching.attribution` -- attribution patching (first-order, never exact) and its agreement with exact patching.
* :mod:`~headlens.analyses.patching.dla` -- direct logit attribution per head.
* :mod:`~headlens.analyses.patching.evidence` -- each census role tested by the intervention it predicts.
"""
