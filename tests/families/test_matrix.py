"""The family matrix (tests/families/matrix.py): every study on every decoder family, against plain Hugging Face.

One tiny checkpoint per family per session (tests/conftest.py's ``family_model``, ``family_checkpoint``
and ``hf_eager``, shared with the other family tests).  The independent reference is a plain
``AutoModelForCausalLM`` with ``attn_implementation="eager"`` on the same token ids: its
``output_attentions``, a forward pre-hook on its attention output projection, its pattern
renormalised by hand.  A cell the matrix marks refused must be refused in one line; one it marks
failing must fail as recorded (so that the fix shows here first).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.ablation.pruning import kv_bytes_saved
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags
from headlens.analyses.heads.verify import verify_attention
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.sinks.intervene import removal_edits
from headlens.analyses.stimuli.natural import eval_text
from headlens.analyses.synthetic.families import WINDOW, family_config
from headlens.probes.attention import attention_spec
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.devices import TOLERANCES
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.interventions import score_edits
from tests.families.matrix import FAILURES, FAMILIES, REFUSALS, expected
from tests.helpers import assert_close

TEXT = (
    "Apple raised its price target. Down by the river bank, the water was calm, and by the time "
    "you reach the bank the river has settled what you meant."
)
TEXTS = [TEXT, "A short one."]


def _outcome(family: str, study: str, run: Callable[[], None]) -> None:
    """Run ``run`` and check it does what the matrix says: passes, is refused in one line, or fails as recorded."""
    state = expected(family, study)
    if state == "ok":
        run()
    elif state == "refused":
        with pytest.raises(UnsupportedModelError) as err:
            run()
        text = str(err.value)
        assert "\n" not in text and text.strip(), f"{family} {study}: refusal not one line: {text!r}"
        if (family, study) in REFUSALS:
            assert REFUSALS[(family, study)][0] in text, text
    else:
        kind, why = FAILURES[(family, study)]
        with pytest.raises(Exception) as err:  # the recorded type is checked by name below
            run()
        assert type(err.value).__name__ == kind, f"{family} {study}: expected the recorded {kind} ({why}), got {err.value!r}"


def _hf_attentions(hf, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return hf(ids[None], output_attentions=True).attentions


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_equals_hugging_face_eager(family, family_model, family_checkpoint, hf_eager):
    def run():
        model = family_model(family)
        cap = capture(model, TEXTS, CaptureConfig(what=("pattern",)))
        hf = hf_eager(family_checkpoint(family))
        assert cap.batch.lengths[0] > 2 * WINDOW  # long enough for the windows to matter
        for i, n in enumerate(cap.batch.lengths.tolist()):
            ref = _hf_attentions(hf, cap.batch.tokens[i, :n])
            for layer in range(model.n_layers):
                assert_close(cap.get(layer, "pattern")[i, :, :n, :n], ref[layer][0], "float32", f"{family} layer {layer} prompt {i}")

    _outcome(family, "capture", run)


@pytest.mark.parametrize("family", FAMILIES)
def test_verify_on_every_layer(family, family_model):
    def run():
        table = verify_attention(family_model(family), TEXTS)
        assert len(table) == family_model(family).n_layers and table["ok"].all(), table.to_string()
        assert (table[["max_err_pattern", "max_err_z", "max_outside_mask", "max_row_sum_err"]].to_numpy() < 1e-5).all()

    _outcome(family, "verify", run)


#: The attention output projection of a Hugging Face decoder layer: its input is the heads' z, concatenated.
_OUT_PROJ = re.compile(r"(^|\.)(h|layers|blocks)\.(?P<layer>\d+)\.(.*\.)?(o_proj|out_proj|c_proj|dense)$")


def _out_proj(hf, layer: int) -> torch.nn.Module:
    found = [
        module
        for name, module in hf.named_modules()
        if (m := _OUT_PROJ.search(name)) and int(m["layer"]) == layer and "att" in name and "mlp" not in name
    ]
    assert len(found) == 1, f"{type(hf).__name__}: {len(found)} attention output projections in layer {layer}"
    return found[0]


def _losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].double().transpose(1, 2), tokens[:, 1:], reduction="none").mean(1)


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_equals_a_hugging_face_hook(family, family_model, family_checkpoint, hf_eager):
    """Zero ablation of one head (headlens patches ``hook_z``) = zeroing its slice of the output projection's input."""

    def run():
        model = family_model(family)
        hf = hf_eager(family_checkpoint(family))
        data = text_eval_set(model.tokenizer, eval_text(), n_windows=2, window=24, prepend_bos=True, n_ctx=model.n_ctx, bos_id=model.bos_id)
        layer, head = 1, model.n_heads - 1
        result = run_ablation(model, data, AblationConfig(method="zero", heads=((layer, head),), attribution=False, n_bootstrap=0))
        d_head = attention_spec(model).layers[layer].d_head

        def zero_head(module, args):
            x = args[0].clone()
            x[..., head * d_head : (head + 1) * d_head] = 0
            return (x,)

        with torch.no_grad():
            clean = _losses(hf(data.tokens).logits, data.tokens)
            handle = _out_proj(hf, layer).register_forward_pre_hook(zero_head)
            try:
                ablated = _losses(hf(data.tokens).logits, data.tokens)
            finally:
                handle.remove()
        row = result.table.iloc[0]
        assert abs(result.masked_value - clean.mean().item()) <= 1e-5
        assert abs(row["value"] - ablated.mean().item()) <= 1e-5, (family, row["value"], ablated.mean().item())
        assert abs(row["delta"]) > 1e-5  # the ablation did something

    _outcome(family, "patching", run)


@pytest.mark.parametrize("family", FAMILIES)
def test_circuit_graph_additivity(family, family_model):
    def run():
        model = family_model(family)
        with edge_flags(model):
            check_edge_model(model, build_graph(model))

    _outcome(family, "circuits", run)


@pytest.mark.parametrize("family", FAMILIES)
def test_sink_removal_acts(family, family_model, family_checkpoint, hf_eager):
    """Layer 0 with key 0 removed from every head: the edited pattern is Hugging Face's with key 0 dropped and
    each row renormalised (``p[i, j] * (1 - ref[i, 0]) = ref[i, j]``), and key 0 gets nothing."""

    def run():
        model = family_model(family)
        tokens = capture(model, TEXTS[:1], CaptureConfig(what=("pattern",))).batch.tokens[:1, :24]
        seen: dict[str, torch.Tensor] = {}

        def grab(pattern, hook=None):
            seen["p"] = pattern.detach().clone()

        edits = removal_edits({0: range(model.n_heads)})
        with torch.inference_mode(), score_edits(model, edits), attached(model.bridge, [("blocks.0.attn.hook_pattern", grab)]):
            model.bridge(tokens)
        ref = _hf_attentions(hf_eager(family_checkpoint(family)), tokens[0])[0]
        edited = seen["p"]
        assert torch.all(edited[:, :, 1:, 0] == 0)
        assert_close(edited[:, :, 1:, 1:] * (1 - ref[:, :, 1:, :1]), ref[:, :, 1:, 1:], "float32", f"{family} sink removal")
        assert ref[:, :, 1:, 0].max() > 1e-3  # key 0 had weight to lose: the edit acts

    _outcome(family, "sinks", run)


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_bytes_counted_by_hand(family, family_model):
    """Pruning every query head of one KV group frees that KV head: 2 (K and V) x d_head x 1,000 tokens x 4 bytes."""

    def run():
        model = family_model(family)
        config = family_config(family)
        n_kv = 1 if getattr(config, "multi_query", False) else getattr(config, "num_key_value_heads", None) or model.n_heads
        assert model.n_kv_heads == n_kv, (family, model.n_kv_heads, n_kv)
        group = model.n_heads // n_kv
        one_kv = 2 * model.d_head * 1000 * 4
        assert kv_bytes_saved(model, {(0, h) for h in range(group - 1)}) == (0, 0)  # one query head still reads it
        assert kv_bytes_saved(model, {(0, h) for h in range(group)}) == (1, one_kv)
        every = {(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)}
        assert kv_bytes_saved(model, every) == (model.n_layers * n_kv, model.n_layers * n_kv * one_kv)

    _outcome(family, "kv", run)


@pytest.fixture(scope="session")
def half_pair(family_checkpoint):
    """``half_pair(name)``: (headlens model, Hugging Face eager model) of the family's checkpoint loaded in bfloat16."""
    from transformers import AutoModelForCausalLM

    from headlens.probes.loading import load_model

    loaded: dict[str, tuple] = {}

    def get(family: str):
        if family not in loaded:
            folder = str(family_checkpoint(family))
            hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.bfloat16).eval()
            loaded[family] = (load_model(model=folder, device="cpu", dtype="bfloat16"), hf)
        return loaded[family]

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_half_precision(family, half_pair):
    """A bfloat16 load captures finite patterns equal to Hugging Face eager's in bfloat16, within the dtype's
    pattern tolerance (``probes.devices.TOLERANCES``)."""

    def run():
        model, hf = half_pair(family)
        assert model.dtype == torch.bfloat16
        cap = capture(model, TEXTS, CaptureConfig(what=("pattern",)))
        for i, n in enumerate(cap.batch.lengths.tolist()):
            ref = _hf_attentions(hf, cap.batch.tokens[i, :n])
            for layer in range(model.n_layers):
                got = cap.get(layer, "pattern")[i, :, :n, :n].float()
                assert torch.isfinite(got).all()
                err = float((got - ref[layer][0].float()).abs().max())
                assert err <= TOLERANCES["bfloat16"]["pattern"], (family, layer, i, err)

    _outcome(family, "half", run)


def test_real_weights_capture_and_verify(smollm2_model):
    """Real pretrained weights (SmolLM2-135M, a Llama; the GGUF the suite already uses): captured patterns equal
    Hugging Face eager's on all 30 layers, and ``verify`` passes on every layer."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(smollm2_model.gguf.checkpoint, dtype=torch.float32, attn_implementation="eager").eval()
    cap = capture(smollm2_model, TEXTS[:1], CaptureConfig(what=("pattern",)))
    n = int(cap.batch.lengths[0])
    ref = _hf_attentions(hf, cap.batch.tokens[0, :n])
    assert len(ref) == smollm2_model.n_layers == 30
    for layer in range(smollm2_model.n_layers):
        assert_close(cap.get(layer, "pattern")[0, :, :n, :n], ref[layer][0], "float32", f"smollm2 layer {layer}")
    table = verify_attention(smollm2_model, TEXTS[:1])
    assert len(table) == 30 and table["ok"].all(), table.to_string()
