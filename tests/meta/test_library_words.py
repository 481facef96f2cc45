"""Library errors speak parameter names (``device_map=``, ``max_memory must ...``), never CLI flags;
the CLI says its flags (``reports/cli/common.flag_words``, the one place the words are mapped).

* a scan of every string in ``probes/`` and ``analyses/`` (docstrings and comments aside) for a
  ``--flag``: it first finds one planted in a small source;
* real library errors, raised by the library, name no flag, and ``flag_words`` turns each into
  the CLI's words.
"""

from __future__ import annotations

import ast
import re

import pytest

from headlens.analyses.sinks.config import SinkConfig
from headlens.probes.errors import HeadlensError
from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.probes.placement import placement_of
from headlens.probes.streaming import choose_attention
from headlens.reports.cli.common import flag_words
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")

#: Strings that name a CLI flag on purpose, each with its reason.
_PIP = "pip's and uv's own flags: the package client's command line, and the pip command a message tells a user to run"
ALLOWED: dict[tuple[str, str], str] = {
    **{
        ("probes/package_fetch.py", flag): _PIP
        for flag in ("--version", "--no-deps", "--hash", "--only-binary", "--require-hashes", "--target")
    },
    ("probes/weight_report.py", "--allow-new-weights"): "a log warning, which the CLI prints as it is (flag_words maps errors): "
    "it names the parameter and the flag",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _settings(tree: ast.AST) -> set[int]:
    """ids of the strings inside ``setting(...)`` calls (:mod:`headlens.probes.settings`): a config
    field's help and flag are the CLI's words by design (``--help`` shows them)."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setting"
        for inner in ast.walk(node)
    }


def flags_in_strings(source: str) -> list[tuple[int, str]]:
    """``(line, flag)`` for each ``--flag`` in a string of ``source`` (f-string parts too), docstrings
    and settings' help aside."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _settings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [(node.lineno, m) for m in FLAG.findall(node.value)]
    return sorted(set(found))


def test_the_scan_finds_a_planted_flag():
    source = (
        '"""Module doc naming --model is fine."""\n'
        "def f(x):\n"
        '    """So is --device here."""\n'
        "    # and --dtype in a comment\n"
        '    raise ValueError(f"--window {x} is too long; a-b--c and x--y are not flags")\n'
        'n: int = setting(1, help="the help of --n, as --help shows it", flag="--n")\n'
    )
    assert flags_in_strings(source) == [(5, "--window")]


def test_library_strings_name_no_cli_flag():
    bad = []
    for layer in ("probes", "analyses"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, flag in flags_in_strings(path.read_text(encoding="utf-8")):
                if (rel, flag) not in ALLOWED:
                    bad.append(f"{rel}:{line}: {flag}")
    assert not bad, "library strings that name a CLI flag (name the parameter: `name=value`):\n" + "\n".join(bad)


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(HeadlensError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    ("call", "library", "cli"),
    [
        (lambda: placement_of(None, "cpu=1GiB"), "max_memory needs device_map=", "--max-memory needs --device-map (auto"),
        (lambda: placement_of("auto", device="cpu"), "device='cpu' and device_map= both", "--device cpu and --device-map both"),
        (lambda: placement_of("nowhere-at-all"), "device_map='nowhere-at-all': not auto", "--device-map nowhere-at-all: not auto"),
        (lambda: placement_of("auto", "cpu"), "max_memory='cpu': expected DEVICE=SIZE", "--max-memory cpu: expected DEVICE=SIZE"),
        (lambda: placement_of("auto", "cpu=lots"), "max_memory='cpu=lots': not a size", "--max-memory cpu=lots: not a size"),
        (lambda: choose_attention("fast", batch=1, n_heads=1, n=1), "attention='fast': choose from", "--attention fast: choose from"),
        (lambda: SinkConfig(eps=2.0), "eps must be strictly between", "--eps must be strictly between"),
        (lambda: SinkConfig(window=1), "window must be an integer of at least 2", "--window must be an integer of at least 2"),
        (lambda: SinkConfig(keep_first=(-1,)), "keep_first must hold", "--keep-first must hold"),
    ],
)
def test_library_errors_name_parameters_and_the_cli_says_flags(call, library, cli):
    message = _message(call)
    assert library in message and not FLAG.search(message), message
    assert cli in flag_words(message), flag_words(message)


def test_overwrite_is_a_parameter_in_the_library_and_a_flag_in_the_cli(tmp_path):
    (tmp_path / "f.txt").write_text("kept")
    for fn, path in ((check_out_dir, tmp_path), (check_out_file, tmp_path / "f.txt")):
        message = _message(fn, path, overwrite=False)
        assert "pass overwrite=True" in message and not FLAG.search(message), message
        assert "pass --overwrite" in flag_words(message)
    assert (tmp_path / "f.txt").read_text() == "kept"
