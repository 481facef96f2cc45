"""The public namespace ``headlens`` loads its names on first use (PEP 562) and is still the whole of it.

* ``import headlens`` in a fresh interpreter imports no headlens module besides the package and none
  of torch, pandas, matplotlib, seaborn, transformers (each study, renderer and the CLI load when a
  name needs them);
* every name of ``__all__`` resolves, to the very object its home module holds, and ``dir()``
  lists them all; an unknown name is the usual AttributeError;
* the one table of homes (``headlens._HOMES``), ``__all__`` and the ``TYPE_CHECKING`` imports that
  editors and pyright read name the same objects;
* ``headlens.load`` in a fresh process (nothing imported but ``headlens``) knows every result kind
  that a module of ``headlens.reports.api`` defines: the registry imports its kinds itself.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys

import pytest

import headlens
import headlens.reports.api
from headlens.reports.api.result import Result

#: Libraries that ``import headlens`` alone must not load (seconds together).
HEAVY = ("torch", "pandas", "matplotlib", "seaborn", "transformers", "transformer_lens", "scipy")

#: Runs in a fresh interpreter: the modules after ``import headlens``, then the result kinds that
#: ``headlens.load`` knows, then which public names resolve to their home module's object.
_FRESH = """
import importlib, json, sys
import headlens
after_import = sorted(m for m in sys.modules if m.startswith("headlens."))
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
headlens.load
from headlens.reports.api.result import RESULT_KINDS
kinds = sorted(RESULT_KINDS)
cli_loaded = "headlens.reports.cli" in sys.modules
same = {{}}
for name, home in headlens._HOMES.items():
    module, _, attribute = home.partition(":")
    same[name] = getattr(headlens, name) is getattr(importlib.import_module(module), attribute or name)
print(json.dumps({{"after_import": after_import, "heavy": heavy, "kinds": kinds, "cli_loaded": cli_loaded, "same": same}}))
"""


@pytest.fixture(scope="module")
def fresh() -> dict:
    """What :data:`_FRESH` saw in one fresh interpreter."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", _FRESH.format(heavy=HEAVY)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _home(name: str) -> object:
    module, _, attribute = headlens._HOMES[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)


def test_import_headlens_loads_no_study_renderer_cli_or_heavy_library(fresh):
    assert fresh["after_import"] == []
    assert fresh["heavy"] == []


def test_load_in_a_fresh_process_knows_every_result_kind(fresh):
    defined = set()
    for info in pkgutil.walk_packages(headlens.reports.api.__path__, "headlens.reports.api."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Result) and cls.__module__ == info.name and cls.__dict__.get("kind"):
                defined.add(cls.kind)
    assert len(defined) >= 10
    assert fresh["kinds"] == sorted(defined)
    assert fresh["cli_loaded"] is False  # loading results needs no CLI module


def test_every_public_name_resolves_to_its_home_object_in_a_fresh_process(fresh):
    assert set(fresh["same"]) == set(headlens._HOMES)
    assert [name for name, same in fresh["same"].items() if not same] == []


@pytest.mark.parametrize("name", sorted(set(headlens.__all__) - {"__version__"}))
def test_public_name_is_its_home_modules_object(name):
    assert getattr(headlens, name) is _home(name)
    assert name in dir(headlens)


def test_from_import_and_version():
    from headlens import CensusResult, census, report
    from headlens.reports.api.census import CensusResult as home_result
    from headlens.reports.api.census import census as home_census
    from headlens.reports.runs.report.build import build_report

    assert (CensusResult, census, report) == (home_result, home_census, build_report)
    assert isinstance(headlens.__version__, str) and headlens.__version__
    assert set(headlens.__all__) <= set(dir(headlens))


def test_unknown_name_is_the_usual_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'headlens' has no attribute 'no_such_name'$"):
        headlens.no_such_name  # noqa: B018
    assert not hasattr(headlens, "_no_such_private")
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from headlens import no_such_name", {})


def test_homes_all_and_type_checking_imports_agree():
    assert len(headlens.__all__) == len(set(headlens.__all__))
    assert set(headlens.__all__) == set(headlens._HOMES) | {"__version__"}
    tree = ast.parse(inspect.getsource(headlens))
    typed = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                for alias in stmt.names:
                    home = stmt.module if alias.asname in (None, alias.name) else f"{stmt.module}:{alias.name}"
                    typed[alias.asname or alias.name] = home
    assert typed == headlens._HOMES
