"""Ablation and pruning on a model without a trained output head: all-MiniLM-L6-v2 (a BertModel
checkpoint the bridge boots as BertForMaskedLM, so its MLM head is random on every load).

Loss and logit difference are refused there; the embedding change (1 - cosine of the mean-pooled
last hidden state to the unablated one) is the default, checked against plain transformers.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

import headlens.reports.api.models as studies_models
from headlens.analyses.ablation.gradients import gate_gradients
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.embedding import embedding_eval_set, hidden_state_hook, sentence_embeddings, split_sentences
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.measure.metrics import check_metric, default_metric, worse_by
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError, UnsupportedModelError
from headlens.reports.cli.main import cli

#: Different lengths, so every batch of two is padded.
SENTENCES = [
    "Bread rises.",
    "The old keeper fed his grey cat at dawn.",
    "Yeast feeds on sugars that come from the starch and gives off carbon dioxide and a little alcohol.",
    "Warmth speeds the yeast up and cold slows it down.",
    "Salt tightens the gluten, so a loaf made without salt often rises fast and collapses in the oven.",
]
HEADS = [(0, 3), (2, 5), (5, 11)]


@pytest.fixture(scope="module")
def hf_minilm(minilm_dir):
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()


def _hf_embeddings(hf, tokenizer, sentences, ablate=()):
    """Plain transformers: zero a head's slice of the input of its layer's attention output
    projection (a forward pre-hook), mean-pool the last hidden state over the attention mask."""
    enc = tokenizer(sentences, padding=True, return_tensors="pt")
    d_head = hf.config.hidden_size // hf.config.num_attention_heads
    handles = []
    for layer, head in ablate:

        def pre(module, args, head=head):
            x = args[0].clone()
            x[..., head * d_head : (head + 1) * d_head] = 0
            return (x, *args[1:])

        handles.append(hf.encoder.layer[layer].attention.output.dense.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            hidden = hf(**enc).last_hidden_state.double()
    finally:
        for h in handles:
            h.remove()
    mask = enc["attention_mask"].double()[..., None]
    return (hidden * mask).sum(1) / mask.sum(1), hidden, enc["attention_mask"].bool()


def _hf_change(hf, tokenizer, sentences, head):
    e0 = _hf_embeddings(hf, tokenizer, sentences)[0]
    e = _hf_embeddings(hf, tokenizer, sentences, [head])[0]
    return float((1 - torch.nn.functional.cosine_similarity(e, e0, dim=-1)).mean())


@pytest.fixture()
def shared_load(monkeypatch, minilm_model):
    """The CLI loads the session's MiniLM instead of booting it again (3 s a load)."""
    monkeypatch.setattr(studies_models, "load_model", lambda *a, **k: minilm_model)
    return minilm_model


# --------------------------------------------------------------------------- the metric


def test_last_hidden_state_and_pooling_equal_plain_transformers(minilm_model, hf_minilm):
    assert minilm_model.head_is_new and minilm_model.is_encoder
    assert hidden_state_hook(minilm_model) == "blocks.5.hook_resid_post"
    data = embedding_eval_set(minilm_model, SENTENCES, prepend_bos=True)
    assert data.tokens[:, 0].eq(minilm_model.tokenizer.cls_token_id).all()
    ref, hidden, mask = _hf_embeddings(hf_minilm, minilm_model.tokenizer, SENTENCES)
    order = [SENTENCES.index(s) for s in sorted(SENTENCES, key=lambda s: len(minilm_model.tokenizer(s)["input_ids"]))]
    # the stored unablated embeddings (one sentence at a time) and a padded batch through the bridge
    assert data.reference is not None and torch.allclose(data.reference, ref[order], atol=1e-5)
    with torch.inference_mode():
        batched = sentence_embeddings(minilm_model, data.tokens, data.lengths)
    assert torch.allclose(batched, ref[order], atol=1e-5)
    # the raw last hidden state, padded positions excluded
    from headlens.probes.hooks import attached

    seen = {}
    enc = minilm_model.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with (
        torch.inference_mode(),
        attached(minilm_model.bridge, [(hidden_state_hook(minilm_model), lambda x, hook=None: seen.setdefault("h", x.clone()))]),
    ):
        minilm_model.bridge(enc["input_ids"], return_type=None, attention_mask=enc["attention_mask"])
    assert float((seen["h"].double() - hidden)[mask].abs().max()) < 1e-5


def test_batched_equals_one_by_one_padding_never_counts(minilm_model):
    data = embedding_eval_set(minilm_model, SENTENCES)
    assert len(set(data.lengths.tolist())) == len(SENTENCES)
    tables = {}
    for bs in (1, 5):
        for method in ("zero", "mean"):
            cfg = AblationConfig(method=method, heads=tuple(HEADS), batch_size=bs, n_bootstrap=0, attribution=False)
            tables[bs, method] = run_ablation(minilm_model, data, cfg).table
    for method in ("zero", "mean"):
        a, b = tables[1, method], tables[5, method]
        assert (a["value"] - b["value"]).abs().max() < 1e-6, method
        assert (a["value"] > 1e-4).all()


def test_metric_rules_and_refusals(minilm_model):
    assert default_metric(minilm_model)[0] == "embedding"
    why = default_metric(minilm_model)[1]
    assert why is not None and "newly initialised" in why
    for metric in ("loss", "logit-diff"):
        with pytest.raises(UnsupportedModelError, match=r"newly initialised.*metric='embedding'"):
            check_metric(minilm_model, metric)
    check_metric(minilm_model, "embedding")
    decoder = SimpleNamespace(head_is_new=False, is_encoder=False, config=SimpleNamespace(model="gpt2"))
    assert default_metric(decoder) == ("loss", None)
    check_metric(decoder, "loss")
    new_head = SimpleNamespace(head_is_new=True, is_encoder=False, config=SimpleNamespace(model="base"))
    assert default_metric(new_head)[0] == "embedding"
    with pytest.raises(UnsupportedModelError):
        check_metric(new_head, "logit-diff")
    trained_encoder = SimpleNamespace(head_is_new=False, is_encoder=True, config=SimpleNamespace(model="bert"))
    with pytest.raises(UnsupportedModelError, match="bidirectional encoder"):
        check_metric(trained_encoder, "loss")
    # the library raises, before any forward
    loss_set = text_eval_set(minilm_model.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=False, n_ctx=minilm_model.n_ctx)
    with pytest.raises(UnsupportedModelError, match="newly initialised"):
        run_ablation(minilm_model, loss_set, AblationConfig(heads=((0, 0),)))
    # the embedding change has no gradient in the unablated model: refused, and attribution is switched off with a note
    data = embedding_eval_set(minilm_model, SENTENCES[:2])
    with pytest.raises(InputError, match="gradient is zero"):
        gate_gradients(minilm_model, data)
    res = run_ablation(minilm_model, data, AblationConfig(heads=((5, 11),), n_bootstrap=0))
    assert res.table["attribution"].isna().all() and res.spearman is None and "gradient" in res.info["attribution"]
    # the pruning threshold is an absolute change: the unablated value is 0
    assert worse_by("embedding", 0.03, 0.0) == pytest.approx(0.03)


def test_sentences_of_the_builtin_text():
    sents = split_sentences(eval_text(), complete_only=True)
    assert len(sents) > 200 and all(s[-1] in ".!?\"')]" for s in sents)
    assert "How Bread Rises" not in sents  # a heading, not a sentence
    assert split_sentences("One. Two words here!\nno stop at the end") == ["One.", "Two words here!", "no stop at the end"]


# --------------------------------------------------------------------------- the CLI


def test_ablate_metric_embedding_equals_plain_transformers(shared_load, hf_minilm, tmp_path, runner):
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "abl.csv"
    heads = ",".join(f"{l}.{h}" for l, h in HEADS)
    res = runner.invoke(
        cli,
        [
            "ablate",
            "-m",
            "minilm",
            "--metric",
            "embedding",
            "--text-file",
            str(text),
            "--heads",
            heads,
            "--batch-size",
            "2",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out).set_index(["layer", "head"])
    assert set(table["metric"]) == {"embedding"} and set(table["n"]) == {len(SENTENCES)}
    for head in HEADS:
        assert table.loc[head, "value"] == pytest.approx(_hf_change(hf_minilm, shared_load.tokenizer, SENTENCES, head), abs=1e-5)
    assert table["attribution"].isna().all()
    manifest = json.loads((tmp_path / "abl.manifest.json").read_text())["ablation"]
    assert manifest["metric"] == "embedding" and manifest["metric_chosen"] == "asked for (metric='embedding')"
    assert abs(manifest["unablated_value"]) < 1e-9 and manifest["data"]["framing"] == {"prefix": ["[CLS]"], "suffix": ["[SEP]"]}
    assert "attribution off" in res.output


def test_ablate_default_metric_on_minilm_is_embedding(minilm_dir, tmp_path, runner):
    out = tmp_path / "abl.json"
    res = runner.invoke(cli, ["ablate", "-m", str(minilm_dir), "--n-sentences", "3", "--heads", "5.11", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert "headlens: warning: metric: embedding change" in res.output and "newly initialised" in res.output
    rows = json.loads(out.read_text())
    assert rows[0]["metric"] == "embedding" and rows[0]["value"] > 1e-3
    abl = json.loads((tmp_path / "abl.manifest.json").read_text())["ablation"]
    assert (
        abl["metric"] == "embedding"
        and abl["metric_chosen"].startswith("default for this model")
        and "newly initialised" in abl["metric_chosen"]
    )
    assert "1 - cos" in abl["metric_definition"] and abl["data"]["n_sentences"] == 3
    assert "unablated embedding change" in res.output


def test_loss_on_minilm_exits_2_with_one_line(minilm_dir, minilm_model, monkeypatch, tmp_path, runner):
    # a real load (-q: no warnings), then the refusal, before anything is written
    res = runner.invoke(cli, ["-q", "ablate", "-m", str(minilm_dir), "--metric", "loss", "--out", str(tmp_path / "a.csv")])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("headlens: error: --metric loss") and "newly initialised" in lines[0] and "--metric embedding" in lines[0]
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(studies_models, "load_model", lambda *a, **k: minilm_model)
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": "The capital of France is", "correct": " paris", "incorrect": " london"}) + "\n")
    for args in (
        ["ablate", "--task", str(task), "--out", str(tmp_path / "t.csv")],
        ["prune", "--metric", "loss", "--out", str(tmp_path / "p")],
    ):
        res = runner.invoke(cli, [args[0], "-m", "minilm", *args[1:]])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and "newly initialised" in lines[0], res.output
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "p").exists()


def test_prune_on_minilm_ranks_heads_by_exact_change(shared_load, tmp_path, runner):
    out = tmp_path / "p"
    res = runner.invoke(
        cli,
        [
            "prune",
            "-m",
            "minilm",
            "--n-sentences",
            "3",
            "--step",
            "0.5",
            "--max-fraction",
            "0.1",
            "--random-seeds",
            "1",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())["pruning"]
    assert (
        manifest["metric"] == "embedding"
        and manifest["importance"].startswith("exact")
        and manifest["max_increase_is"].startswith("absolute")
    )
    imp = pd.read_csv(out / "importance.csv")
    assert (imp["importance"] == imp["importance_raw"]).all() and imp["importance"].notna().all()
    curve = pd.read_csv(out / "curve.csv", dtype={"removed_this_step": str})
    assert curve["n_removed"].tolist() == [0, 7]
    least = imp.sort_values(["importance", "layer", "head"]).head(7)
    assert sorted(curve["removed_this_step"].iloc[1].split()) == sorted(
        f"{l}.{h}" for l, h in zip(least["layer"], least["head"], strict=True)
    )
    assert abs(curve["value"].iloc[0]) < 1e-9 and curve["relative_change"].iloc[1] == pytest.approx(
        curve["value"].iloc[1] - curve["value"].iloc[0]
    )
    # importance at step 0 is the exact single-head table on the same sentences
    data = embedding_eval_set(shared_load, split_sentences(eval_text(), complete_only=True), n_sentences=3)
    table = run_ablation(shared_load, data, AblationConfig(heads=((5, 11), (0, 0)), n_bootstrap=0, attribution=False)).table
    got = imp.set_index(["layer", "head"])["importance"]
    for r in table.itertuples():
        assert got.loc[(r.layer, r.head)] == pytest.approx(r.delta, abs=1e-12)


def test_embedding_metric_on_a_decoder_uses_the_final_norm(tiny_model, tiny_checkpoint):
    from transformers import AutoModel

    assert hidden_state_hook(tiny_model) == "ln_final.hook_out"
    hf = AutoModel.from_pretrained(str(tiny_checkpoint), attn_implementation="eager").eval()
    data = embedding_eval_set(tiny_model, SENTENCES[:3], prepend_bos=True)
    assert data.reference is not None
    with torch.no_grad():
        for i in range(len(data)):
            n = int(data.lengths[i])
            h = hf(data.tokens[i : i + 1, :n]).last_hidden_state.double().mean(1)[0]
            assert torch.allclose(data.reference[i], h, atol=1e-5)
    assert data.tokens[:, 0].eq(tiny_model.bos_id).all()


# --------------------------------------------------------------------------- the report


@pytest.mark.slow
def test_quick_report_on_minilm_uses_the_embedding_metric(minilm_dir, tmp_path, runner):
    out = tmp_path / "r"
    res = runner.invoke(cli, ["report", "--quick", "--model", str(minilm_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "measured by the embedding change, not loss" in res.output
    for stage in ("ablation_zero", "ablation_mean", "pruning"):
        marker = json.loads((out / stage / "stage.json").read_text())
        assert marker["status"] == "done" and marker["info"]["metric"] == "embedding", stage
        assert marker["key"]["config"]["metric"].startswith("embedding change when the output head is newly initialised")
    assert json.loads((out / "pruning" / "stage.json").read_text())["info"]["importance"].startswith("exact")
    for stage in ("ablation_zero", "ablation_mean"):
        assert set(pd.read_csv(out / stage / "ablation.csv")["metric"]) == {"embedding"}
    page = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    for text in (page, md):
        assert "measure the embedding change, not the loss" in text and "newly initialised" in text
    assert "exact importance order" in page and "gradient importance" not in md
