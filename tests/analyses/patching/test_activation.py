"""Activation patching: exact against TransformerLens and against a plain Hugging Face pre-hook
on every family; the normalisation; bad task files refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headlens.analyses.patching.activation import PatchConfig, run_patching
from headlens.analyses.patching.builtin import builtin_task, induction_task
from headlens.analyses.patching.effects import normalised_effects, task_gap
from headlens.analyses.patching.pairs import pair_task
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.errors import InputError
from tests.e2e.test_families_commands import OUT_PROJ

#: Agreement with TransformerLens' own patching, and with the Hugging Face reference (logit differences).
EXACT_TOL = 1e-5


def _tl_per_item(model, task, direction: str) -> torch.Tensor:
    """TransformerLens' get_act_patch_attn_head_out_all_pos on the bridge, per pair: [layer, head, item]."""
    from transformer_lens.patching import get_act_patch_attn_head_out_all_pos

    last = task.lengths - 1
    rows = torch.arange(len(task))

    def metric(logits):
        final = logits[rows, last]
        return final[rows, task.correct] - final[rows, task.incorrect]

    source, target = (task.clean, task.corrupt) if direction == "denoising" else (task.corrupt, task.clean)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(source)
        result = get_act_patch_attn_head_out_all_pos(model.bridge, target, cache, metric, reduce="none")
    return result.values.double()


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_exact_patching_equals_transformer_lens(tiny_model, direction):
    task = induction_task(tiny_model, n=6, T=10, seed=3)
    result = run_patching(tiny_model, task, PatchConfig(directions=(direction,), n_resamples=0, batch_size=4))
    ours = torch.from_numpy(result.per_item[direction]).view(tiny_model.n_layers, tiny_model.n_heads, len(task))
    theirs = _tl_per_item(tiny_model, task, direction)
    assert float((ours - theirs).abs().max()) <= EXACT_TOL
    assert float((theirs - theirs.mean(-1, keepdim=True)).abs().max()) > EXACT_TOL  # not a constant


def _hf_patched_ld(hf, family, task, layer, head, d_head, direction):
    source, target = (task.clean, task.corrupt) if direction == "denoising" else (task.corrupt, task.clean)
    proj = OUT_PROJ[family](hf, layer)
    got = []
    handle = proj.register_forward_pre_hook(lambda m, a: got.append(a[0].detach().clone()))
    try:
        with torch.no_grad():
            hf(source)
    finally:
        handle.remove()
    sl = slice(head * d_head, (head + 1) * d_head)

    def pre(module, args):
        x = args[0].clone()
        x[..., sl] = got[0][..., sl].to(x.dtype)
        return (x,)

    handle = proj.register_forward_pre_hook(pre)
    try:
        with torch.no_grad():
            logits = hf(target).logits
    finally:
        handle.remove()
    rows = torch.arange(len(task))
    final = logits[rows, task.lengths - 1].double()
    return final[rows, task.correct] - final[rows, task.incorrect]


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_equals_a_hugging_face_pre_hook_on_every_family(family, family_model, family_checkpoint, hf_eager):
    from headlens.probes.attention import attention_spec

    model = family_model(family)
    hf = hf_eager(family_checkpoint(family))
    task = induction_task(model, n=3, T=8, seed=1)
    d_head = attention_spec(model).layers[0].d_head
    heads = ((0, 1), (model.n_layers - 1, model.n_heads - 1))
    result = run_patching(model, task, PatchConfig(heads=heads, n_resamples=0, batch_size=2))
    for direction in ("denoising", "noising"):
        for i, (layer, head) in enumerate(heads):
            ref = _hf_patched_ld(hf, family, task, layer, head, d_head, direction)
            ours = torch.from_numpy(result.per_item[direction][i])
            scale = max(1.0, float(ref.abs().max()))  # float32 rounding grows with the logits' size
            assert float((ours - ref).abs().max()) <= EXACT_TOL * scale, (family, direction, layer, head)


def test_per_position_patching_changes_nothing_before_the_first_differing_token(tiny_model):
    task = induction_task(tiny_model, n=4, T=8, seed=2)
    per = run_patching(tiny_model, task, PatchConfig(heads=((0, 0),), per_position=True, directions=("denoising",), n_resamples=0))
    width = int(task.lengths.max())
    assert list(per.table["pos"]) == list(range(width))
    changed = (task.clean != task.corrupt).any(0).nonzero().flatten().tolist()
    unchanged = list(range(min(changed)))
    assert unchanged and len(unchanged) < width
    # before the first token that differs, the clean and corrupted z are the same: nothing changes
    corrupt_mean = per.table["denoising_metric"].iloc[unchanged].to_numpy()
    assert np.allclose(corrupt_mean, corrupt_mean[0], atol=EXACT_TOL)
    assert np.allclose(per.table["denoising"].iloc[unchanged], 0.0, atol=EXACT_TOL)
    assert float(per.table["denoising"].abs().max()) > 0.01  # and some position does matter


def test_normalised_effect_is_zero_at_corrupt_and_one_at_clean():
    rng = np.random.default_rng(0)
    clean, corrupt = rng.normal(5, 1, 30), rng.normal(0, 1, 30)
    gap = task_gap("logit-diff", clean, corrupt, n_resamples=200)
    half = (clean + corrupt) / 2 + rng.normal(0, 1, 30)
    eff, low, high = normalised_effects(np.stack([corrupt, clean, half]), clean, corrupt, gap, n_resamples=200)
    assert eff[:2] == pytest.approx([0.0, 1.0])
    assert eff[2] == pytest.approx(np.mean(half - corrupt) / np.mean(clean - corrupt))
    assert low[2] < eff[2] < high[2] and high[2] - low[2] > 0.05


def test_a_task_the_model_gets_wrong_is_said_not_divided_by_zero():
    rng = np.random.default_rng(1)
    clean = rng.normal(0, 1, 20)
    corrupt = clean + rng.normal(0, 0.01, 20)  # no gap
    gap = task_gap("logit-diff", clean, corrupt, n_resamples=200)
    assert not gap.defined and gap.reason is not None and "task" in gap.reason
    eff, _, _ = normalised_effects(np.stack([clean]), clean, corrupt, gap)
    assert np.isnan(eff).all()
    backwards = task_gap("logit-diff", corrupt - 3, corrupt, n_resamples=200)
    assert backwards.reason is not None and "does not do the task" in backwards.reason


def _write(tmp_path, rows):
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


GOOD = {
    "clean": "When Mary and John went out, John gave it to",
    "corrupt": "When Mary and John went out, Tom gave it to",
    "correct": " Mary",
    "incorrect": " John",
    "note": "ignored",
}


def test_task_file_read_and_bad_lines_refused_naming_the_line(tiny_model, tmp_path):
    task = pair_task(tiny_model, _write(tmp_path, [GOOD, GOOD]))
    assert len(task) == 2 and (task.clean != task.corrupt).sum() == 2
    cases = [
        ({**GOOD, "corrupt": "When Mary and John went out, Tom Smith gave it to"}, "same token length"),
        ({**GOOD, "correct": " Maryanne Smith"}, "not one"),
        ("{not json", "not valid JSON"),
        ({**GOOD, "clean": ""}, '"clean"'),
    ]
    for bad, words in cases:
        with pytest.raises(InputError) as info:
            pair_task(tiny_model, _write(tmp_path, [GOOD, bad]))
        message = str(info.value)
        assert ":2:" in message and words in message and "\n" not in message


def test_builtin_tasks_are_pairs_of_equal_length(tiny_model):
    for name in ("induction", "names", "ioi", "referent"):
        task = builtin_task(tiny_model, name, n=8)
        assert len(task) == 8
        assert task.clean.shape == task.corrupt.shape
        assert bool((task.clean != task.corrupt).any(1).all())  # every pair differs
        assert bool((task.correct != task.incorrect).all())
