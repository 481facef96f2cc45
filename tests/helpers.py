"""Test helpers: one ``assert_close`` with named tolerances."""

from __future__ import annotations

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
