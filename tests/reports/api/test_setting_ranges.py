"""The declared range of a setting (``setting(minimum=...)``) is the library's check too: a value
outside it is a one-line :class:`InputError` naming the parameter, before the model loads; the CLI
says the same check in flags."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from headlens import ablate, prune
from headlens.analyses.ablation.config import AblationConfig, PruneConfig
from headlens.analyses.measure.spec import EvalSpec
from headlens.probes.errors import InputError
from headlens.reports.cli.common import flag_words
from headlens.reports.cli.main import cli

#: A model name that does not exist: a check that runs after loading would fail on it instead.
NO_MODEL = "no-such-model-here"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"n_windows": 0}, "n_windows=0: must be at least 1"),
        ({"n_windows": -2}, "n_windows=-2: must be at least 1"),
        ({"window": 1}, "window=1: must be at least 2"),
        ({"n_sentences": 0}, "n_sentences=0: must be at least 1"),
        ({"ci": 1.5}, "ci=1.5: must be strictly between 0 and 1"),
        ({"ci": 0.0}, "ci=0.0: must be strictly between 0 and 1"),
        ({"batch_size": 0}, "batch_size=0: must be at least 1"),
        ({"heads_per_forward": 0}, "heads_per_forward=0: must be at least 1"),
    ],
)
def test_ablate_refuses_a_setting_outside_its_range_by_name_before_loading(settings, words):
    with pytest.raises(InputError) as info:
        ablate(NO_MODEL, **settings)
    message = str(info.value)
    assert words in message and "\n" not in message, message
    assert "longer text" not in message and "confidence level" not in message


@pytest.mark.parametrize(("cls", "settings", "name"), [(EvalSpec, {"n_windows": 0}, "n_windows"), (AblationConfig, {"ci": 1.0}, "ci")])
def test_a_config_built_directly_checks_the_same_range(cls, settings, name):
    with pytest.raises(InputError, match=rf"^{name}=") as info:
        cls(**settings)
    assert info.value.parameter == name  # type: ignore[attr-defined]


def test_prune_checks_the_ranges_of_what_it_measures_on():
    with pytest.raises(InputError, match="n_windows=0: must be at least 1"):
        prune(NO_MODEL, n_windows=0)
    with pytest.raises(InputError, match="batch_size=0: must be at least 1"):
        PruneConfig(batch_size=0)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["ablate", "--n-windows", "0"], "--n-windows"),
        (["ablate", "--window", "1"], "--window"),
        (["prune", "--n-windows", "0"], "--n-windows"),
    ],
)
def test_the_cli_refuses_the_same_values_in_flags(tmp_path, args, flag):
    out = tmp_path / ("a.csv" if args[0] == "ablate" else "p")
    r = CliRunner().invoke(cli, [args[0], "-m", NO_MODEL, *args[1:], "--out", str(out)])
    lines = [line for line in r.output.strip().splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("headlens: error:"), r.output
    assert flag in lines[0] and "n_windows" not in lines[0] and not out.exists(), lines[0]


def test_a_library_range_message_reads_in_flags_on_the_cli():
    assert flag_words("n_windows=0: must be at least 1") == "--n-windows 0: must be at least 1"
    assert flag_words("batch_size=0: must be at least 1") == "--batch-size 0: must be at least 1"
