"""Lint, formatting and types, as configured in ``pyproject.toml``: ``ruff check``, ``ruff format
--check`` and pyright (basic mode) find nothing in the tree.

Each check first proves, on a small tree laid out like this one (the real ``pyproject.toml`` and
``.pyright`` link tree copied into a temporary folder), that a planted finding makes it fail, and
that pyright resolves ``headlens.*`` to that tree's own folders, not to an installed or
``build/lib`` copy.

:data:`PENDING` names the files whose findings are left for a later change, each with its reason.

The whole-tree checks are marked ``lint``: a plain ``pytest`` leaves them out, and ``scripts/lint.sh``
(``pytest -m lint tests/meta/test_lint.py``) runs them, which ``.ci/run`` does in a process of its own
beside the suite (pyright over the tree takes over a minute).  The planted-finding checks, which
prove each tool can fail here, run in every plain ``pytest``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
BIN = Path(sys.executable).parent
LINK_TREE = ROOT / ".pyright" / "headlens"
#: The repository folders the link tree serves as headlens' subpackages (setup.py's package_dir).
LAYERS = ("probes", "analyses", "reports")

#: Per check, the files whose findings are left for later (``fnmatch`` patterns), each with its
#: reason.  A pattern is removed once its files are clean (the checks below fail on a stale one).
PENDING: dict[str, dict[str, str]] = {"ruff check": {}, "ruff format": {}, "pyright": {}}


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}: pip install -e '.[test]'")
    return str(path)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=900)


def ruff_findings(root: Path) -> dict[str, list[str]]:
    """``ruff check`` findings by file (path relative to ``root``)."""
    proc = _run([_tool("ruff"), "check", "--no-cache", "--output-format", "json", "."], root)
    if proc.returncode not in (0, 1):
        pytest.fail(f"ruff check did not run: {proc.stderr.strip()}")
    out: dict[str, list[str]] = {}
    for f in json.loads(proc.stdout):
        rel = Path(f["filename"]).resolve().relative_to(root.resolve()).as_posix()
        out.setdefault(rel, []).append(f"{rel}:{f['location']['row']}: {f['code']} {f['message']}")
    return out


def unformatted(root: Path) -> set[str]:
    """Files ``ruff format`` would change."""
    proc = _run([_tool("ruff"), "format", "--no-cache", "--check", "--output-format", "json", "."], root)
    if proc.returncode not in (0, 1):
        pytest.fail(f"ruff format did not run: {proc.stderr.strip()}")
    return {Path(f["filename"]).resolve().relative_to(root.resolve()).as_posix() for f in json.loads(proc.stdout)}


def pyright_findings(root: Path) -> dict[str, list[str]]:
    """pyright's errors and warnings by file, with this interpreter's site-packages."""
    proc = _run([_tool("pyright"), "--outputjson", "--pythonpath", sys.executable, "--project", str(root)], root)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not run (needs Node.js): {proc.stderr.strip() or proc.stdout.strip()}")
    out: dict[str, list[str]] = {}
    for d in report["generalDiagnostics"]:
        if d["severity"] not in ("error", "warning"):
            continue
        rel = Path(d["file"]).resolve().relative_to(root.resolve()).as_posix()
        line = d["range"]["start"]["line"] + 1
        out.setdefault(rel, []).append(f"{rel}:{line}: {d.get('rule', d['severity'])} {d['message'].splitlines()[0]}")
    return out


def _failures(found: dict[str, list[str]], check: str, hint: str = "") -> str:
    """The findings outside ``PENDING[check]`` and its stale patterns, as one message ('' if none)."""
    pending = PENDING[check]
    bad = {f: v for f, v in found.items() if not any(fnmatch.fnmatch(f, p) for p in pending)}
    lines = [line for f in sorted(bad) for line in bad[f]]
    msg = f"{check}{hint}: {len(lines)} finding(s)\n" + "\n".join(lines[:200]) if lines else ""
    stale = sorted(p for p in pending if not any(fnmatch.fnmatch(f, p) for f in found))
    if stale:
        msg += f"\nPENDING[{check!r}] patterns whose files are now clean (remove them): {stale}"
    return msg


# --------------------------------------------------------------------------- the checks can fail

CLEAN = {
    "src/headlens/__init__.py": '"""Top."""\n',
    "src/headlens/py.typed": "",
    "probes/__init__.py": '"""Probes."""\n',
    "probes/width.py": '"""A typed module."""\n\n\ndef width() -> int:\n    return 3\n',
    "analyses/__init__.py": "",
    "reports/__init__.py": "",
    "tests/__init__.py": "",
    "tests/test_width.py": (
        '"""Uses it."""\n\nfrom headlens.probes.width import width\n\n\n'
        "def test_width() -> None:\n    n: int = width()\n    assert n == 3\n"
    ),
    "benchmarks/_common.py": '"""Shared."""\n',
    # a stale copy of the package where an old build leaves one: width() returned a str there
    "build/lib/headlens/probes/width.py": 'def width() -> str:\n    return "3"\n',
}


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    """A tree laid out like this one, clean, with the real pyproject.toml and .pyright link tree."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / ".pyright", tmp_path / ".pyright", symlinks=True)
    for rel, text in CLEAN.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "src/headlens/__main__.py").write_text('"""Main."""\n')
    return tmp_path


def test_ruff_check_fails_on_a_planted_finding(small_tree):
    assert ruff_findings(small_tree) == {}
    (small_tree / "probes/width.py").write_text('"""A typed module."""\n\nimport os\n\n\ndef width() -> int:\n    return 3\n')
    assert [line.split(": ", 1)[1] for line in ruff_findings(small_tree)["probes/width.py"]] == ["F401 `os` imported but unused"]


def test_ruff_format_fails_on_a_planted_finding(small_tree):
    assert unformatted(small_tree) == set()
    (small_tree / "probes/width.py").write_text('"""A typed module."""\n\n\ndef width() -> int:\n    return   3\n')
    assert unformatted(small_tree) == {"probes/width.py"}


def test_pyright_fails_on_a_planted_finding_and_reads_the_trees_own_files(small_tree):
    assert pyright_findings(small_tree) == {}
    # the test now asks for a str: wrong for probes/width.py, right for the stale build/lib copy
    test = small_tree / "tests/test_width.py"
    test.write_text(test.read_text().replace("n: int = width()", "n: str = width()").replace("== 3", "== '3'"))
    found = pyright_findings(small_tree)
    assert list(found) == ["tests/test_width.py"] and len(found["tests/test_width.py"]) == 1
    assert "reportAssignmentType" in found["tests/test_width.py"][0] and '"int"' in found["tests/test_width.py"][0]


def test_the_link_tree_serves_the_repository_folders():
    """Every link resolves into this repository; src/headlens's files are all linked."""
    assert LINK_TREE.is_dir() and not LINK_TREE.is_symlink()
    for layer in LAYERS:
        assert (LINK_TREE / layer).is_symlink() and (LINK_TREE / layer).resolve() == ROOT / layer
    top = {p.name for p in (ROOT / "src/headlens").iterdir() if p.name != "__pycache__"}
    links = {p.name for p in LINK_TREE.iterdir()} - set(LAYERS)
    missing, extra = sorted(top - links), sorted(links - top)
    assert links == top, f"make .pyright/headlens link exactly src/headlens's files: missing {missing}, extra {extra}"
    for name in top:
        link = LINK_TREE / name
        assert link.is_symlink() and not Path(os.readlink(link)).is_absolute(), f"{link} is not a relative link"
        assert link.resolve() == (ROOT / "src/headlens" / name).resolve()


# --------------------------------------------------------------------------- the tree


@pytest.mark.lint
def test_ruff_check_finds_nothing():
    msg = _failures(ruff_findings(ROOT), "ruff check")
    assert not msg, msg


@pytest.mark.lint
def test_ruff_format_changes_nothing():
    msg = _failures({f: [f] for f in unformatted(ROOT)}, "ruff format", " (run `ruff format <file>`)")
    assert not msg, msg


@pytest.mark.slow
@pytest.mark.lint
def test_pyright_finds_nothing():
    msg = _failures(pyright_findings(ROOT), "pyright")
    assert not msg, msg


def test_ci_runs_the_lint_checks_and_the_stress_run_beside_the_suite():
    """The whole-tree checks left out of a plain run are still run by CI: ``.ci/run`` starts
    ``scripts/lint.sh`` (which selects exactly the ``lint``-marked tests here) and the ``stress`` run."""
    ci = (ROOT / ".ci/run").read_text()
    assert "bash scripts/lint.sh" in ci and "bash scripts/test.sh -m stress" in ci
    # the suite itself: the README's test command, less only the stress run's three-moment subset
    suite = [line for line in ci.splitlines() if line.startswith("bash scripts/test.sh")]
    assert suite == ['bash scripts/test.sh --deselect "$THREE_MOMENTS"'], suite
    assert "-m lint tests/meta/test_lint.py" in (ROOT / "scripts/lint.sh").read_text()
    marked = sorted(
        name for name, f in globals().items() if name.startswith("test_") and any(m.name == "lint" for m in getattr(f, "pytestmark", []))
    )
    assert marked == ["test_pyright_finds_nothing", "test_ruff_check_finds_nothing", "test_ruff_format_changes_nothing"]
    addopts = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if line.startswith("addopts"))
    assert "-m 'not stress and not lint'" in addopts
