"""The shipped demo model (``--model demo``): it loads like any local checkpoint, its heads
were learned, it beats a unigram model, and its recipe reproduces its own training log."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import torch

from headlens.analyses.demo import MODEL_DIR
from headlens.probes.errors import ModelLoadError
from headlens.probes.loading import resolve_source
from headlens.reports.api.named_models import named_models

pytestmark = [
    pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").is_file(), reason="the demo checkpoint is not shipped in this tree"),
]


@pytest.fixture(scope="module")
def demo(demo_model):
    """``--model demo``'s load (``load_model(model="demo", device="cpu", named=named_models())``, the
    path ``headlens.load_model("demo")`` takes), once per session (tests/conftest.py)."""
    return demo_model


@pytest.fixture(scope="module")
def summary():
    return json.loads((MODEL_DIR / "training_summary.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def census(demo):
    from headlens.analyses.heads.census import CensusConfig, run_census
    from headlens.analyses.heads.classify import classify_heads

    scores = run_census(demo, CensusConfig(n_prompts=100, n_bootstrap=200)).scores
    return scores, classify_heads(scores).roles


def test_demo_resolves_to_the_shipped_folder(tmp_path, monkeypatch):
    assert resolve_source("demo", named_models()) == ("local", str(MODEL_DIR))
    # the library knows no model by name: without the CLI's names, "demo" is a Hub id
    assert resolve_source("demo") == ("hub", "demo")
    # a folder called "demo" where the user stands wins, like any local path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        resolve_source("demo", named_models())


def test_shipped_folder_is_a_small_float32_gpt2(demo):
    files = {p.name for p in MODEL_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "training_log.jsonl", "training_summary.json", "MODEL_CARD.md"} <= files
    assert (MODEL_DIR / "model.safetensors").stat().st_size <= 30_000_000
    assert demo.source == "local" and demo.path == str(MODEL_DIR)
    assert demo.describe()["architecture"] == "GPT2LMHeadModel"
    assert 2 <= demo.n_layers <= 4 and demo.n_ctx >= 256 and demo.bos_id == 50256
    assert demo.dtype is torch.float32
    assert demo.tokenizer.encode("Apple raised its price target", add_special_tokens=False) == [16108, 4376, 663, 2756, 2496]


def _best(scores: pd.DataFrame, detector: str) -> pd.Series:
    sub = scores[scores.detector == detector]
    return sub.loc[sub.score.idxmax()]


def test_learned_heads(census):
    scores, roles = census
    ind = _best(scores, "induction")
    assert ind.score >= 0.3 and ind.baseline < 0.05 and ind.ci_low >= 2 * ind.baseline, ind.to_dict()
    prev = _best(scores, "previous_token")
    assert prev.score >= 0.5, prev.to_dict()
    sink = scores[(scores.detector == "sink") & (scores.score > 0.3)]
    assert len(sink) >= 1, "no head sinks on the first position (Gu alpha > 0.3)"
    found = set(roles["role"])  # the long table
    assert {"induction", "previous_token", "sink"} <= found, roles


@pytest.mark.slow
def test_heldout_loss_clearly_below_unigram(demo, summary, demo_corpus):
    """Recomputed on 24 held-out windows, with the unigram model of the training split; the
    summary's loss recomputed on the whole held-out split (whose first 24 windows are those 24,
    so one pass over the split gives both)."""
    from headlens.analyses.demo.data import eval_windows
    from headlens.analyses.demo.losses import full_loss, unigram_loss, window_losses

    corpus = demo_corpus
    windows = eval_windows(corpus.heldout, 256, 24)
    every = eval_windows(corpus.heldout, 256)
    assert torch.equal(every[:24], windows)
    model = demo.bridge.original_model
    per_window = window_losses(model, every)
    assert per_window.shape == (every.shape[0],)
    loss, unigram = float(per_window[:24].mean()), unigram_loss(corpus.train, windows)
    assert loss < unigram - 1.0, (loss, unigram)
    final = summary["final"]
    assert final["heldout_loss"] < final["heldout_unigram_loss"] - 1.0
    assert abs(final["heldout_loss"] - float(per_window.mean())) < 1e-3
    # full_loss is the mean over the windows' targets: the same number
    assert abs(full_loss(model, windows[:2]) - float(per_window[:2].mean())) < 1e-9


def test_shipped_checkpoint_is_the_recipe_s(summary):
    """The recipe in the code is the one that made the shipped weights (a changed recipe needs a new checkpoint)."""
    from headlens.analyses.demo.checkpoints import config_from_summary
    from headlens.analyses.demo.recipe import RECIPE

    assert config_from_summary(summary) == RECIPE
    assert summary["steps"] == RECIPE.schedule_steps


def test_training_log_has_the_curves():
    rows = [json.loads(line) for line in (MODEL_DIR / "training_log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {"step", "tokens", "train_loss", "heldout_loss", "elapsed_s"} <= set(rows[-1])
    evals = [r for r in rows if r.get("heldout_loss") is not None]
    assert len(evals) >= 3 and evals[-1]["heldout_loss"] < evals[0]["heldout_loss"] - 3


@pytest.mark.usefixtures("demo_corpus")  # replay reads the corpus through build_corpus()
def test_recipe_reproduces_the_logged_losses():
    """A short rerun of the recipe (same seed, data order, 2 threads) repeats the log to 3 decimals.

    ``headlens demo replay --steps 700`` does the same past the random-only warm-up.
    """
    from headlens.analyses.demo.replay import ReplayUnavailable, replay

    try:
        report = replay(MODEL_DIR, 20)
    except ReplayUnavailable as exc:
        pytest.skip(str(exc))
    assert len(report.rerun) == len(report.logged) == 20
    assert report.mismatches == [], report.summary()


def test_classify_demo_from_the_cli(tmp_path, runner):
    from headlens.reports.cli.main import cli

    out = tmp_path / "census"
    res = runner.invoke(cli, ["classify", "--model", "demo", "--n-prompts", "20", "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    roles = pd.read_csv(out / "roles.csv", keep_default_na=False, dtype={"name": str})
    assert {"induction", "previous_token"} <= set(roles["role"]), roles  # the long table
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["source"] == "local" and manifest["model"]["path"] == str(MODEL_DIR)
    assert (
        manifest["model"]["weights_sha256"]
        == hashlib.sha256(b"model.safetensors\0" + (MODEL_DIR / "model.safetensors").read_bytes()).hexdigest()
    )


def _roles(folder):
    from headlens.analyses.heads.classify import roles_of
    from headlens.reports.render.census_files import read_roles

    return {f"{a}.{b}": set(r) for (a, b), r in roles_of(read_roles(folder)).items()}


def test_quick_report_roles_are_classify_s(tmp_path, runner):
    """The quick report's census is classify's default census: the same roles, head by head
    (with 8 prompts instead of 100, head 1.3's sink score fell just under its threshold)."""
    from headlens.reports.cli.main import cli

    res = runner.invoke(cli, ["classify", "--model", "demo", "-q", "--out", str(tmp_path / "census")])
    assert res.exit_code == 0, res.output
    # every stage but the census (evidence and design only read it, writing their own folders)
    skip = "evidence,sinks,ablation_zero,ablation_mean,pruning,examples,design"
    res = runner.invoke(cli, ["report", "--model", "demo", "--quick", "--skip", skip, "-q", "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    census = _roles(tmp_path / "census")
    assert _roles(tmp_path / "report" / "census") == census
    assert "sink" in census["1.3"], census  # the borderline head the two used to disagree on


def test_heldout_text_feeds_the_report(tmp_path, runner, demo_corpus):
    """``demo heldout`` writes the held-out stream as text (token for token); the report measures
    ablation on it when given --text-file, says so, and records the file's fingerprint."""
    from headlens.analyses.demo.data import gpt2_tokenizer
    from headlens.reports.cli.main import cli

    text_file = tmp_path / "heldout.txt"
    res = runner.invoke(cli, ["demo", "heldout", "--out", str(text_file)])
    assert res.exit_code == 0, res.output
    text = text_file.read_text(encoding="utf-8")
    sha = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert f"sha256 {sha}" in res.output
    ids = gpt2_tokenizer()(text, add_special_tokens=False, verbose=False)["input_ids"]
    assert ids == demo_corpus.heldout[1:].tolist()

    out = tmp_path / "report"
    skip = "census,sinks,ablation_mean,pruning,examples,design"  # design: not what is checked here
    res = runner.invoke(
        cli, ["report", "--model", "demo", "--quick", "--text-file", str(text_file), "--skip", skip, "-q", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["report"]["eval_text"] == {"source": "--text-file", "text_file": str(text_file), "text_sha256": sha}
    # the evidence stage reads the census's roles: skipped with it, not failed
    assert manifest["report"]["stages"]["evidence"]["status"] == "skipped"
    info = json.loads((out / "ablation_zero" / "stage.json").read_text())["info"]
    assert info["data"]["text"] == f"text file {text_file}"
    assert info["unablated_value"] < 6.0  # in its own domain (the built-in English text: about 10.6 nats)
    from headlens.reports.render.page.md_templates import md_text

    assert f"tokens of the evaluation text ({md_text(f'text file {text_file}')})" in (out / "report.md").read_text()
