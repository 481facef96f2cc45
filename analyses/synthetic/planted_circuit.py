"""A planted checkpoint whose induction circuit is known edge by edge, with loud distractors: ground truth for edge scores.

Built on the planted model (:mod:`headlens.analyses.synthetic.planted`): the previous-token
head 0.0 (position QK, OV copying the token's code into the ``prev`` slot) and the induction
head 1.0 (Q = the current token's code, K = ``prev``, OV copying the attended token's code into
``tok``, which the tied unembedding reads) are kept.  Four heads become **distractors**: 0.2
(duplicate-token: it attends to an earlier copy of the current token, or to itself), 0.3, 1.2
and 1.3 (each attending to its own position by the position kernel) copy the current token's
code, at norm :data:`DISTRACTOR_NORM` each, through one shared isometry into a slot of the
stream that no weight reads (orthogonal to every other feature).  Their outputs are larger than
any head of the circuit's, they differ between clean and corrupted inputs wherever the tokens
do, and they change nothing: because every token code has one norm and every distractor writes
the same image of the same code, each position's residual norm (and so each LayerNorm's scale)
is the same on every input.  The layer-1 heads' weights are rescaled for the larger norm so the
induction head's logits stay as designed.  MLPs are zero.

On the built-in induction task (:func:`headlens.analyses.patching.builtin.induction_task`:
``r + r[:m]``, corrupted by changing ``r[m-1]`` in the first copy) the logit difference at the
last position flows through exactly :data:`PLANTED_CIRCUIT_EDGES`:

* ``embed -> 0.0 v``: at position ``m``, head 0.0 reads the token at ``m - 1`` (changed);
* ``0.0 -> 1.0 k``: the key at position ``m`` is that token's code (K-composition);
* ``1.0 -> logits``: the induction head writes ``r[m]``'s code at the last position.

Every other edge carries at most the softmax leakage of the construction (~1e-5 of the gap), with
one kind of exception: patching a single distractor's input alone breaks the equal images (its
output no longer matches the others'), so the residual norm moves a little (``embed -> 0.2 v``:
about 6% of the gap, against ~100% for each true edge).
First-order estimates can still score the distractors: their output difference has a component
along each reader's residual, which the LayerNorm's gradient sees (the point of the test).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from headlens.analyses.synthetic.planted_spec import (
    BOS_ID,
    N_FREQ,
    N_HEAD,
    N_LAYER,
    SCALES,
    VOCAB_SIZE,
    PlantedSpec,
    frequencies,
    kernel_gaps,
)
from headlens.analyses.synthetic.planted_weights import Layout, planted_weights, token_ids
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

__all__ = ["PLANTED_CIRCUIT_EDGES", "DISTRACTORS", "DISTRACTOR_NORM", "build_planted_circuit"]

#: The edges the task's behaviour flows through, as ``(sender, receiver, input)``.
PLANTED_CIRCUIT_EDGES: frozenset[tuple[str, str, str]] = frozenset(
    {("embed", "0.0", "v"), ("0.0", "1.0", "k"), ("1.0", "logits", "logits")}
)
#: Heads with large outputs that nothing reads.
DISTRACTORS: tuple[str, ...] = ("0.2", "0.3", "1.2", "1.3")
#: Norm of each distractor's output (head 0.0 writes 1, head 1.0 writes 3).
DISTRACTOR_NORM = 4.0
#: Head 0.3, 1.2, 1.3: attention logit margin of the own position over every other key.
SELF_MARGIN = 12.0


def _basis(spec: PlantedSpec, lay: Layout) -> torch.Tensor:
    """The planted construction's orthonormal basis of the mean-zero subspace, every column (its first draw)."""
    gen = torch.Generator().manual_seed(spec.seed)
    raw = torch.randn(spec.d_model, spec.d_model, generator=gen, dtype=torch.float64)
    raw[:, 0] = 1.0
    return torch.linalg.qr(raw)[0][:, 1:]


def _circuit_params(spec: PlantedSpec, group_ids: dict[str, list[int]], norm: float) -> dict[str, torch.Tensor]:
    params = planted_weights(spec, group_ids)
    lay = Layout.for_spec(spec)
    d, dh, k = spec.d_model, spec.d_model // N_HEAD, lay.token_dims
    full = _basis(spec, lay)
    basis = full[:, : lay.n_features]
    wte = params["transformer.wte.weight"]
    if float((wte - wte @ basis @ basis.T).abs().max()) > 1e-9:  # the basis must be the planted model's own
        raise RuntimeError("the planted basis could not be reproduced")
    if full.shape[1] < lay.n_features + k:
        raise ValueError(f"d_model={d} leaves no room for the distractors' slot of {k} dims")
    sink = full[:, lay.n_features : lay.n_features + k]  # the unread slot
    tok, pos = basis[:, lay["tok"]], basis[:, lay["pos"]]
    rot_power = SCALES.position_norm**2 * (1.0 - SCALES.flag_share)
    _, self_gap = kernel_gaps(spec.n_ctx)
    ln0 = math.sqrt(d) / math.hypot(SCALES.token_norm, SCALES.position_norm)
    norm1_old = math.sqrt(SCALES.token_norm**2 + SCALES.position_norm**2 + SCALES.prev_norm**2)
    ln1_old = math.sqrt(d) / norm1_old
    ln1 = math.sqrt(d) / math.sqrt(norm1_old**2 + (2 * norm) ** 2)  # two layer-0 distractors write the same image

    def qk_self(ln_gain: float) -> float:
        return math.sqrt(SELF_MARGIN / self_gap / rot_power * math.sqrt(dh)) / ln_gain

    for layer in range(N_LAYER):
        prefix = f"transformer.h.{layer}."
        c_attn, c_proj = params[prefix + "attn.c_attn.weight"], params[prefix + "attn.c_proj.weight"]
        if layer == 1:
            c_attn *= ln1_old / ln1  # every layer-1 map divided by the LayerNorm gain it was designed for
        gain = ln0 if layer == 0 else ln1
        for name in DISTRACTORS:
            lyr, head = (int(x) for x in name.split("."))
            if lyr != layer:
                continue
            cols = [slice(i * d + head * dh, i * d + (head + 1) * dh) for i in range(3)]
            if name != "0.2":  # 0.2 keeps its duplicate-token QK
                w = qk_self(gain)
                c_attn[:, cols[0]] = 0.0
                c_attn[:, cols[1]] = 0.0
                c_attn[:, cols[0]][:, k : k + 2 * N_FREQ] = w * pos
                c_attn[:, cols[1]][:, k : k + 2 * N_FREQ] = w * pos
            c_attn[:, cols[2]] = 0.0
            c_attn[:, cols[2]][:, :k] = tok / (gain * SCALES.token_norm)
            c_proj[head * dh : (head + 1) * dh, :] = 0.0
            c_proj[head * dh : head * dh + k, :] = norm * sink.T
    return params


def build_planted_circuit(folder: str | Path, spec: PlantedSpec | None = None, *, distractor_norm: float = DISTRACTOR_NORM) -> Path:
    """Write the planted-circuit checkpoint to ``folder`` and return it (``planted_circuit.json`` beside the weights)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    spec = spec or PlantedSpec()
    folder = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_offline_gpt2_tokenizer(tmp)
    params = _circuit_params(spec, token_ids(tokenizer, spec), distractor_norm)
    config = GPT2Config(
        vocab_size=VOCAB_SIZE, n_positions=spec.n_ctx, n_embd=spec.d_model, n_layer=N_LAYER, n_head=N_HEAD,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
        scale_attn_weights=True, tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=BOS_ID,
    )  # fmt: skip
    model = GPT2LMHeadModel(config).eval()
    state = model.state_dict()
    with torch.no_grad():
        for name, value in params.items():
            state[name].copy_(value.to(state[name].dtype))
    model.tie_weights()
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stderr(io.StringIO()):
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    meta = {
        "spec": asdict(spec),
        "circuit_edges": sorted(PLANTED_CIRCUIT_EDGES),
        "distractors": list(DISTRACTORS),
        "distractor_norm": distractor_norm,
        "frequencies": frequencies(spec.n_ctx).tolist(),
    }
    (folder / "planted_circuit.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder
