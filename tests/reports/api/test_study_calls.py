"""``reports/api/common.study``: how a study call's keywords become its config (no model is loaded:
a study of a small config of its own)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from headlens.probes.errors import InputError
from headlens.probes.settings import setting
from headlens.reports.api.common import config_of, loading_of, study


@dataclass(frozen=True, kw_only=True)
class _Config:
    n_prompts: int = setting(100, help="Prompts.")
    heads: tuple[tuple[int, int], ...] | None = setting(None, help="Heads.")
    prompts: tuple[str, ...] = setting(("a text",), help="Texts.", split=False)
    layers: tuple[int, ...] = setting((), help="Layers.")


@study("toy", _Config)
def toy(
    model: str,
    config: _Config | None = None,
    /,
    *,
    n_prompts: int = 100,
    heads: tuple[tuple[int, int], ...] | None = None,
    prompts: tuple[str, ...] = ("a text",),
    layers: tuple[int, ...] = (),
    device: str = "auto",
    dtype: str = "float32",
    progress: Any = None,
    command: list[str] | None = None,
) -> tuple[_Config, dict[str, Any], list[str] | None]:
    return config_of(_Config, locals()), loading_of(locals()), command


#: The same study untyped: the calls below pass what the annotations (the fields' types) do not say
#: but the coercion takes (heads as text, lists), or bad input on purpose.
loose: Any = toy


def test_the_signature_is_the_function_s():
    params = inspect.signature(toy).parameters
    assert params["n_prompts"].default == 100 and params["n_prompts"].kind is inspect.Parameter.KEYWORD_ONLY


def test_keywords_become_the_config_and_override_a_given_one():
    assert toy("m")[0] == _Config()
    assert toy("m", _Config(n_prompts=5, layers=(1,)))[0] == _Config(n_prompts=5, layers=(1,))
    assert toy("m", _Config(n_prompts=5, layers=(1,)), n_prompts=7)[0] == _Config(n_prompts=7, layers=(1,))
    # a keyword equal to the default still overrides the config's value
    assert toy("m", _Config(n_prompts=5), n_prompts=100)[0].n_prompts == 100


def test_settings_are_coerced_to_their_field_types():
    config, _, _ = loose("m", heads="5.1,5.5", layers="0,3")
    assert config.heads == ((5, 1), (5, 5)) and config.layers == (0, 3)
    assert loose("m", prompts="Hello, world")[0].prompts == ("Hello, world",)  # split=False: one prompt
    assert loose("m", prompts=["a, b", "c"])[0].prompts == ("a, b", "c")


def test_loading_keywords_and_the_command():
    _, load, command = toy("m", n_prompts=3, device="cpu", progress=print)
    assert load == {"device": "cpu"}
    assert command == ["python", "headlens.toy('m', n_prompts=3, device='cpu')"]  # progress is not recorded
    assert toy("m", command=["headlens", "x"])[2] == ["headlens", "x"]


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: loose("m", n_promts=3), "toy: unknown keyword n_promts=; choose from n_prompts, heads"),
        (lambda: loose("m", 3), "toy: config must be a _Config, got int"),
        (lambda: loose("m", heads="x"), "toy: heads='x'"),
        (lambda: loose("m", n_prompts="3"), "toy: n_prompts= must be an int, got str '3'"),
    ],
)
def test_bad_calls_are_one_line_errors_naming_the_parameter(call, needle):
    with pytest.raises(InputError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value)
