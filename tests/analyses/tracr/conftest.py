"""Shared tracr builds: each (program, max_seq_len) compiled, converted and checked once per session.

``tracr_build(program, max_seq_len=None)`` returns :func:`headlens.analyses.tracr.build.build_tracr_model`'s
result for that program, built on first use into a session folder; later calls (the conversion,
ground-truth and circuit tests ask for hist, reverse and shift more than once) get the same build.  Every
build still runs the whole path (compile, convert, the agreement check against RASP) once per xdist
worker that asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tracr_build(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")
    from headlens.analyses.tracr.build import build_tracr_model

    root = tmp_path_factory.mktemp("tracr-builds")
    built: dict[tuple[str, int | None], Any] = {}

    def get(program: str, max_seq_len: int | None = None) -> Any:
        key = (program, max_seq_len)
        if key not in built:
            name = program if max_seq_len is None else f"{program}{max_seq_len}"
            built[key] = build_tracr_model(program, root / name, max_seq_len=max_seq_len)
        return built[key]

    return get
