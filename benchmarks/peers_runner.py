"""auto-circuit 1.0.1's ACDC and EAP on a headlens checkpoint, run inside the peers' venv (scripts/peers_venv.sh).

Not imported by headlens: ``benchmarks/circuits_vs_peers.py`` writes a request (``request.json`` and
``reference.pt``) and runs ``PEERS_PYTHON benchmarks/peers_runner.py REQUEST_DIR`` as a subprocess; this
script answers with ``REQUEST_DIR/answer.json``.  It needs only torch, transformers, TransformerLens 2.x and
auto-circuit (no headlens: auto-circuit cannot import next to TransformerLens 4.x).

The model.  The GPT-2 checkpoint headlens loads (``folder``) is read by transformers' GPT2LMHeadModel and
converted with TransformerLens' own GPT-2 weight conversion (``convert_gpt2_weights``) into a
HookedTransformer with the checkpoint's config and no processing of the weights (no LayerNorm folding,
no centring: the tracr checkpoints' norms are neutralised by eps 2**48 and weight 2**24, which folding would
push into every reader), with the hooks auto-circuit's factorised graph needs (``use_attn_result``,
``use_split_qkv_input``, ``use_hook_mlp_in``).  Before any scoring its logits on every clean and corrupt
prompt are compared with headlens' (``reference.pt``); beyond ``tolerance`` the answer says so and nothing
is scored.

The pairs are the benchmark's (same tokens, same answers: ``answers`` = the clean answer, ``wrong_answers``
= the corrupt one), one batch (ACDC reads only the first batch of its loader).  Methods:

* ``acdc``: ``acdc_prune_scores`` with the thresholds of auto-circuit's ``ACDC_PRUNE_ALGO`` (the one its
  ROC measurements use: tau in {1e-6, 1e-5, 1e-4, 1e-3}, KL-divergence faithfulness).  An edge's score is
  the smallest tau at which it was pruned; edges kept at every tau score ``inf`` in auto-circuit and are
  sent as :data:`KEPT` (above every tau), so a plain ``|score|`` ranking keeps them on top.
* ``eap``: ``edge_attribution_patching_prune_scores`` (answer logit difference).

Edge names (auto-circuit -> headlens' circuits graph): source ``Resid Start`` -> ``embed``, ``A{l}.{h}`` ->
``l.h``, ``MLP {l}`` -> ``mlp{l}``; destination ``A{l}.{h}.Q|K|V`` -> ``(l.h, q|k|v)``, ``MLP {l}`` ->
``(mlp{l}, mlp)``, ``Resid End`` (``blocks.{L-1}.hook_resid_post``) -> ``(logits, logits)``.  The two
graphs have the same edges (a sender feeds every later reader); the answer lists auto-circuit's count.
Where ``true_edges`` are given, auto-circuit's own ``measure_task_roc`` and ``measurements_auc`` give its
AUC of each method (``own_auc``), a cross-check of the mapping and of headlens' AUC of the same scores.

    PYTHONHASHSEED=0 .venv-peers/bin/python benchmarks/peers_runner.py REQUEST_DIR
"""

from __future__ import annotations

import json
import math
import sys
import time
from importlib.metadata import version
from pathlib import Path

#: auto-circuit's ACDC_PRUNE_ALGO thresholds (auto_circuit/prune_algos/prune_algos.py).
ACDC_TAO_EXPS = list(range(-6, -2))
ACDC_TAO_BASES = [1]
#: The score sent for an edge ACDC kept at every threshold (auto-circuit: inf).
KEPT = 1.0


def headlens_src(name: str) -> str:
    if name == "Resid Start":
        return "embed"
    if name.startswith("MLP "):
        return f"mlp{name.split()[1]}"
    if name.startswith("A"):
        return name[1:]
    raise ValueError(f"unknown auto-circuit source node {name!r}")


def headlens_dest(name: str) -> tuple[str, str]:
    if name == "Resid End":
        return "logits", "logits"
    if name.startswith("MLP "):
        return f"mlp{name.split()[1]}", "mlp"
    if name.startswith("A"):
        head, letter = name[1:].rsplit(".", 1)
        return head, letter.lower()
    raise ValueError(f"unknown auto-circuit destination node {name!r}")


def hooked_transformer(folder: str):
    """The checkpoint as a HookedTransformer (TransformerLens' GPT-2 conversion, weights unprocessed)."""
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    c = hf.config
    act = {"gelu_new": "gelu_new", "relu": "relu", "gelu": "gelu"}[c.activation_function]
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
        d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, act_fn=act, eps=c.layer_norm_epsilon,
        normalization_type="LN", positional_embedding_type="standard", original_architecture="GPT2LMHeadModel",
        default_prepend_bos=False, dtype=torch.float32, device="cpu", model_name=Path(folder).name,
        use_attn_result=True, use_split_qkv_input=True, use_hook_mlp_in=True,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(
        convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False, center_unembed=False,
        fold_value_biases=False, refactor_factored_attn_matrices=False,
    )  # fmt: skip
    return model.eval()


def main(folder_arg: str) -> None:
    import torch

    req_dir = Path(folder_arg)
    req = json.loads((req_dir / "request.json").read_text())
    torch.set_num_threads(int(req.get("threads") or torch.get_num_threads()))
    torch.manual_seed(0)
    answer: dict = {
        "versions": {d: version(d) for d in ("auto-circuit", "transformer-lens", "transformers", "torch")},
        "threads": torch.get_num_threads(),
        "methods": {},
    }
    out = req_dir / "answer.json"
    clean = torch.tensor(req["clean"], dtype=torch.long)
    corrupt = torch.tensor(req["corrupt"], dtype=torch.long)
    model = hooked_transformer(req["folder"])
    ref = torch.load(req_dir / "reference.pt")
    with torch.no_grad():
        diff = max(float((model(clean) - ref["clean"]).abs().max()), float((model(corrupt) - ref["corrupt"]).abs().max()))
    answer["logit_check"] = {"max_abs_diff": diff, "tolerance": req["tolerance"], "ok": diff <= req["tolerance"]}
    if not diff <= req["tolerance"]:
        out.write_text(json.dumps(answer, indent=1))
        return

    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.prune_algos.ACDC import acdc_prune_scores
    from auto_circuit.prune_algos.edge_attribution_patching import edge_attribution_patching_prune_scores
    from auto_circuit.utils.graph_utils import patchable_model

    pm = patchable_model(model, factorized=True, slice_output="last_seq", separate_qkv=True, device=torch.device("cpu"))
    answer["n_edges"] = len(pm.edges)
    answers = [torch.tensor([a]) for a in req["correct"]]
    wrong = [torch.tensor([b]) for b in req["incorrect"]]
    loader = PromptDataLoader(PromptDataset(clean, corrupt, answers, wrong), seq_len=None, diverge_idx=0,
                              batch_size=len(clean), shuffle=False)  # fmt: skip
    truth = {tuple(e) for e in req.get("true_edges") or []}
    for method in req["methods"]:
        t0 = time.perf_counter()
        if method == "acdc":
            scores = acdc_prune_scores(pm, loader, None, tao_exps=ACDC_TAO_EXPS, tao_bases=ACDC_TAO_BASES)
        elif method == "eap":
            scores = edge_attribution_patching_prune_scores(pm, loader, None, answer_diff=True)
        else:
            raise ValueError(f"unknown method {method!r}")
        wall = time.perf_counter() - t0
        rows = []
        for edge in pm.edges:
            s = float(edge.prune_score(scores))
            receiver, inp = headlens_dest(edge.dest.name)
            rows.append([headlens_src(edge.src.name), receiver, inp, KEPT if math.isinf(s) else s])
        res: dict = {"scores": rows, "wall_s": wall, "n_distinct": len({r[3] for r in rows})}
        if truth:
            res["own_auc"] = own_auc(pm, scores, truth)
        answer["methods"][method] = res
        out.write_text(json.dumps(answer, indent=1))
    out.write_text(json.dumps(answer, indent=1))


def own_auc(pm, scores, truth: set) -> float:
    """auto-circuit's own ROC (every edge count) and area of ``scores`` against ``truth`` (headlens names)."""
    from auto_circuit.metrics.area_under_curve import measurements_auc
    from auto_circuit.metrics.official_circuits.measure_roc import measure_task_roc

    official = {e for e in pm.edges if (headlens_src(e.src.name), *headlens_dest(e.dest.name)) in truth}
    points = measure_task_roc(pm, official, scores, all_edges=True)
    return float(measurements_auc(points, log_x=False, log_y=False, y_min=None, eps=0.0))


if __name__ == "__main__":
    main(sys.argv[1])
