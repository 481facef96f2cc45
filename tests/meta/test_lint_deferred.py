"""The deferred imports stay deferred: importing ``headlens`` or the CLI loads none of the
libraries that :data:`tests.meta.test_layout.DEFERRED_IMPORTS` keeps inside functions for what their
import does (not only for being optional).

``huggingface_hub`` reads ``HF_HUB_OFFLINE`` when it is first imported, and ``headlens demo``
sets that variable inside its commands (reports/cli/demo.py), after the CLI's modules are
imported; ``transformer_lens`` must first be imported by probes/boot.py (it changes library
loggers for good); ``transformers`` costs seconds.  A module-level import of any of them anywhere
under ``headlens`` (directly or through a hoisted headlens import) fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.meta.test_layout import DEFERRED_IMPORTS

#: Deferred for what importing them does; the rest of DEFERRED_IMPORTS are optional extras
#: (pandas itself imports pyarrow when it is installed).
ON_IMPORT = ("huggingface_hub", "transformer_lens", "transformers")


def _loaded_after(*modules: str) -> list[str]:
    """Which of :data:`ON_IMPORT` a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(json.dumps(sorted(m for m in {list(ON_IMPORT)!r} if m in sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_names_are_deferred_imports():
    assert set(ON_IMPORT) <= set(DEFERRED_IMPORTS)


def test_the_check_sees_a_loaded_library():
    assert _loaded_after("huggingface_hub") == ["huggingface_hub"]


def test_importing_headlens_and_its_cli_loads_none_of_them():
    assert _loaded_after("headlens", "headlens.reports.cli.main") == []
