"""KV-cache arithmetic, the GQA what-if (pooled K/V) and projection knockouts (analyses/design)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers import assert_close

TOKS = torch.tensor(
    [[50256, 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383], [50256, 40, 588, 257, 1492, 286, 8887, 11, 290, 340, 373, 922]]
)


@pytest.fixture()
def tiny_loads(tiny_checkpoint, tiny_model):
    """The design commands given ``-m tiny_checkpoint`` get the session's tiny model instead of
    booting it again (half a second a load, 11 loads in this module's CLI tests); any other model
    loads as usual.  Its own MonkeyPatch: the tests' ``monkeypatch.undo()`` leaves it in place.
    ``test_cli_kv_gqa_projections``'s first command loads the checkpoint for real."""
    import headlens.reports.api.models as studies_models

    real = studies_models.load_model

    def load(model, **kwargs):
        return tiny_model if model == str(tiny_checkpoint) and not kwargs else real(model, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(studies_models, "load_model", load)
        yield


def _text_set(model, n_windows=2, window=32):
    from headlens.analyses.measure.evalset import text_eval_set
    from headlens.analyses.stimuli import eval_text

    return text_eval_set(
        model.tokenizer, eval_text(), n_windows=n_windows, window=window, prepend_bos=True, n_ctx=model.n_ctx, bos_id=model.bos_id
    )


# ----------------------------------------------------------------------------- kv


def test_kv_counts_kv_heads_not_query_heads(family_model):
    from headlens.analyses.design.kv import KVConfig, kv_cache_table

    llama = family_model("llama")  # 2 layers, 4 query heads, 2 KV heads, d_head 16
    t = kv_cache_table(llama, KVConfig(batch=3, context=100, cache_dtype="bfloat16"))
    assert list(t["kv_heads_total"]) == [4, 2]  # own GQA (2 per layer), then MQA
    assert t["bytes_per_token"].iloc[0] == 2 * 2 * 2 * 16 * 2
    assert t["bytes"].iloc[0] == 2 * 2 * 2 * 16 * 2 * 100 * 3
    assert t["saved"].iloc[1] == pytest.approx(0.5)
    assert "2 x 2 layers x 2 kv_heads x 16 head_dim x 300 tokens x 2 bytes" in t["formula"].iloc[0]


def test_kv_pruned_and_window(tiny_model, family_model):
    from headlens.analyses.design.kv import KVConfig, kv_cache_table, layer_kv_heads

    t = kv_cache_table(tiny_model, KVConfig(context=10, cache_dtype="float32"), removed=((0, 1), (0, 2), (1, 3)))
    assert list(t["variant"].str.split(" ").str[0]) == ["own", "GQA", "MQA", "pruned"]
    assert t["kv_heads"].iloc[-1] == "2,3"
    assert t["bytes_per_token"].iloc[-1] == 2 * 5 * 16 * 4
    llama = family_model("llama")
    # on GQA a KV head goes only when every query head reading it is removed
    assert layer_kv_heads(llama, removed=((0, 0),)) == [2, 2]
    assert layer_kv_heads(llama, removed=((0, 0), (0, 1))) == [1, 2]
    mistral = family_model("mistral")  # sliding window of 16 keys: at most 16 tokens cached
    m = kv_cache_table(mistral, KVConfig(context=100, cache_dtype="float32"))
    assert m["bytes"].iloc[0] == m["bytes_per_token"].iloc[0] * 16


# ----------------------------------------------------------------------------- pooling


def test_pooled_forward_equals_hf_gqa_model(tmp_path):
    """Mean-pooled K/V through hooks == a Hugging Face Llama with num_key_value_heads = n / g and pooled weights."""
    from transformers import LlamaForCausalLM

    from headlens.analyses.design.edits import pool_hooks
    from headlens.analyses.design.grouping import adjacent_groups
    from headlens.analyses.synthetic.families import build_family_checkpoint
    from headlens.probes.hooks import attached
    from headlens.probes.loading import load_model

    folder = build_family_checkpoint(tmp_path / "llama_mha", "llama", n_kv_heads=4)
    model = load_model(model=str(folder), device="cpu")
    hf = LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    d_head = hf.config.hidden_size // hf.config.num_attention_heads
    for g in (2, 4):
        groups = {layer: adjacent_groups(4, g) for layer in range(model.n_layers)}
        with torch.inference_mode(), attached(model.bridge, pool_hooks(groups)):
            ours = model.bridge(TOKS, return_type="logits")
        cfg = hf.config.__class__.from_dict({**hf.config.to_dict(), "num_key_value_heads": 4 // g})
        cfg._attn_implementation = "eager"
        pooled = LlamaForCausalLM(cfg).eval()
        state = {k: v.clone() for k, v in hf.state_dict().items()}
        for name in list(state):
            if name.endswith(("k_proj.weight", "v_proj.weight")):
                w = state[name].double()  # [kv_head * d_head, d_model]
                state[name] = w.view(4 // g, g, d_head, -1).mean(1).reshape(-1, w.shape[-1])
        pooled.load_state_dict({k: v.double() for k, v in state.items()})
        with torch.inference_mode():  # the reference in float64: its own float32 rounding would be ~2e-5 here
            ref = pooled.double()(TOKS).logits
        # 1e-5 of the logits' scale (the model's own float32 rounding against float64 is of that size)
        assert (ours.double() - ref).abs().max() <= 1e-5 * ref.abs().max(), f"g={g}"
        assert_close(ours, ref, "float32_loose", msg=f"g={g}")
        with torch.inference_mode():
            plain = hf(TOKS).logits
        assert (plain - ref).abs().max() > 1e-3  # the pooling changed something


def test_js_divergence():
    from headlens.analyses.design.gqa import js_divergence

    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    q = torch.tensor([[0.0, 1.0], [0.5, 0.5]])
    assert_close(js_divergence(p, q), torch.tensor([1.0, 0.0]), "reference")


def test_similar_groups_finds_alike_heads():
    from headlens.analyses.design.grouping import adjacent_groups, scatter, similar_groups

    x = np.array([[0.0, 0], [5, 5], [0.1, 0], [5, 5.2]])  # heads 0 and 2 alike, 1 and 3 alike
    dist = ((x[:, None] - x[None]) ** 2).sum(-1)
    got = similar_groups(dist, 2)
    assert got == ((0, 2), (1, 3))
    assert scatter(dist, got) < scatter(dist, adjacent_groups(4, 2))


def test_gqa_study_on_tiny(tiny_model):
    from headlens.analyses.design.gqa import GQAConfig, run_gqa

    res = run_gqa(tiny_model, _text_set(tiny_model), GQAConfig(batch_size=2))
    s = res.summary
    assert list(zip(s["grouping"], s["g"], strict=True)) == [
        ("original", 1),
        ("adjacent", 2),
        ("similar", 2),
        ("adjacent", 4),
        ("similar", 4),
    ]
    assert (s["kv_bytes_per_token"].iloc[1:] < s["kv_bytes_per_token"].iloc[0]).all()
    assert (s["loss_change"].iloc[1:].abs() > 0).all()
    mqa = res.heads[res.heads["g"] == 4]
    assert (mqa["js"] > 0).all() and (mqa["js"] <= 1).all()
    # similar grouping never scatters more than adjacent grouping at the same size
    two = s[s["g"] == 2].set_index("grouping")
    assert two.loc["similar", "scatter"] <= two.loc["adjacent", "scatter"] + 1e-9


def test_gqa_bad_input(tiny_model, family_model):
    from headlens.analyses.design.gqa import GQAConfig, run_gqa
    from headlens.probes.errors import InputError

    with pytest.raises(InputError, match="does not divide"):
        run_gqa(tiny_model, _text_set(tiny_model), GQAConfig(group_sizes=(3,)))
    gemma = family_model("gemma")  # one KV head
    with pytest.raises(InputError, match="already multi-query"):
        run_gqa(gemma, _text_set(gemma))


# ----------------------------------------------------------------------------- knockouts


@pytest.mark.parametrize("kind", ["q=k", "q=k=v"])
def test_knockout_matches_two_pass_reference_on_gqa_rotary(family_model, kind):
    from headlens.analyses.design.edits import _two_pass, check_knockout, knockout_hooks
    from headlens.probes.hooks import attached

    llama = family_model("llama")
    check_knockout(llama, kind)
    with torch.inference_mode():
        ref = _two_pass(llama, TOKS, 1, kind)
        with attached(llama.bridge, knockout_hooks(llama, 1, kind)):
            got = llama.bridge(TOKS, return_type="logits")
        base = llama.bridge(TOKS, return_type="logits")
    assert_close(got, ref, "float32")
    assert (got - base).abs().max() > 1e-3


def test_knockout_q_equals_k_gives_symmetric_scores(tiny_model):
    """With q = k the pre-mask scores are symmetric: redo them from the edited q and k."""
    from headlens.analyses.design.edits import knockout_hooks
    from headlens.probes.hooks import attached

    seen = {}

    def grab(name):
        def fn(x, hook=None):
            seen[name] = x.clone()

        return fn

    hooks = [
        *knockout_hooks(tiny_model, 0, "q=k", heads=[2]),
        ("blocks.0.attn.hook_k", grab("k")),
        ("blocks.0.attn.hook_pattern", grab("p")),
    ]
    with torch.inference_mode(), attached(tiny_model.bridge, hooks):
        tiny_model.bridge(TOKS, return_type=None)
    k = seen["k"][0, :, 2]  # [pos, d_head]
    s = (k @ k.T) / k.shape[-1] ** 0.5
    ref = torch.tril(s).masked_fill(torch.triu(torch.ones_like(s, dtype=torch.bool), 1), float("-inf")).softmax(-1)
    assert_close(seen["p"][0, 2], ref, "float32")
    with torch.inference_mode(), attached(tiny_model.bridge, [("blocks.0.attn.hook_pattern", grab("p0"))]):
        tiny_model.bridge(TOKS, return_type=None)
    assert (seen["p0"][0, 2] - seen["p"][0, 2]).abs().max() > 1e-3  # the knockout changed the pattern
    assert_close(seen["p0"][0, 1], seen["p"][0, 1], "exact")  # and only head 2's


def test_knockout_refused_on_opt(family_model, family_checkpoint, runner, tmp_path):
    from headlens.analyses.design.edits import check_knockout
    from headlens.probes.errors import InterventionError
    from headlens.reports.cli.main import cli

    opt = family_model("opt")
    with pytest.raises(InterventionError, match="opt"):
        check_knockout(opt, "q=k")
    check_knockout(opt, "v=k")  # v = k is carried: hook_v fires after hook_k
    r = runner.invoke(
        cli,
        [
            "projections",
            "-m",
            str(family_checkpoint("opt")),
            "--kinds",
            "q=k",
            "--no-roles",
            "--n-windows",
            "1",
            "--window",
            "16",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 2
    assert "opt" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_planted_q_equals_k_removes_previous_token_role(planted_model):
    from headlens.analyses.design.projections import ProjectionConfig, knockout_roles
    from headlens.analyses.heads.census import CensusConfig

    census = CensusConfig(n_prompts=16, n_bootstrap=100, detectors=("previous_token", "induction", "sink"))
    changes, _ = knockout_roles(planted_model, census, ProjectionConfig(kinds=("q=k",), layers=(0,)))
    intact = changes[(changes["kind"] == "none") & (changes["layer"] == 0) & (changes["head"] == 0)]
    assert "previous_token" in intact["roles_before"].iloc[0]
    row = changes[(changes["kind"] == "q=k") & (changes["layer"] == 0) & (changes["head"] == 0)]
    assert len(row) == 1 and "previous_token" in row["lost"].iloc[0]
    # induction (1.0) reads 0.0's previous-token output: it goes too
    ind = changes[(changes["kind"] == "q=k") & (changes["layer"] == 1) & (changes["head"] == 0)]
    assert len(ind) == 1 and "induction" in ind["lost"].iloc[0]


# ----------------------------------------------------------------------------- CLI


def test_cli_kv_gqa_projections(tiny_checkpoint, runner, tmp_path, request):
    from headlens.reports.cli.main import cli

    r = runner.invoke(cli, ["kv", "-m", str(tiny_checkpoint), "--context", "64", "--out", str(tmp_path / "kv.csv")])
    assert r.exit_code == 0, r.stderr
    assert "2 x 2 layers x 4 kv_heads x 16 head_dim x 64 tokens x 4 bytes = 64.00 KiB" in r.stdout
    assert (tmp_path / "kv.manifest.json").is_file()
    request.getfixturevalue("tiny_loads")  # loaded for real once above; the session's model from here on
    common = ["-m", str(tiny_checkpoint), "--n-windows", "2", "--window", "24", "-q"]
    task = tmp_path / "task.jsonl"
    task.write_text(
        json.dumps({"prompt": "When Mary and John went to the store, John gave a drink to", "correct": " Mary", "incorrect": " John"})
        + "\n"
    )
    r = runner.invoke(cli, ["gqa", *common, "--group-sizes", "2", "--task", str(task), "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.stderr
    assert "logit-diff" in (tmp_path / "g" / "task.csv").read_text()
    for f in ("summary.csv", "heads.csv", "groups.csv", "kv.csv", "gqa_loss_vs_cache.png", "summary.md", "manifest.json"):
        assert (tmp_path / "g" / f).is_file(), f
    assert json.loads((tmp_path / "g" / "manifest.json").read_text())["model"] is not None
    r = runner.invoke(cli, ["gqa", *common, "--group-sizes", "3", "--out", str(tmp_path / "g3")])
    assert r.exit_code == 2 and "does not divide" in r.stderr
    assert not (tmp_path / "g3" / "gqa.journal.jsonl").exists()  # refused before a journal could block the next run
    r = runner.invoke(cli, ["projections", *common, "--kinds", "q=x", "--out", str(tmp_path / "p3")])
    assert (
        r.exit_code == 2 and "'--kinds'" in r.stderr and "choose from q=k, v=k, q=k=v" in r.stderr
    )  # a click.Choice from the config's KINDS
    assert not (tmp_path / "p3" / "projections.journal.jsonl").exists()
    r = runner.invoke(cli, ["projections", *common, "--no-roles", "--layers", "1", "--kinds", "q=k", "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "p" / "losses.csv").is_file() and (tmp_path / "p" / "knockout.png").is_file()


def test_cli_gqa_refuses_mqa(family_checkpoint, runner, tmp_path):
    from headlens.reports.cli.main import cli

    r = runner.invoke(
        cli, ["gqa", "-m", str(family_checkpoint("gemma")), "--n-windows", "1", "--window", "16", "--out", str(tmp_path / "g")]
    )
    assert r.exit_code == 2
    assert "already multi-query" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_design_section_tables_and_markdown(tiny_model):
    from headlens.analyses.design.gqa import GQAConfig
    from headlens.analyses.design.projections import ProjectionConfig
    from headlens.analyses.design.section import design_section_tables
    from headlens.reports.render.design_tables import design_section_markdown

    tables = design_section_tables(
        tiny_model,
        _text_set(tiny_model, n_windows=1, window=16),
        gqa=GQAConfig(group_sizes=(4,), groupings=("adjacent",)),
        projections=ProjectionConfig(kinds=("v=k",), layers=(0,)),
        roles=False,
    )
    assert set(tables) == {"kv", "gqa_summary", "gqa_heads", "gqa_groups", "knockout_losses", "skipped"}
    assert len(tables["skipped"]) == 0
    text = design_section_markdown(tables)
    assert "## Design questions" in text and "g=4 (75% of the cache saved): loss change" in text and "layer 0, v=k: loss" in text


# ----------------------------------------------------------------------------- resume


class _Interrupted(Exception):
    pass


class _DyingJournal:
    """A RecordJournal that dies (as a kill would) when the sweep hands it its ``after``-th append."""

    def __init__(self, records=(), after=10**9):
        from headlens.analyses.measure.records import MemoryJournal

        self._inner = MemoryJournal(records)
        self.after = after
        self.records = self._inner.records

    def append(self, records):
        if self.after <= 0:
            raise _Interrupted()
        self.after -= 1
        self._inner.append(records)


def test_gqa_and_knockouts_resume_equal_an_uninterrupted_run(tiny_model):
    import pandas as pd

    from headlens.analyses.design.gqa import GQAConfig, run_gqa
    from headlens.analyses.design.projections import ProjectionConfig, knockout_roles, run_knockouts
    from headlens.analyses.heads.census import CensusConfig

    data = _text_set(tiny_model, n_windows=3, window=16)
    cfg = GQAConfig(batch_size=2)  # g = 2, 4 x adjacent, similar: 4 variants, 2 batches each
    whole = run_gqa(tiny_model, data, cfg)
    dying = _DyingJournal(after=3)  # the original and 2 variants finish, then the run dies
    with pytest.raises(_Interrupted):
        run_gqa(tiny_model, data, cfg, journal=dying)
    assert [r["kind"] for r in dying.records] == ["gqa_original", "gqa_variant", "gqa_variant"]
    seen = []
    resumed = _DyingJournal(dying.records)
    again = run_gqa(tiny_model, data, cfg, journal=resumed, progress=lambda s, d, t: seen.append((d, t)))
    assert seen == [(3, 4), (4, 4)]  # only the 2 variants left were measured
    for name in ("summary", "heads", "groups", "comparison"):
        pd.testing.assert_frame_equal(getattr(whole, name), getattr(again, name))

    pcfg = ProjectionConfig(kinds=("q=k", "v=k"), batch_size=2)
    losses = run_knockouts(tiny_model, data, pcfg)
    dying = _DyingJournal(after=2)
    with pytest.raises(_Interrupted):
        run_knockouts(tiny_model, data, pcfg, journal=dying)
    pd.testing.assert_frame_equal(losses, run_knockouts(tiny_model, data, pcfg, journal=_DyingJournal(dying.records)))

    census = CensusConfig(n_prompts=4, n_bootstrap=20, detectors=("previous_token",))
    rcfg = ProjectionConfig(kinds=("q=k",), layers=(0, 1))
    changes, scores = knockout_roles(tiny_model, census, rcfg)
    dying = _DyingJournal(after=2)  # the intact census and layer 0's, then it dies
    with pytest.raises(_Interrupted):
        knockout_roles(tiny_model, census, rcfg, journal=dying)
    changes2, scores2 = knockout_roles(
        tiny_model, census, rcfg, journal=_DyingJournal(dying.records, after=1)
    )  # 1 append left: only layer 1 runs
    pd.testing.assert_frame_equal(changes, changes2)
    pd.testing.assert_frame_equal(scores, scores2)


@pytest.mark.usefixtures("tiny_loads")
def test_cli_gqa_resume_after_a_crash(tiny_checkpoint, runner, tmp_path, monkeypatch):
    from headlens.reports.api.journal import Journal
    from headlens.reports.cli.main import cli

    common = ["gqa", "-m", str(tiny_checkpoint), "--n-windows", "2", "--window", "16", "--grouping", "adjacent", "-q"]
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "whole")])
    assert r.exit_code == 0, r.stderr
    real_append, calls = Journal.append, []

    def dying_append(self, records):
        calls.append(records)
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed after the original and one variant
        real_append(self, records)

    monkeypatch.setattr(Journal, "append", dying_append)
    out = tmp_path / "cut"
    r = runner.invoke(cli, [*common, "--out", str(out)])
    assert r.exit_code != 0 and (out / "gqa.journal.jsonl").is_file() and not (out / "summary.csv").exists()
    monkeypatch.undo()
    r = runner.invoke(cli, [*common, "--out", str(out)])  # no --resume: refused, the journal kept
    assert r.exit_code != 0 and "--resume" in r.stderr and (out / "gqa.journal.jsonl").is_file()
    r = runner.invoke(cli, [*common[:-1], "--out", str(out), "--resume"])
    assert r.exit_code == 0, r.stderr
    assert "resuming from" in r.stderr and "(1 variant(s) already done)" in r.stderr
    assert not (out / "gqa.journal.jsonl").exists()
    for f in ("summary.csv", "heads.csv", "groups.csv"):
        assert (out / f).read_text() == (tmp_path / "whole" / f).read_text(), f
    assert json.loads((out / "manifest.json").read_text())["gqa"]["resumed"] is True


@pytest.mark.usefixtures("tiny_loads")
def test_cli_projections_resume_after_a_crash(tiny_checkpoint, runner, tmp_path, monkeypatch):
    from headlens.reports.api.journal import Journal
    from headlens.reports.cli.main import cli

    common = ["projections", "-m", str(tiny_checkpoint), "--n-windows", "2", "--window", "16", "--kinds", "q=k,v=k", "--no-roles"]
    r = runner.invoke(cli, [*common, "-q", "--out", str(tmp_path / "whole")])
    assert r.exit_code == 0, r.stderr
    real_append, calls = Journal.append, []

    def dying_append(self, records):
        calls.append(records)
        if len(calls) == 4:
            raise KeyboardInterrupt  # killed after the intact run and 2 of the 4 knockouts
        real_append(self, records)

    monkeypatch.setattr(Journal, "append", dying_append)
    r = runner.invoke(cli, [*common, "-q", "--out", str(tmp_path / "cut")])
    assert r.exit_code != 0 and (tmp_path / "cut" / "projections.journal.jsonl").is_file()
    monkeypatch.undo()
    r = runner.invoke(cli, [*common, "--out", str(tmp_path / "cut"), "--resume"])
    assert r.exit_code == 0, r.stderr
    assert "(2 knockout(s) and census run(s) already done)" in r.stderr
    assert (tmp_path / "cut" / "losses.csv").read_text() == (tmp_path / "whole" / "losses.csv").read_text()


def test_design_section_on_an_encoder_shows_no_kv_cache(family_model):
    """An encoder caches nothing at inference: the report's design section says so instead of sizing a cache (issue 20 item 8)."""
    from headlens.analyses.design.section import design_section_tables
    from headlens.reports.render.design_tables import design_section_markdown

    bert = family_model("bert")
    reason = "encoder: no next-token loss"
    # no evaluation set: every part that reads one is skipped
    tables = design_section_tables(bert, None, skip={"gqa": reason, "projections": reason})  # pyright: ignore[reportArgumentType]
    assert "kv" not in tables
    skipped = dict(zip(tables["skipped"]["part"], tables["skipped"]["reason"], strict=True))
    assert "no KV cache at inference" in skipped["kv"]
    text = design_section_markdown(tables)
    assert "### KV cache" not in text and "no KV cache at inference" in text
