"""``sinks --lengths`` on sliding-window layers: both query conventions, named, checked against
plain transformers; the sequences rebuilt by hand from the manifest's record of the cuts."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import torch

from headlens.analyses.sinks.lengths import LENGTH_COLUMNS, LengthsConfig, run_sink_lengths
from headlens.analyses.stimuli.natural import eval_text
from headlens.analyses.synthetic.families import WINDOW
from headlens.reports.cli.main import cli
from tests.helpers import assert_close

LENGTH = 64  # four windows of WINDOW = 16 keys


def _sequences(model, info, length):
    """Every sequence of ``length`` tokens rebuilt from the manifest's record alone."""
    text = eval_text()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == info["text_sha256"]
    assert info["tokenized_as"] == "tokenizer(text, add_special_tokens=False)" and info["length_counts_special_tokens"]
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
    cut = info["cuts"][str(length)]
    body = cut["text_tokens_per_sequence"]
    prefix, suffix = info["framing"]["prefix_ids"], info["framing"]["suffix_ids"]
    seqs = [prefix + ids[o : o + body] + suffix for o in cut["offsets"]]
    assert all(len(s) == length for s in seqs)
    return seqs


def _by_hand(checkpoint, sequences):
    """Per sequence, layer, head: A[i, 0] for every query (output_attentions of a plain eager
    transformers forward) and the sink's value-norm share A[i,0] ||f_0|| / sum_j A[i,j] ||f_j||,
    f_j = v_j W_O^h, from v_proj's output and o_proj's weight."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), attn_implementation="eager").eval()
    cfg = hf.config
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d = cfg.hidden_size // n_heads
    out = []
    for seq in sequences:
        vs = {}
        handles = [
            layer.self_attn.v_proj.register_forward_hook(lambda m, i, o, li=li: vs.__setitem__(li, o.detach()))
            for li, layer in enumerate(hf.model.layers)
        ]
        try:
            with torch.no_grad():
                attn = hf(torch.tensor([seq]), output_attentions=True).attentions
        finally:
            for h in handles:
                h.remove()
        per_layer = []
        for li, a in enumerate(attn):
            a = a[0].double()  # [head, q, k]
            v = vs[li][0].double().view(len(seq), n_kv, d).repeat_interleave(n_heads // n_kv, dim=1)  # [pos, head, d]
            w_o = hf.model.layers[li].self_attn.o_proj.weight.double()  # [d_model, head * d]
            f = torch.stack([v[:, h] @ w_o[:, h * d : (h + 1) * d].T for h in range(n_heads)])  # [head, pos, d_model]
            norms = f.norm(dim=-1)  # [head, pos]
            share = a[:, :, 0] * norms[:, :1] / (a * norms[:, None, :]).sum(-1)  # [head, q]
            per_layer.append((a[:, :, 0], share))
        out.append(per_layer)
    return out


@pytest.mark.parametrize("attention", ["eager", "streaming"])
def test_window_layer_gives_both_conventions_equal_to_transformers(family_checkpoint, family_model, attention):
    model = family_model("mistral")
    result = run_sink_lengths(model, LengthsConfig(lengths=(LENGTH,), n_sequences=2, attention=attention, query_block=7))
    table = result.table
    assert list(table.columns) == LENGTH_COLUMNS
    assert result.info["windows"] == {str(layer): WINDOW for layer in range(model.n_layers)}
    hand = _by_hand(family_checkpoint("mistral"), _sequences(model, result.info, LENGTH))
    for r in table.itertuples():
        col = torch.stack([hand[s][r.layer][0][r.head] for s in range(2)])  # [seq, q]: A[i, 0]
        vns = torch.stack([hand[s][r.layer][1][r.head] for s in range(2)])
        assert (r.window, r.queries, r.n_queries, r.n_queries_all) == (WINDOW, "visible", WINDOW, LENGTH)
        # the all-queries mean (Gu et al.): every query, masked-out A[i, 0] = 0 counted
        assert_close(r.alpha_all, col.mean(1).mean(), "float32", f"alpha_all {r.layer}.{r.head}")
        assert_close(r.first_share_all, col[:, 1:].mean(1).mean(), "float32")
        assert_close(r.value_norm_share_all, vns[:, 1:].mean(1).mean(), "float32")
        # the visible-queries mean is what it says: queries i < w only
        assert_close(r.alpha, col[:, :WINDOW].mean(1).mean(), "float32", f"alpha {r.layer}.{r.head}")
        assert_close(r.first_share, col[:, 1:WINDOW].mean(1).mean(), "float32")
        assert_close(r.value_norm_share, vns[:, 1:WINDOW].mean(1).mean(), "float32")
        assert r.sink_rate_all == float((col.mean(1) > 0.3).double().mean()) and r.sink_rate == float(
            (col[:, :WINDOW].mean(1) > 0.3).double().mean()
        )
        uniform = 1.0 / torch.arange(1, WINDOW + 1, dtype=torch.float64)
        assert_close(r.uniform_alpha, uniform.mean(), "reference")
        assert_close(r.uniform_alpha_all, uniform.sum() / LENGTH, "reference")
    # no window in effect when the sequence fits in it: one convention, the same numbers
    short = run_sink_lengths(model, LengthsConfig(lengths=(WINDOW,), attention=attention, query_block=7)).table
    assert set(short["queries"]) == {"all"} and (short["n_queries"] == short["n_queries_all"]).all()
    for name in ("alpha", "first_share", "value_norm_share", "uniform_alpha", "sink_rate"):
        assert (short[name] == short[f"{name}_all"]).all(), name


def test_cli_says_what_was_averaged_per_window_layer(runner, family_checkpoint, family_model, tmp_path):
    """stdout: one line per window layer naming both conventions, numbers as in the CSV; the
    manifest names the conventions and the cuts."""
    model = family_model("gemma2")  # window layers 0 (of 2): a mixed model
    out = tmp_path / "g2"
    res = runner.invoke(
        cli,
        [
            "sinks",
            "-m",
            str(family_checkpoint("gemma2")),
            "--out",
            str(out),
            "--lengths",
            f"{WINDOW},{LENGTH}",
            "--n-long",
            "2",
            "--bos",
            "on",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "sink_lengths.csv")
    windowed = sorted(set(table.loc[table["window"].notna(), "layer"]))
    assert windowed == [la for la in range(model.n_layers) if la % 2 == 0] and windowed
    lines = [ln for ln in res.output.splitlines() if ln.startswith("window: ")]
    assert len(lines) == len(windowed)
    for layer, line in zip(windowed, lines, strict=True):
        sub = table[(table["layer"] == layer) & (table["length"] == LENGTH)]
        assert (
            f"layer {layer} ({WINDOW}-key window)" in line
            and f"{WINDOW} queries that see token 0" in line
            and f"all {LENGTH} queries" in line
        )
        assert f"{sub['alpha'].mean():.3f}" in line and f"{sub['alpha_all'].mean():.3f}" in line
    full = table[table["window"].isna()]
    assert (full["queries"] == "all").all() and (full["alpha"] == full["alpha_all"]).all()
    summary = next(ln for ln in res.output.splitlines() if ln.startswith(f"BOS, {LENGTH} tokens"))
    assert f"all queries: mean alpha {table[table['length'] == LENGTH]['alpha_all'].mean():.3f}" in summary
    manifest = json.loads((out / "manifest.json").read_text())
    info = manifest["sink_lengths"]["bos"]
    assert set(info["queries"]) == {"visible", "all"} and info["windows"] == {str(la): WINDOW for la in windowed}
    assert info["cuts"][str(LENGTH)] == {"text_tokens_per_sequence": LENGTH - 1, "offsets": [0, LENGTH - 1]}


def test_lengths_too_short_is_refused_before_any_forward(
    runner, planted_checkpoint, planted_model, family_checkpoint, family_model, tmp_path, monkeypatch
):
    """``--lengths 2`` (and an encoder's ``--lengths 3``): one line naming the framing's real
    counts, exit 2, and not one forward pass (the no-BOS setting used to run in full first)."""
    import headlens.analyses.sinks.lengths as lengths_mod
    from headlens.analyses.sinks.long_text import MIN_TEXT_TOKENS

    calls = []
    for name in ("reduce_pass",):
        real = getattr(lengths_mod, name)
        monkeypatch.setattr(lengths_mod, name, lambda *a, real=real, name=name, **k: (calls.append(name), real(*a, **k))[1])
    for checkpoint, model in ((planted_checkpoint, planted_model), (family_checkpoint("bert"), family_model("bert"))):
        prefix, suffix = model.frame(True)
        n_special = len(prefix) + len(suffix)
        too_short = n_special + MIN_TEXT_TOKENS - 1
        out = tmp_path / f"short{n_special}"
        res = runner.invoke(cli, ["sinks", "-m", str(checkpoint), "--out", str(out), "--lengths", f"{too_short},32", "--bos", "both", "-q"])
        assert res.exit_code == 2, res.output
        assert calls == [] and not out.exists(), calls
        lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("headlens: error:")]
        assert len(lines) == 1 and "Traceback" not in res.output, res.output
        held = too_short - n_special
        assert f"--lengths {too_short} holds {held} text token beside {n_special} special token" in lines[0], lines[0]
        assert f"at least {MIN_TEXT_TOKENS} text tokens, so --lengths must be at least {n_special + MIN_TEXT_TOKENS}" in lines[0]


def test_manifest_lets_a_reader_rebuild_every_sequence_and_alpha(runner, planted_checkpoint, planted_model, tmp_path):
    """From manifest.json alone (text, offsets, framing, BOS counted in the length) the sequences
    are rebuilt and a plain transformers forward gives the CSV's alpha, for both BOS settings."""
    import transformers

    out = tmp_path / "cuts"
    res = runner.invoke(
        cli, ["sinks", "-m", str(planted_checkpoint), "--out", str(out), "--lengths", "16,48", "--n-long", "2", "--bos", "both", "-q"]
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    table = pd.read_csv(out / "sink_lengths.csv")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(planted_checkpoint), attn_implementation="eager").eval()
    for key, bos in (("bos", True), ("no_bos", False)):
        info = manifest["sink_lengths"][key]
        assert info["prepend_bos"] is bos and "evaluation text" in info["text"]
        for length in (16, 48):
            seqs = _sequences(planted_model, info, length)
            assert (seqs[0][0] == planted_model.bos_id) is bos and info["cuts"][str(length)]["offsets"][1] == length - (1 if bos else 0)
            with torch.no_grad():
                attn = hf(torch.tensor(seqs), output_attentions=True).attentions
            for layer, a in enumerate(attn):
                want = a[:, :, :, 0].double().mean(-1).mean(0)  # [head]: alpha averaged over the sequences
                got = table[(table["bos"] == bos) & (table["length"] == length) & (table["layer"] == layer)].sort_values("head")
                assert_close(got["alpha"].to_numpy(copy=True), want, "float32", f"{key} {length} layer {layer}")
                assert (got["queries"] == "all").all() and (got["alpha"] == got["alpha_all"]).all()
