"""``load_model`` from Python: named models, a typo suggested in the library's words; library
errors name parameters and the CLI says them as its flags (one mapping, ``cli.common.flag_words``)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
import torch

from headlens.probes.config import ModelConfig
from headlens.probes.errors import DeviceError, InputError, ModelLoadError
from headlens.reports.api.models import load_model, models
from headlens.reports.api.named_models import DEMO
from headlens.reports.cli.common import flag_words
from headlens.reports.cli.main import cli


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_load_model_by_name_and_path(tiny_checkpoint):
    demo = load_model(DEMO, device="cpu")
    assert demo.name == DEMO and demo.n_layers >= 1
    tiny = load_model(str(tiny_checkpoint), device="cpu")
    assert (tiny.n_layers, tiny.n_heads) == (2, 4)
    assert next(m.name for m in models()) == DEMO


def test_a_typo_is_suggested_naming_the_parameter(elsewhere):
    typo = DEMO[1] + DEMO[0] + DEMO[2:]  # "dmeo"
    with pytest.raises(ModelLoadError) as info:
        load_model(typo)
    message = str(info.value)
    assert f"model={typo!r}" in message and f"did you mean {DEMO!r}?" in message and "--model" not in message
    with pytest.raises(InputError, match=r"load_model: unknown keyword 'dtpye'"):
        load_model(DEMO, dtpye="float32")  # pyright: ignore[reportCallIssue]  (the misspelt keyword is the test)


def test_the_keywords_are_model_configs_fields():
    """One keyword per ModelConfig field (``model`` is the positional), with its type and default."""
    params = inspect.signature(load_model).parameters
    hints = typing.get_type_hints(load_model)
    fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keywords == [n for n in fields if n != "model"]
    assert {n: typing.get_type_hints(ModelConfig)[n] for n in keywords} == {n: hints[n] for n in keywords}
    assert all(params[n].default == fields[n].default for n in keywords)


def test_a_config_or_keywords(tiny_checkpoint):
    with pytest.raises(TypeError, match=r"ModelConfig or keyword arguments \(dtype\), not both"):
        load_model(ModelConfig(model=str(tiny_checkpoint)), dtype="bfloat16")
    with pytest.raises(TypeError, match="must be a name"):
        load_model(3)  # type: ignore[arg-type]


def test_library_errors_name_parameters_the_cli_names_flags(elsewhere, runner, monkeypatch, tiny_checkpoint):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError) as info:
        load_model(str(tiny_checkpoint), device="cuda")
    assert str(info.value).startswith("device='cuda' asked for") and "--device" not in str(info.value)
    res = runner.invoke(cli, ["capture", "--model", str(tiny_checkpoint), "--device", "cuda", "--text", "x", "--out", str(elsewhere / "o")])
    errors = [line for line in res.output.splitlines() if line.startswith("headlens: error:")]
    assert res.exit_code == 5 and len(errors) == 1, res.output
    assert "--device cuda asked for" in errors[0] and "device='cuda'" not in errors[0]


@pytest.mark.parametrize(
    ("library", "cli_words"),
    [
        ("model='dmeo' is not a folder", "--model dmeo is not a folder"),
        ("use device='auto' or device='cpu'", "use --device auto or --device cpu"),
        ("n_prompts must be at least 1, got 0", "--n-prompts must be at least 1, got 0"),
        ("heads= and layers= select no head together", "--heads and --layers select no head together"),
        ("no BOS token; run with prepend_bos=False", "no BOS token; run with --no-bos"),
        ("the model must be local", "the model must be local"),  # a word, not a parameter
        ("evidence needs 10 items (n=3)", "evidence needs 10 items (n=3)"),  # not a CLI parameter
    ],
)
def test_flag_words(library, cli_words):
    assert flag_words(library) == cli_words
