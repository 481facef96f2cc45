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

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
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
import re as _re
_ind = census.scores[census.scores["detector"] == "induction"]
_tok = view.tokens
_prev = [j for j in range(len(_tok) - 1) if _tok[j] == _tok[-1]]
_row = view.pattern(1, 3)[-1]
_ev = tested.evidence.set_index(["name", "role"])
_ev13 = str(_ev.loc[("1.3", "induction"), "detail"])
_ab = ablation.table.assign(name=ablation.table["layer"].astype(str) + "." + ablation.table["head"].astype(str)).set_index("name")
_top = _ab["delta"].idxmax()
print("HEADLENS-TEXT " + _json.dumps({
    "roles": {str(r.name): str(r.roles) for r in census.heads.itertuples() if r.roles},
    "top_induction_head": str(_ind.sort_values("score").iloc[-1][["layer", "head"]].astype(int).astype(str).str.cat(sep=".")),
    "view_last_token": _tok[-1],
    "view_target": _tok[_prev[-1] + 1] if _prev else None,
    "view_target_weight": float(_row[_prev[-1] + 1]) if _prev else None,
    "view_argmax_is_target": bool(_prev) and int(_row.argmax()) == _prev[-1] + 1,
    "evidence_13": str(_ev.loc[("1.3", "induction"), "evidence"]),
    "evidence_13_second_copy_nats": float(_re.search(r"by ([+-][0-9.]+) nats on the second copy", _ev13).group(1)),
    "ablation_text": ablation.basis,
    "ablation_top": _top,
    "ablation_top_delta": float(_ab.loc[_top, "delta"]),
    "ablation_top_ci_low": float(_ab.loc[_top, "ci_low"]),
    "ablation_13": [float(_ab.loc["1.3", c]) for c in ("delta", "ci_low", "ci_high")],
    "circuit_k_edges": {f"{r.sender}->{r.receiver}": float(r.ci_low)
                        for r in result.circuit_edges.query("sender in ['0.0', 'mlp0'] and input == 'k'").itertuples()},
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

    def cell_with(source_start: str):
        found = [c for c in cells if c.source.lstrip().startswith(source_start)]
        assert found, f"no cell starts with {source_start!r}"
        return found[0]

    facts_line = [line for line in stream_text(cells[-1]).splitlines() if line.startswith("HEADLENS-CHECK ")]
    assert facts_line, f"the check cell printed nothing: {cells[-1].get('outputs')}"
    facts = json.loads(facts_line[0].removeprefix("HEADLENS-CHECK "))
    assert facts["census_rows"] == facts["n_heads"] == facts["census_distinct_heads"]  # one row per head
    assert facts["roles_heads_known"]
    assert facts["ablation_rows"] == facts["n_heads"]
    assert facts["figure_is_figure"] and facts["view_plot_is_figure"]
    assert facts["loaded_heads_equal"] and facts["saved_manifest"]

    # what the text says, against the numbers the run produced
    text_line = [line for line in stream_text(cells[-1]).splitlines() if line.startswith("HEADLENS-TEXT ")]
    assert text_line, f"the check cell printed no text facts: {cells[-1].get('outputs')}"
    said = json.loads(text_line[0].removeprefix("HEADLENS-TEXT "))
    # "one previous-token head (0.0) and four induction heads (layer 1), head 1.3 with the highest induction score"
    assert said["roles"] == {"0.0": "previous_token", "1.0": "induction", "1.1": "induction", "1.2": "induction", "1.3": "induction"}
    assert said["top_induction_head"] == "1.3"
    # "at zer ... head 1.3 puts nearly all of its attention on os, the token that followed zer in the first copy"
    assert said["view_last_token"] == "zer" and said["view_target"] == "os"
    assert said["view_argmax_is_target"] and said["view_target_weight"] > 0.9
    # "where removing it raised the loss on the second copy by more than a nat"
    assert said["evidence_13"] == "supported" and said["evidence_13_second_copy_nats"] > 1.0
    # the ablation: measured on the demo's held-out text; "0.3 ... about 0.4 nats, an interval well clear of 0";
    # "1.3 ... about +0.1 nats, an interval that includes 0"
    assert "held-out" in said["ablation_text"]
    assert said["ablation_top"] == "0.3" and 0.3 <= said["ablation_top_delta"] <= 0.5 and said["ablation_top_ci_low"] > 0.1
    delta13, low13, high13 = said["ablation_13"]
    assert 0.05 <= delta13 <= 0.2 and low13 < 0 < high13
    # "the previous-token head 0.0 feeds the induction heads 1.x through their keys (directly and through MLP 0)"
    wanted = {f"{s}->1.{h}" for s in ("0.0", "mlp0") for h in range(4)}
    assert wanted <= set(said["circuit_k_edges"]) and all(said["circuit_k_edges"][e] > 0 for e in wanted), said["circuit_k_edges"]

    # each result's view leads with its findings (the CLI's lines), before its collapsed tables
    def findings_of(source_start: str) -> str:
        html = outputs_of(cell_with(source_start), "text/html")
        assert html, f"{source_start}: no HTML view"
        first_table = html[0].find("<details")
        assert first_table > 0 and "<table" not in html[0][:first_table]
        return html[0][:first_table]

    assert re.search(r"\s1\.3\s+induction\s+\(induction 0\.\d{3} \[", findings_of("census = headlens.census"))
    assert "scores: no interval (too few prompts" in findings_of("headlens.census(model, n_prompts=1")
    assert re.search(r"evidence: \d+ supported", findings_of("tested = headlens.evidence("))
    patched = findings_of("pt = headlens.patch")
    assert "; gap " in patched and "attribution patching" in patched and "by chance" in patched
    assert "heads with the largest |delta|" in findings_of("ablation = headlens.ablate")
    assert "faithfulness" in findings_of("result = headlens.circuit")

    # results show as HTML in the notebook; figures as PNG images; the view is self-contained HTML
    assert outputs_of(cell_with("census = headlens.census"), "text/html")
    assert outputs_of(cell_with("fig = census.plot"), "image/png")
    assert outputs_of(cell_with("headlens.plot_heads"), "image/png")
    view_html = outputs_of(cell_with("prompt = "), "text/html")
    assert view_html and "<script" in view_html[0]
    assert not EXTERNAL.search(view_html[0]), "the attention view fetches something from the network"
