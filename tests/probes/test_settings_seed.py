"""One seed rule, everywhere: ``0 <= seed < 2**32`` (issue 46 item 12).  ``circuit``/``patch``
``--seed -1`` or ``--seed 18446744073709551616`` were a numpy or torch ValueError traceback with
exit 1 after the model loaded; ``composition --seed -1`` ran."""

from __future__ import annotations

from typing import Any

import pytest

import headlens
from headlens.analyses.ablation.config import AblationConfig, PruneConfig
from headlens.analyses.circuits.config import CircuitConfig, CompositionConfig
from headlens.analyses.heads.census_config import CensusConfig
from headlens.analyses.patching.config import PatchConfig, PathConfig
from headlens.analyses.patching.evidence_config import EvidenceSettings
from headlens.analyses.patching.ioi_config import IOIConfig
from headlens.analyses.sinks.config import SinkConfig
from headlens.probes.errors import InputError
from headlens.probes.settings import SEED_MAX, check_seed, setting_of
from headlens.reports.cli.main import cli
from headlens.reports.runs.report.report_config import ReportConfig

#: A model name that does not exist: a check after loading would fail on it instead.
NO_MODEL = "no-such-model-here"
CONFIGS: tuple[Any, ...] = (AblationConfig, PruneConfig, CircuitConfig, CompositionConfig, CensusConfig, PatchConfig, PathConfig)
CONFIGS += (EvidenceSettings, IOIConfig, SinkConfig, ReportConfig)
BAD: tuple[Any, ...] = (-1, 2**32, 2**64, 1.5, True)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_seed_setting_has_the_one_range_and_its_config_checks_it(cls):
    info = setting_of(cls, "seed")
    assert (info.minimum, info.maximum) == (0, SEED_MAX) == (0, 2**32 - 1)
    kwargs: dict[str, Any] = {"receivers": ((1, 0),)} if cls is PathConfig else {}
    assert cls(seed=SEED_MAX, **kwargs).seed == SEED_MAX
    for bad in BAD:
        with pytest.raises(InputError, match=rf"^seed={bad!r}: must be a whole number between 0 and 4294967295$"):
            cls(seed=bad, **kwargs)


@pytest.mark.parametrize("value", BAD)
def test_check_seed_is_the_rule(value):
    with pytest.raises(InputError) as info:
        check_seed(value)
    assert info.value.parameter == "seed"  # type: ignore[attr-defined]
    assert check_seed(0) == 0 and check_seed(SEED_MAX) == SEED_MAX


@pytest.mark.parametrize(
    ("study", "kwargs"),
    [
        (headlens.circuit, {"builtin": "induction"}),
        (headlens.patch, {"builtin": "induction"}),
        (headlens.composition, {}),
        (headlens.capture, {"prompts": ["a b"]}),
    ],
    ids=["circuit", "patch", "composition", "capture"],
)
@pytest.mark.parametrize("seed", [-1, 2**64])
def test_the_library_refuses_a_seed_outside_the_rule_before_loading(study: Any, kwargs, seed):
    with pytest.raises(InputError, match=rf"seed={seed}: must be a whole number between 0 and 4294967295"):
        study(NO_MODEL, seed=seed, **kwargs)


@pytest.mark.parametrize(
    "args",
    [
        ["circuit", "--builtin", "induction", "--seed", "-1"],
        ["circuit", "--builtin", "induction", "--seed", "18446744073709551616"],
        ["patch", "--builtin", "induction", "--seed", "-1"],
        ["patch", "--builtin", "induction", "--seed", "18446744073709551616"],
        ["composition", "--seed", "-1"],
        ["capture", "--text", "a b", "--seed", "-1"],
    ],
)
def test_the_cli_refuses_a_seed_outside_the_rule_in_one_line_exit_2(tmp_path, runner, args):
    out = tmp_path / "never"
    result = runner.invoke(cli, [*args, "--model", NO_MODEL, "--out", str(out), "-q"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "--seed" in result.output
    assert "0<=x<=4294967295" in result.output, result.output
    assert not out.exists()
