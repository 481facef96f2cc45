"""Study runs on the demo model shared by this directory's modules: one run of each, per session;
and two ways this directory's tests spare work that is not what they check.

test_schema.py and test_result_roundtrip.py both check tables of the studies' results on the
demo model (their columns and dtypes; their exact round trip through ``save``/``load``) on small
runs: where both ran the same study with the same settings, :func:`demo_study` runs it once and
:func:`demo_saved` saves it once into a new folder and reads it back, and both modules check that
one result and that one copy (``save`` writes files and leaves the result as it was).  A session
fixture is per xdist worker: when the two modules run on different workers, each worker makes its
own runs.

:func:`tables_saved` is ``result.save(out)`` with every figure made (each maker runs, as in any
save) but no figure file written: for the tests of tables, files read back and manifests, which
never open a figure (each study's figure files are checked by its own figure and CLI tests).
:func:`session_models` hands a command given ``-m`` a model the session has loaded already (a
load is half a second of CPU) where loading it is not what the test checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

#: Small runs: the tables' schema and their round trip are under test, not the statistics.
SMALL: dict[str, Any] = {"n_windows": 2, "window": 32}
#: The evaluation text of the demo runs here that measure on text: the built-in text, named (the
#: tables' columns and dtypes do not depend on the text; the demo's default, its held-out split,
#: is read from the standard library's sources (a second and more per process) and is tested in
#: tests/analyses/measure/test_texts_choice.py and test_heldout.py).
BUILTIN: dict[str, Any] = {"text": "builtin"}


def _makers(demo) -> dict[str, Callable[[], Any]]:
    import headlens

    return {
        "census": lambda: headlens.census(demo, n_prompts=8, n_bootstrap=20),
        "ablate": lambda: headlens.ablate(demo, n_bootstrap=20, **SMALL, **BUILTIN),
        "prune": lambda: headlens.prune(demo, step=0.5, random_seeds=1, **SMALL, **BUILTIN),
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
        "sinks": lambda: headlens.sinks(demo, n_prompts=4, n_long=1, long_tokens=64, attn_windows=(8,), max_single=1, **BUILTIN),
        "kv": lambda: headlens.kv(demo),
        "verify": lambda: headlens.verify(demo),
    }


def tables_saved(result: Any, out: str | Path) -> Path:
    """``result.save(out)`` with the figures made (their makers run) but neither rendered nor written (no PNG or SVG file; the
    manifest's file lists agree): for the tests that read back tables and manifests only."""
    from tests.helpers import figure_formats

    with figure_formats(()):
        return result.save(out)


@contextmanager
def session_models(models: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, a command given ``-m KEY`` of ``models`` with the default loading settings
    (the model's own device and dtype) gets ``models[KEY]``, the model the session loaded from that
    name or folder, instead of loading it again; any other load (a setting, another model) is real."""
    import headlens.reports.api.models as api_models
    from headlens.probes.config import ModelConfig
    from headlens.probes.devices import resolve_device

    real = api_models.load_model

    def load(model, **kwargs):
        loaded = models.get(model) if isinstance(model, str) else None
        if loaded is not None:
            config = ModelConfig(model=model, **kwargs)
            if config == replace(ModelConfig(model=model), device=config.device) and resolve_device(config.device) == loaded.device:
                return loaded
        return real(model, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api_models, "load_model", load)
        yield


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
    into a new folder (a table file for ablate and kv, as their commands write; figures made, no
    figure file: :func:`tables_saved`) and read back with ``headlens.load``."""
    import headlens

    done: dict[str, tuple[Any, Any]] = {}

    def get(name: str):
        if name not in done:
            result = demo_study(name)
            out = tmp_path_factory.mktemp(f"saved_{name}") / (f"{name}.csv" if name in ("ablate", "kv") else name)
            done[name] = (result, headlens.load(tables_saved(result, out)))
        return done[name]

    return get


#: The thresholds the planted census tests classify with (classify_heads' defaults for these detectors).
PLANTED_THRESHOLDS = {"previous_token": 0.5, "duplicate_token": 0.3, "induction": 0.3, "sink": 0.3}


def census_of_scores(scores: Any, *, model: str, evidence: Any = None) -> Any:
    """A :class:`CensusResult` of a given scores table (no census ran: the default config, no stimuli; the
    roles by :func:`classify_heads`' defaults, baseline factor 2), its summary written; ``evidence``: an
    :class:`EvidenceRun` of its roles, its ``evidence`` column joined into ``heads``."""
    from headlens.analyses.heads.census import CensusRun
    from headlens.analyses.heads.census_config import CensusConfig
    from headlens.analyses.heads.classify import classify_heads
    from headlens.reports.api.census import CensusResult
    from headlens.reports.api.census_run import ClassifyRun
    from headlens.reports.api.census_text import census_summary_of
    from headlens.reports.render.evidence_text import evidence_joined
    from headlens.reports.render.tables import head_roles_table

    classified = classify_heads(scores)
    heads = head_roles_table(classified)
    if evidence is not None:
        heads["evidence"] = evidence_joined(evidence.table, heads)
    run = ClassifyRun(
        census=CensusRun(scores=scores, per_prompt={}, stimuli={}, config=CensusConfig()),
        roles=classified.roles,
        heads=heads,
        thresholds=PLANTED_THRESHOLDS,
        baseline_factor=2.0,
        evidence=evidence,
    )
    return CensusResult(run=run, manifest={"model": {"model": model}}, summary=census_summary_of(run, model=model))
