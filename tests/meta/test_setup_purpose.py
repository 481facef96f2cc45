"""Set-up per purpose (issue 32): ``scripts/bootstrap.sh runtime`` (the main job, ``scripts/demo.sh``)
installs the runtime dependencies only; ``scripts/bootstrap.sh test`` (and no argument) adds the
``[test]`` extra.

The scripts run for real in a copy of the repository whose ``.venv`` holds a stand-in python and
``headlens`` that record their arguments (nothing is installed, nothing reaches the network); the
runtime install's dependency closure is read from the installed distributions' metadata.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
#: Tools only the tests use: each is in the [test] extra, none may reach the runtime install.
TEST_TOOLS = ("pytest", "pytest-xdist", "ruff", "pyright", "mkdocs", "mkdocstrings", "playwright", "ray", "nbclient", "ipykernel")

_RECORDER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls.log"
"""


@pytest.fixture
def fake_repo(tmp_path: Path) -> Path:
    """A copy of scripts/ (and pyproject.toml) with a recording .venv/bin/python and headlens."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "headlens"):
        (bin_dir / name).write_text(_RECORDER)
        (bin_dir / name).chmod(0o755)
    # the browser set-up records its call too (installs nothing): tests/meta/test_chromium_setup.py runs it
    (repo / "scripts" / "chromium.sh").write_text('#!/usr/bin/env bash\necho "chromium.sh $*" >> "$(dirname "$0")/../.venv/calls.log"\n')
    return repo


def _run(repo: Path, script: str, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    proc = subprocess.run(["bash", str(repo / "scripts" / script), *args], capture_output=True, text=True, timeout=60, env=dict(os.environ))
    log = repo / ".venv" / "calls.log"
    return proc, log.read_text().splitlines() if log.exists() else []


def _installs(calls: list[str]) -> list[str]:
    """The last argument of each ``python -m pip install`` call: what it installs."""
    return [c.split()[-1] for c in calls if c.startswith("python -m pip install")]


def test_runtime_installs_torch_then_the_package_without_extras(fake_repo):
    proc, calls = _run(fake_repo, "bootstrap.sh", "runtime")
    assert proc.returncode == 0, proc.stderr
    assert _installs(calls) == ["torch==2.13.0", "."]
    assert calls[-1] == "headlens --version"  # no browser set-up either


@pytest.mark.parametrize("args", [("test",), ()], ids=["test", "no-argument"])
def test_test_purpose_adds_the_test_extra(fake_repo, args):
    proc, calls = _run(fake_repo, "bootstrap.sh", *args)
    assert proc.returncode == 0, proc.stderr
    assert _installs(calls) == ["torch==2.13.0", ".[test]"]
    assert calls[-1] == "chromium.sh "  # headless Chromium for the browser tests, as CI has it (issue 47 item 9)


def test_an_unknown_purpose_is_one_line_and_exit_2(fake_repo):
    proc, calls = _run(fake_repo, "bootstrap.sh", "everything")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["bootstrap.sh: unknown purpose 'everything' (expected runtime or test)"]
    assert calls == []


def test_the_main_job_sets_up_the_runtime_only(fake_repo):
    """scripts/demo.sh end to end with the stand-ins: its set-up installs no extra, then its steps run."""
    proc, calls = _run(fake_repo, "demo.sh")
    assert proc.returncode == 0, proc.stderr
    assert _installs(calls) == ["torch==2.13.0", "."]
    assert calls[-1] == "headlens demo run --out demo-out"


def _closure(name: str) -> set[str]:
    """The installed distributions a plain install of ``name`` (no extras) pulls in."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for text in metadata.requires(todo.pop()) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            if dep not in seen:
                seen.add(dep)
                try:
                    metadata.distribution(dep)
                except metadata.PackageNotFoundError:
                    continue
                todo.append(dep)
    return seen


def test_the_runtime_dependencies_pull_in_no_test_tool():
    reqs = [Requirement(r) for r in metadata.requires("headlens") or []]
    test_extra = {canonicalize_name(r.name) for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "test"})}
    assert set(TEST_TOOLS) <= test_extra  # the list above names real members of the extra
    runtime = _closure("headlens")
    assert {"torch", "transformer-lens", "pandas", "click"} <= runtime  # the closure is read, not empty
    assert not runtime & set(TEST_TOOLS)
