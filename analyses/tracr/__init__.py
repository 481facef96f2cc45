"""tracr-compiled models in headlens: compile a RASP program, convert it to a GPT-2 checkpoint, know its circuit.

* :mod:`~headlens.analyses.tracr.programs` -- the programs by name (tracr's library), vocabulary, length, causal semantics.
* :mod:`~headlens.analyses.tracr.compile` -- tracr's compile passes, kept open: weights and each block's residual reads/writes.
* :mod:`~headlens.analyses.tracr.convert` -- the GPT-2 checkpoint computing the same function (norms neutralised).
* :mod:`~headlens.analyses.tracr.ground_truth` -- each head's and MLP's job and the true edges.
* :mod:`~headlens.analyses.tracr.agreement` -- the checkpoint against RASP's own evaluation on every input.
* :mod:`~headlens.analyses.tracr.build` -- :func:`build_tracr_model`, all of the above into one folder.

tracr and jax come with the ``circuits-bench`` extra and are imported only inside functions that compile.
"""
