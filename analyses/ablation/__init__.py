"""Which heads matter: the single-head ablation study, gradient attribution, layer-suffix replay
and pruning.

What they are measured on (evaluation sets, metrics, head masks, the text chosen) is on the
measuring floor, :mod:`headlens.analyses.measure`.
"""
