"""The Result base of every study: tables by name, save (atomic, refuses a non-empty folder),
read back by ``load`` (text columns stay text), plot/figures as Figures, repr and HTML."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from headlens.probes.errors import InputError, OutputExistsError
from headlens.reports.api.registry import load
from headlens.reports.api.result import RESULT_KINDS, Result


@dataclass(kw_only=True, repr=False)
class ToyResult(Result):
    kind = "toy_result_for_tests"
    marker_files = ("toy.csv",)

    def _figure_makers(self) -> dict[str, Callable[[], object]]:
        return {"toy_plot": self._plot}

    def _plot(self):
        from matplotlib.figure import Figure

        fig = Figure()
        fig.subplots().plot(self["toy"]["value"].to_numpy())
        return fig

    def texts(self) -> dict[str, str]:
        return {"summary.md": f"# toy\n{len(self['toy'])} rows\n"}


def _toy() -> ToyResult:
    table = pd.DataFrame(
        {"layer": [0, 1], "head": [10, 2], "name": ["0.10", "1.2"], "roles": ["induction", ""], "value": [0.5, float("nan")]}
    )
    return ToyResult(tables={"toy": table}, manifest={"model": {"model": "demo"}, "seed": 3})


def test_registered_and_getitem() -> None:
    result = _toy()
    assert RESULT_KINDS["toy_result_for_tests"] is ToyResult
    assert result["toy"] is result.tables["toy"]
    with pytest.raises(KeyError, match=r"no table 'nope'.*tables: toy"):
        result["nope"]


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_save_writes_files_and_load_reads_them_back(tmp_path: Path) -> None:
    result = _toy()
    out = result.save(tmp_path / "run")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "summary.md", "toy.csv", "toy_plot.png", "toy_plot.svg"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["result"] == "toy_result_for_tests" and manifest["seed"] == 3
    back = load(out)
    assert type(back) is ToyResult
    pd.testing.assert_frame_equal(back["toy"], result["toy"])  # "0.10" stays text, "" stays "", NaN stays NaN
    assert back.manifest["seed"] == 3


def test_save_refuses_a_non_empty_folder_and_overwrite_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(OutputExistsError, match="not empty"):
        _toy().save(out)
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    _toy().save(out, overwrite=True)
    assert (out / "mine.txt").read_text() == "keep me" and (out / "toy.csv").is_file()


def test_save_failing_midway_leaves_no_folder(tmp_path: Path) -> None:
    class Broken(ToyResult):
        def texts(self) -> dict[str, str]:
            raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        Broken(tables=_toy().tables, manifest={}).save(tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_load_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"folder=.*no such folder"):
        load(tmp_path / "missing")
    with pytest.raises(InputError, match=r"folder=.*no manifest.json"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"result": "no_such_kind"}))
    with pytest.raises(InputError, match=r"folder=.*'no_such_kind'"):
        load(tmp_path)


def test_load_an_older_folder_by_its_marker_files(tmp_path: Path) -> None:
    out = _toy().save(tmp_path / "run")
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["result"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert type(load(out)) is ToyResult


def test_plot_figures_repr_html() -> None:
    from matplotlib.figure import Figure

    result = _toy()
    assert isinstance(result.plot(), Figure) and isinstance(result.plot("toy_plot"), Figure)
    assert list(result.figures()) == ["toy_plot"]
    with pytest.raises(InputError, match=r"name='nope'.*toy_plot"):
        result.plot("nope")
    text = repr(result)
    assert text == "<ToyResult model='demo': toy 2x5>"
    page = result._repr_html_()
    assert "<table" in page and "0.10" in page and "ToyResult" in page


def test_every_registered_result_keeps_the_short_repr() -> None:
    """A subclass declared ``@dataclass`` without ``repr=False`` would print every table."""
    for kind, cls in RESULT_KINDS.items():
        assert cls.__repr__ is Result.__repr__, f"{kind}: declare {cls.__name__} with @dataclass(kw_only=True, repr=False)"


def test_load_of_a_folder_missing_a_table_is_one_line_naming_the_folder(tmp_path):
    """A manifest naming a kind whose tables are partly missing (a partial copy) or unreadable:
    one InputError naming the folder, never a raw FileNotFoundError/ParserError."""
    folder = tmp_path / "partial"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"result": "census"}')
    (folder / "scores.csv").write_text("layer,head\n0,0\n")  # roles.csv missing
    with pytest.raises(InputError, match=r"holds a 'census' result that cannot be read: .*roles\.csv"):
        load(folder)
