"""Test helpers: one ``assert_close`` with named tolerances; the figure formats the tests write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

#: Named tolerances (absolute, relative).
TOL = {
    "exact": (0.0, 0.0),
    "float32": (1e-5, 1e-5),
    "reference": (1e-6, 1e-5),  # same op order, another implementation
    "float32_loose": (1e-4, 1e-4),
    "bfloat16": (3e-2, 3e-2),
}


def assert_close(actual, expected, tol: str = "float32", msg: str = "") -> None:
    atol, rtol = TOL[tol]
    actual_t = torch.as_tensor(actual).detach().float().cpu()
    expected_t = torch.as_tensor(expected).detach().float().cpu()
    torch.testing.assert_close(actual_t, expected_t, atol=atol, rtol=rtol, msg=(lambda m: f"{msg} [{tol}] {m}") if msg else None)


#: What tests marked ``png_figures`` write figures as (tests/conftest.py's ``_png_figures``): savefig
#: is half of a quick report's time, and the SVG and PDF copies are most of it.
TEST_FIGURE_FORMATS = ("png",)


@contextmanager
def figure_formats(formats: tuple[str, ...] = TEST_FIGURE_FORMATS) -> Iterator[None]:
    """Within the block, study results (:attr:`headlens.reports.api.result.Result.figure_formats`)
    and the report's figures (``FIGURE_FORMATS``) are written in ``formats`` only; the manifests and
    file lists, which read the same attributes, agree.  For tests: the library's defaults stay."""
    from headlens.reports.api.result import Result
    from headlens.reports.render.figures import report as report_figures
    from headlens.reports.runs.report import stage_census

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Result, "figure_formats", tuple(formats))
        mp.setattr(report_figures, "FIGURE_FORMATS", tuple(formats))
        mp.setattr(stage_census, "FIGURE_FORMATS", tuple(formats))
        yield
