"""The family matrix, continued: ablation against plain Hugging Face, KV-cache arithmetic, every analysis.

Each family's zero and mean ablation (on ``hook_z``) is checked against an independent edit:
a forward pre-hook on the Hugging Face output projection's input.  Then every analysis runs on
every family's tiny checkpoint: the quick report once per family (shared, conftest.family_report)
and the parts of the sink study it leaves out; the one-study commands' CLI layer on one family.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.ablation.pruning import kv_bytes_saved
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.stimuli.natural import eval_text
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.attention import attention_spec
from headlens.reports.cli.main import cli

#: The Hugging Face output projection (input = concatenated heads, i.e. hook_z) of layer L.
OUT_PROJ = {
    "gpt2": lambda m, L: m.transformer.h[L].attn.c_proj,
    "llama": lambda m, L: m.model.layers[L].self_attn.o_proj,
    "qwen2": lambda m, L: m.model.layers[L].self_attn.o_proj,
    "mistral": lambda m, L: m.model.layers[L].self_attn.o_proj,
    "gemma": lambda m, L: m.model.layers[L].self_attn.o_proj,
    "gemma2": lambda m, L: m.model.layers[L].self_attn.o_proj,
    "gpt_neox": lambda m, L: m.gpt_neox.layers[L].attention.dense,
    "gpt_neo": lambda m, L: m.transformer.h[L].attn.attention.out_proj,
    "opt": lambda m, L: m.model.decoder.layers[L].self_attn.out_proj,
    "gptj": lambda m, L: m.transformer.h[L].attn.out_proj,
}


def _losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].double().transpose(1, 2), tokens[:, 1:], reduction="none").mean(1)


def _hf_losses(hf, family: str, tokens: torch.Tensor, layer: int, head: int, d_head: int, replacement: torch.Tensor | None) -> torch.Tensor:
    """Per-window loss with head ``head`` of ``layer`` replaced (zeros, or ``replacement[pos, d_head]``)
    at the output projection's input."""

    def pre(module, args):
        x = args[0].clone()
        sl = slice(head * d_head, (head + 1) * d_head)
        x[..., sl] = 0 if replacement is None else replacement.to(x.dtype)
        return (x,)

    handle = OUT_PROJ[family](hf, layer).register_forward_pre_hook(pre)
    try:
        with torch.no_grad():
            return _losses(hf(tokens).logits, tokens)
    finally:
        handle.remove()


def _hf_z_mean(hf, family: str, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """Mean over windows of the output projection's input, per position: ``[pos, n_heads * d_head]``."""
    got: list[torch.Tensor] = []
    handle = OUT_PROJ[family](hf, layer).register_forward_pre_hook(lambda m, a: got.append(a[0].detach()))
    try:
        with torch.no_grad():
            hf(tokens)
    finally:
        handle.remove()
    return got[0].mean(0)


@pytest.mark.parametrize("family", FAMILIES)
def test_zero_and_mean_ablation_equal_a_hugging_face_pre_hook(family, family_model, family_checkpoint, hf_eager):
    model = family_model(family)
    hf = hf_eager(family_checkpoint(family))
    data = text_eval_set(model.tokenizer, eval_text(), n_windows=3, window=24, prepend_bos=True, n_ctx=model.n_ctx, bos_id=model.bos_id)
    tokens = data.tokens
    d_head = attention_spec(model).layers[0].d_head
    with torch.no_grad():
        clean = _losses(hf(tokens).logits, tokens)
    heads = ((0, 1), (1, model.n_heads - 1))
    for method in ("zero", "mean"):
        result = run_ablation(model, data, AblationConfig(method=method, heads=heads, attribution=False, n_bootstrap=0))
        assert abs(result.masked_value - clean.mean().item()) <= 1e-5
        for layer, head in heads:
            repl = None
            if method == "mean":
                repl = _hf_z_mean(hf, family, tokens, layer)[:, head * d_head : (head + 1) * d_head]
            ref = _hf_losses(hf, family, tokens, layer, head, d_head, repl)
            row = result.table[(result.table["layer"] == layer) & (result.table["head"] == head)].iloc[0]
            assert abs(row["value"] - ref.mean().item()) <= 1e-5, (family, method, layer, head)
            assert abs(row["delta"] - (ref - clean).mean().item()) <= 1e-5
            assert abs(row["delta"]) > 1e-5  # the ablation did something


def test_kv_bytes_saved_by_pruning_counted_by_hand_under_gqa(family_model):
    model = family_model("llama")  # 4 query heads share 2 KV heads: groups {0, 1} and {2, 3}
    d_head = attention_spec(model).layers[0].d_head
    one_kv = 2 * d_head * 1000 * 4  # K and V, 1,000 tokens, float32
    assert kv_bytes_saved(model, {(0, 0)}) == (0, 0)  # KV head 0 is still read by query head 1
    assert kv_bytes_saved(model, {(0, 0), (0, 1)}) == (1, one_kv)
    assert kv_bytes_saved(model, {(0, 0), (0, 1), (1, 2), (1, 3), (1, 0)}) == (2, 2 * one_kv)
    gemma = family_model("gemma")  # multi-query: one KV head for all four
    assert kv_bytes_saved(gemma, {(0, 0), (0, 1), (0, 2)}) == (0, 0)
    assert kv_bytes_saved(gemma, {(0, h) for h in range(4)}) == (1, one_kv)


CENSUS = ["--n-prompts", "4", "--seq-len", "10", "--window", "24", "-q"]
EVAL = ["--n-windows", "2", "--window", "24"]
#: The sink study's settings for the matrix: every part (removal, windowed attention, keep-first).
SINKS = {"n_prompts": 2, "batch_size": 8, "long_tokens": 32, "attn_windows": (4, 16), "keep_first": (1,)}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_quick_report_runs_on_every_family(family, family_report):
    """``report --quick`` runs every analysis on the family (census and classify, evidence, sinks, zero and
    mean ablation, pruning, examples, design): one run per family, shared (conftest.family_report)."""
    out, res = family_report(family)
    assert res.exit_code == 0, f"{family} report: {res.output}"
    assert "Traceback" not in res.output
    assert (out / "report.html").is_file()
    manifest = json.loads((out / "census" / "manifest.json").read_text())
    assert manifest["model"]["architecture"].lower().startswith(family.replace("_", "")[:4])
    for stage in ("census", "evidence", "sinks", "ablation_zero", "ablation_mean", "pruning", "examples", "design"):
        assert (out / stage / "stage.json").is_file(), f"{family}: the report's {stage} stage did not run"
    assert list(out.rglob("*.png")) and not list(out.rglob("*.pdf"))  # figures as PNG only (tests.helpers.figure_formats)


#: ``headlens sinks`` with :data:`SINKS` (the GQA family's run of the command below).
SINKS_ARGS = ["--n-prompts", "2", "--batch-size", "8", "--long-tokens", "32", "--attn-windows", "4,16", "--keep-first", "1"]
#: The family whose sink study runs through the command, not the api (once, shared by the two tests that need it).
CLI_FAMILY = "llama"


def _set(config: dict) -> dict:
    """A configuration's settings that are set (the manifest leaves out those that are None)."""
    return {k: v for k, v in config.items() if v is not None}


@pytest.fixture(scope="module")
def cli_sinks(family_checkpoint, runner, tmp_path_factory):
    """``headlens sinks -m <llama> <SINKS> -q --out <folder>``, run once: ``(folder, click Result)``.  Its
    analysis is the api's with :data:`SINKS` (the command calls it); the sink-study test reads its folder
    back, the every-command test checks the command."""
    out = tmp_path_factory.mktemp("sinks_cli") / "sinks"
    res = runner.invoke(cli, ["sinks", "-m", str(family_checkpoint(CLI_FAMILY)), *SINKS_ARGS, "-q", "--out", str(out)])
    return out, res


@pytest.mark.parametrize("family", FAMILIES)
def test_every_part_of_the_sink_study_runs_on_every_family(family, family_model, tmp_path, request):
    """The parts ``report --quick`` leaves out of its sink stage (both BOS settings, removal, windowed
    attention with keep-first), through the api ``headlens sinks`` calls, written as the command writes them
    (on :data:`CLI_FAMILY`: written by the command itself, shared with the every-command test, and read back)."""
    from headlens.analyses.sinks.config import SinkConfig
    from headlens.reports.api.sinks import SinksResult, sinks

    if family == CLI_FAMILY:
        folder, res = request.getfixturevalue("cli_sinks")
        assert res.exit_code == 0, f"{family} sinks: {res.output}"
        result = SinksResult.from_folder(folder)
        ran, api = result.manifest["config"]["sinks"], json.loads(json.dumps(dataclasses.asdict(SinkConfig(**SINKS))))
        assert _set(ran) == _set(api), (ran, api)  # the command ran the api's study with SINKS
    else:
        folder = tmp_path / "sinks"
        result = sinks(family_model(family), SinkConfig(**SINKS))
    assert {"census", "removal", "windowed"} <= set(result.tables), sorted(result.tables)
    assert all(len(table) for table in result.tables.values()), {k: len(v) for k, v in result.tables.items()}
    result.findings()  # the console lines of `headlens sinks`
    if family != CLI_FAMILY:
        result.save(folder)
    assert (folder / "manifest.json").is_file() and (folder / "summary.md").is_file()
    assert list(folder.glob("*.png")) and not list(folder.glob("*.svg"))  # PNG only in tests


def test_every_command_runs_on_a_gqa_family(family_checkpoint, tmp_path, runner, cli_sinks):
    """The one-study commands' CLI layer on a family other than GPT-2 (GQA); their analyses run on
    every family in the quick report and the sink study above (``sinks``: the run it shares, :func:`cli_sinks`)."""
    m = ["-m", str(family_checkpoint(CLI_FAMILY))]
    commands = {
        "detect": ["detect", *m, *CENSUS, "--out", str(tmp_path / "scores.csv")],
        "classify": ["classify", *m, *CENSUS, "--out", str(tmp_path / "census")],
        "ablate": ["ablate", *m, *EVAL, "--method", "mean", "--out", str(tmp_path / "abl.csv")],
        "prune": ["prune", *m, *EVAL, "--step", "0.5", "--max-fraction", "0.5", "--random-seeds", "1", "--out", str(tmp_path / "prune")],
    }
    results = {name: runner.invoke(cli, args) for name, args in commands.items()}
    results["sinks"] = cli_sinks[1]
    for name, res in results.items():
        assert res.exit_code == 0, f"llama {name}: {res.output}"
        assert "Traceback" not in res.output
    assert (cli_sinks[0] / "manifest.json").is_file()
    manifest = json.loads((tmp_path / "census" / "manifest.json").read_text())
    assert manifest["model"]["architecture"] == "LlamaForCausalLM"
