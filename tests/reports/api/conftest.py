"""Study runs on the demo model shared by this directory's modules: one run of each, per session.

test_column_schema.py and test_roundtrip_exact.py both check tables of the studies' results on the
demo model (their columns and dtypes; their exact round trip through ``save``/``load``) on small
runs: where both ran the same study with the same settings, :func:`demo_study` runs it once and
:func:`demo_saved` saves it once into a new folder and reads it back, and both modules check that
one result and that one copy (``save`` writes files and leaves the result as it was).  A session
fixture is per xdist worker: when the two modules run on different workers, each worker makes its
own runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

#: Small runs: the tables' schema and their round trip are under test, not the statistics.
SMALL: dict[str, Any] = {"n_windows": 2, "window": 32}


def _makers(demo) -> dict[str, Callable[[], Any]]:
    import headlens

    return {
        "census": lambda: headlens.census(demo, n_prompts=8, n_bootstrap=20),
        "ablate": lambda: headlens.ablate(demo, n_bootstrap=20, **SMALL),
        "prune": lambda: headlens.prune(demo, step=0.5, random_seeds=1, **SMALL),
        "patch": lambda: headlens.patch(
            demo,
            builtin="induction",
            n_pairs=6,
            n_resamples=20,
            receivers=((1, 0),),
            attribution=True,
            dla=True,
            directions=("denoising", "noising"),
        ),
        "sinks": lambda: headlens.sinks(demo, n_prompts=4, n_long=1, long_tokens=64, attn_windows=(8,), max_single=1),
        "kv": lambda: headlens.kv(demo),
        "verify": lambda: headlens.verify(demo),
    }


@pytest.fixture(scope="session")
def demo_study(demo_model) -> Callable[[str], Any]:
    """``demo_study(name)``: the study ``name`` run on the demo model with this directory's small
    settings (every optional table on), once per session.  Read it; do not change its tables."""
    makers = _makers(demo_model)
    done: dict[str, Any] = {}

    def get(name: str):
        if name not in done:
            done[name] = makers[name]()
        return done[name]

    return get


@pytest.fixture(scope="session")
def demo_saved(demo_study, tmp_path_factory) -> Callable[[str], tuple[Any, Any]]:
    """``demo_saved(name)``: ``(result, back)``: :func:`demo_study`'s result, saved once per session
    into a new folder (a table file for ablate and kv, as their commands write) and read back with
    ``headlens.load``."""
    import headlens

    done: dict[str, tuple[Any, Any]] = {}

    def get(name: str):
        if name not in done:
            result = demo_study(name)
            out = tmp_path_factory.mktemp(f"saved_{name}") / (f"{name}.csv" if name in ("ablate", "kv") else name)
            result.save(out)
            done[name] = (result, headlens.load(out))
        return done[name]

    return get
