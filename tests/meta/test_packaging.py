"""The wheel installs one import name, ``headlens``: built here, installed into a fresh venv."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel the project's own build backend (pyproject.toml's ``build-backend``) makes of this
    checkout, called as pip's ``pip wheel --no-deps --no-build-isolation`` calls it (PEP 517
    ``build_wheel``, in a subprocess, from the project folder) without pip's own start-up and its
    separate metadata pass (about 1.5 s CPU)."""
    out = tmp_path_factory.mktemp("wheel")
    (backend,) = re.findall(r'^build-backend\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    call = f"import importlib, sys; importlib.import_module({backend!r}).build_wheel(sys.argv[1])"
    subprocess.run([sys.executable, "-c", call, str(out)], check=True, cwd=ROOT)  # its log shows in the failure report
    (found,) = out.glob("headlens-*.whl")
    return found


@pytest.mark.slow
def test_wheel_holds_only_the_headlens_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"headlens"}
    for must in (
        "headlens/__init__.py",
        "headlens/__main__.py",
        "headlens/py.typed",  # PEP 561: type checkers read the package's inline hints
        "headlens/analyses/data/eval_text.txt",
        "headlens/analyses/demo/model/model.safetensors",
        "headlens/analyses/demo/model_card.md.j2",
    ):
        assert must in names, must
    # every module of the three layers is in the wheel, under headlens/
    repo = REPO_ROOT
    for layer in ("probes", "analyses", "reports"):
        for src in (repo / layer).rglob("*.py"):
            if "__pycache__" not in src.parts:
                assert f"headlens/{src.relative_to(repo).as_posix()}" in names, src
    # the command is a script (bin/headlens), not an entry point into a second top-level module
    assert [n.rsplit("/", 1)[1] for n in names if ".data/scripts/" in n] == ["headlens"]
    assert not [n for n in names if n.endswith("entry_points.txt")]


@pytest.mark.slow
def test_wheel_holds_the_report_page_templates_and_static_files(wheel):
    """report.html is rendered from template files and inlines CSS/JS files: they must ship."""
    names = set(zipfile.ZipFile(wheel).namelist())
    page = ROOT / "reports" / "render" / "page"
    shipped = sorted(str(p.relative_to(page)) for d in ("templates", "static") for p in (page / d).rglob("*") if p.is_file())
    assert {"templates/report.html.j2", "templates/macros.html.j2", "static/report.css", "static/report.js"} <= set(shipped)
    for rel in shipped:
        assert f"headlens/reports/render/page/{rel}" in names, rel


@pytest.mark.slow
def test_wheel_imports_in_a_fresh_venv(wheel, tmp_path):
    """The wheel alone in a fresh venv: ``headlens`` and its layers import from the wheel (not this
    checkout) and install no top-level ``probes``/``analyses``/``reports``.  The dependencies
    (torch, ...: the layers' ``__init__`` import their public namespaces explicitly) come from the test's
    own environment through a path file: a directory named in a ``.pth`` file is not a site
    directory, so the editable install's import hook there is never run."""
    venv = tmp_path / "venv"
    # the venv gets no pip of its own (ensurepip is most of a venv's making): this pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True
    )
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site.stdout.strip()) / "test_deps.pth").write_text("\n".join(deps) + "\n")
    code = (
        "import importlib.util, headlens, headlens.probes, headlens.analyses, headlens.reports\n"
        "print(headlens.__file__)\n"
        "print(all(importlib.util.find_spec(n) is None for n in ('probes', 'analyses', 'reports')))\n"
    )
    res = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True, cwd=tmp_path)
    where, no_top_level = res.stdout.split()
    assert str(venv) in where
    assert no_top_level == "True"
    version = subprocess.run([str(venv / "bin" / "headlens"), "--version"], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert version.stdout.startswith("headlens, version ")
