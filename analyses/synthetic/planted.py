"""A GPT-2-shaped checkpoint whose attention heads are set by hand: ground truth for head detectors.

``build_planted_checkpoint`` writes a Hugging Face folder (``GPT2LMHeadModel`` weights, the real
GPT-2 tokenizer and ``planted.json``) for a 2-layer, 4-head model in which every weight is chosen
by construction: five heads have known roles (``PLANTED_ROLES``) and the other three have none
(zero QK, so exactly uniform causal attention).  MLPs are exactly zero.

Residual stream
---------------
The residual stream is built from orthogonal *feature slots*, placed in the ``d_model``
coordinates by a random (seeded) orthonormal basis orthogonal to the all-ones vector.  Every
residual vector is therefore mean-zero and each LayerNorm (weight 1, bias 0) only rescales its
input by ``sqrt(d_model) / ||x||``.  Token and position embeddings have fixed norms (1 each) and
live in different slots, so that scale is the same at every position of layer 0; at layer 1 the
residual also holds head 0.0's unit-norm output, plus the small outputs of the other heads.

With ``F = 8`` position frequencies and ``k = d_model / 4 - 2F`` (48 at ``d_model = 256``):

* ``tok`` (k): the token's identity, a random unit Gaussian code per vocabulary entry.  The tied
  unembedding reads this slot, so writing a token's code here raises that token's logit.
  Codes of random tokens are nearly orthogonal (cosine ~ N(0, 1/k)).
* ``name_gender``, ``pronoun_gender`` (1 each): +/- for male/female names and pronouns (half of
  those tokens' embedding norm; their ``tok`` part shrinks so the norm stays 1).
* ``noun_number``, ``pronoun_number`` (1 each): likewise +/- for singular/plural nouns and the
  pronouns ``it``, ``its`` / ``they``, ``them``, ``their`` (number agreement).
* ``pos`` (2F): a rotation-style position code ``(cos w_f i, sin w_f i)``, geometric periods from
  2.5 to 2.75 ``n_ctx``.  Rotating every pair by ``-w_f`` maps the code of ``i`` onto ``i - 1``,
  and ``mean_f cos(w_f d)`` is a kernel peaked at ``d = 0``.
* ``first``, ``rest`` (1 each): a flag on position 0, and its complement on every other position
  (their sum is a constant feature; position embeddings keep one norm).
* ``prev`` (k): written by head 0.0: the previous token's code.
* ``junk`` (16): where heads whose output nothing reads write a small random function of the
  attended token (so ablating them is well defined and nearly harmless).

Heads (logit sizes, after GPT-2's ``1/sqrt(d_head)``, are in ``Scales``):

* 0.0 previous-token: Q = rotated ``pos``, K = ``pos``; logits follow the kernel at
  ``d = i - 1 - j`` (margin 12 over every other key).  OV copies ``tok`` into ``prev``.
* 0.1 sink: Q = ``first + rest`` (a constant), K = ``first``: +12 on position 0.
* 0.2 duplicate-token: Q = K = ``tok`` (+60 for the same token) and a negative position kernel at
  ``d = i - j`` that holds the query's own position 4 logits under an earlier copy.
  With no earlier copy, the head stays on the query's own position.
* 1.0 induction, by K-composition with 0.0: Q = ``tok``, K = ``prev`` (+30 for a match), and a
  penalty of 10 on position 0, whose ``prev`` holds its own token (0.0 can only attend to itself
  there).  OV copies the attended ``tok`` into ``tok`` (norm 3), raising that token's logit.
* 1.1 referent: Q = ``pronoun_gender``, K = ``name_gender`` (and Q = ``pronoun_number``, K =
  ``noun_number`` in a second head dimension): a pronoun puts +12 on earlier names (nouns) that
  agree with it and -12 on those that do not; any other query has a zero query (uniform attention).
  The default word lists are those of :mod:`headlens.analyses.stimuli.referent_frames`, so every sentence of the
  referent stimulus set is resolvable.
* 0.3, 1.2, 1.3: zero QK; OV writes to ``junk``.

Modules: the shape, roles, sizes and :class:`PlantedSpec` are in
:mod:`headlens.analyses.synthetic.planted_spec`, the weights in
:mod:`headlens.analyses.synthetic.planted_weights`; this module checks the words against the
tokenizer and writes the folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from headlens.analyses.synthetic.planted_spec import (
    BOS_ID,
    N_HEAD,
    N_LAYER,
    PLANTED_ROLES,
    SCALES,
    VOCAB_SIZE,
    PlantedSpec,
    frequencies,
    kernel_gaps,
)
from headlens.analyses.synthetic.planted_weights import Layout, planted_weights, token_ids
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

__all__ = [
    "BOS_ID",
    "N_HEAD",
    "N_LAYER",
    "PLANTED_ROLES",
    "VOCAB_SIZE",
    "PlantedSpec",
    "build_planted_checkpoint",
]


def _design_summary(spec: PlantedSpec, group_ids: dict[str, list[int]]) -> dict[str, Any]:
    """The construction's constants, for ``planted.json``."""
    lay = Layout.for_spec(spec)
    prev_gap, self_gap = kernel_gaps(spec.n_ctx)
    return {
        "scales": asdict(SCALES),
        "token_code_dims": lay.token_dims,
        "position_periods": (2 * math.pi / frequencies(spec.n_ctx)).tolist(),
        "prev_kernel_gap": prev_gap,
        "self_kernel_gap": self_gap,
        "feature_slots": {name: [s.start, s.stop] for name, s in lay.slots.items()},
        "token_ids": group_ids,
        "bos_token_id": BOS_ID,
    }


def build_planted_checkpoint(folder: str | Path, spec: PlantedSpec | None = None) -> Path:
    """Write the planted model to ``folder`` (created if needed) and return it as a ``Path``.

    The folder holds ``GPT2LMHeadModel.save_pretrained`` output (tied embeddings), the real GPT-2
    tokenizer, and ``planted.json`` = ``{"spec": asdict(spec), "roles": PLANTED_ROLES,
    "design": ...}``.  The weights are a deterministic function of ``spec``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    spec = PlantedSpec() if spec is None else spec
    if not isinstance(spec, PlantedSpec):
        raise TypeError(f"spec must be a PlantedSpec, got {type(spec).__name__}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a directory")

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_offline_gpt2_tokenizer(tmp)
    if len(tokenizer) != VOCAB_SIZE:
        raise RuntimeError(f"expected the {VOCAB_SIZE}-entry GPT-2 tokenizer, got {len(tokenizer)} entries")
    group_ids = token_ids(tokenizer, spec)
    params = planted_weights(spec, group_ids)

    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=spec.n_ctx,
        n_embd=spec.d_model,
        n_layer=N_LAYER,
        n_head=N_HEAD,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        scale_attn_weights=True,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=BOS_ID,
    )
    model = GPT2LMHeadModel(config).eval()
    state = model.state_dict()
    unset = sorted(name for name, _ in model.named_parameters() if name not in params)
    if unset:  # every parameter is set by hand; a changed transformers layout would land here
        raise RuntimeError(f"the planted construction does not cover parameters {unset}")
    with torch.no_grad():
        for name, value in params.items():
            if name not in state or tuple(state[name].shape) != tuple(value.shape):
                raise RuntimeError(f"unexpected GPT-2 parameter layout at {name}")
            state[name].copy_(value.to(state[name].dtype))
    model.tie_weights()

    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bar
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    meta = {"spec": asdict(spec), "roles": dict(PLANTED_ROLES), "design": _design_summary(spec, group_ids)}
    (folder / "planted.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder
