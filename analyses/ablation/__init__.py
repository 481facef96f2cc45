"""Which heads matter: ablation and pruning.

``data`` (re-exports ``evalset``, ``embedding``, ``metrics``): what is measured and how;
``masks``: the head-mask format (read here, written by the commands); ``hooks``: replacement
values and the ``hook_z`` hooks; ``suffix``: running the blocks from one layer on; ``runs``:
baseline and ablated forwards; ``gradients``: attribution and Michel importance; ``study``: the
single-head table; ``pruning``: iterative pruning; ``records``: the resume protocol the two
sweeps report their finished work to (the file journal is :mod:`headlens.reports.journal`).
"""
