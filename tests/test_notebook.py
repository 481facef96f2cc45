"""``examples/tutorial.ipynb`` runs from top to bottom and shows what it says it shows.

nbclient executes the notebook in a kernel started from this interpreter (a kernel spec written
to a temporary ``JUPYTER_PATH``, so no global Jupyter set-up is needed or used), in a temporary
working folder, offline.  Any cell error fails the test.  Then a check cell, run in the same
kernel after the tutorial's cells (never saved in the notebook), reports facts the test asserts:
the census has one row per head, the view is self-contained, the figures are Figures.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import ipykernel  # noqa: F401 - the kernel the notebook runs in; the test extra installs it
import nbclient
import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"
KERNEL_NAME = "headlens-test"
#: Seconds one cell may take (the census and the ablation take a few seconds on 2 cores).
CELL_TIMEOUT_S = 300
#: Seconds for the kernel to start.
STARTUP_TIMEOUT_S = 120
#: An attribute that would fetch something from the network.
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", re.IGNORECASE)

CHECK_CELL = """
import json as _json
from matplotlib.figure import Figure as _Figure
_keys = set(zip(census.heads["layer"], census.heads["head"]))
print("HEADLENS-CHECK " + _json.dumps({
    "n_heads": model.n_layers * model.n_heads,
    "census_rows": len(census.heads),
    "census_distinct_heads": len(_keys),
    "roles_heads_known": bool(set(zip(census.roles["layer"], census.roles["head"])) <= _keys),
    "ablation_rows": len(ablation.table),
    "figure_is_figure": isinstance(fig, _Figure),
    "view_plot_is_figure": isinstance(view.plot(), _Figure),
    "loaded_heads_equal": bool(again.heads.equals(census.heads)),
    "saved_manifest": (folder / "manifest.json").is_file(),
}))
"""


def write_kernel_spec(jupyter_path: Path) -> None:
    """A kernel spec named :data:`KERNEL_NAME` that runs ipykernel on this interpreter."""
    spec = jupyter_path / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "headlens test", "language": "python"}), encoding="utf-8")


def execute(notebook, workdir: Path):
    """Run every cell of ``notebook`` in a fresh kernel of this interpreter, in ``workdir``."""
    client = nbclient.NotebookClient(
        notebook,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=STARTUP_TIMEOUT_S,
        resources={"metadata": {"path": str(workdir)}},
    )
    return client.execute()


def outputs_of(cell, mime: str) -> list[str]:
    return ["".join(o["data"][mime]) for o in cell.get("outputs", []) if mime in o.get("data", {})]


def stream_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working folder; the kernel spec on JUPYTER_PATH; offline."""
    jupyter = tmp_path / "jupyter"
    write_kernel_spec(jupyter)
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the tutorial has no code cell"
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "clear the outputs before committing"


def test_a_failing_cell_fails_the_run(kernel_env: Path) -> None:
    """Proves the runner reports a cell error instead of carrying on."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("raise ValueError('planted')")])
    with pytest.raises(CellExecutionError, match="planted"):
        execute(nb, kernel_env)


@pytest.mark.slow
def test_tutorial_runs_and_shows_what_it_says(kernel_env: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    done = execute(nb, kernel_env)
    cells = [c for c in done.cells if c.cell_type == "code"]

    facts_line = [line for line in stream_text(cells[-1]).splitlines() if line.startswith("HEADLENS-CHECK ")]
    assert facts_line, f"the check cell printed nothing: {cells[-1].get('outputs')}"
    facts = json.loads(facts_line[0].removeprefix("HEADLENS-CHECK "))
    assert facts["census_rows"] == facts["n_heads"] == facts["census_distinct_heads"]  # one row per head
    assert facts["roles_heads_known"]
    assert facts["ablation_rows"] == facts["n_heads"]
    assert facts["figure_is_figure"] and facts["view_plot_is_figure"]
    assert facts["loaded_heads_equal"] and facts["saved_manifest"]

    def cell_with(source_start: str):
        found = [c for c in cells if c.source.lstrip().startswith(source_start)]
        assert found, f"no cell starts with {source_start!r}"
        return found[0]

    # results show as HTML in the notebook; figures as PNG images; the view is self-contained HTML
    assert outputs_of(cell_with("census = headlens.census"), "text/html")
    assert outputs_of(cell_with("fig = census.plot"), "image/png")
    assert outputs_of(cell_with("headlens.plot_heads"), "image/png")
    view_html = outputs_of(cell_with("prompt = "), "text/html")
    assert view_html and "<script" in view_html[0]
    assert not EXTERNAL.search(view_html[0]), "the attention view fetches something from the network"
