"""Settings defined once (issue 29): every study's signature and every command's options say what
its config dataclass's fields say.

For each study in :data:`STUDIES`:

* its signature has one keyword parameter per field of its config classes and per loading field
  (:class:`~headlens.probes.config.ModelConfig`'s, ``model`` aside), with the field's annotation and
  default; every other keyword parameter is listed in ``extra``;
* each of its click commands has one option per field it exposes (:func:`cli_fields`), with the
  flag, default, type range or choices and help text of the field (:func:`option_mismatches`);
  where a command's option differs on purpose, ``differs`` says which aspect and why.

The checks are functions returning the mismatches in words, so the test can show that a planted
mismatch is found (:func:`test_a_planted_mismatch_is_found`).  A study is converted by adding its
entry here (and removing it from :data:`PENDING`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click
import pytest

from headlens.probes.config import ModelConfig
from headlens.probes.settings import REQUIRED, SettingInfo, setting, settings_of
from headlens.reports.cli.main import COMMANDS
from headlens.reports.cli.options import cli_default, config_options, flag_of

#: The aspects of an option that ``differs`` may name.
ASPECTS = ("flag", "default", "type", "help")


@dataclass(frozen=True)
class Command:
    """One click command's options of one config class."""

    #: the ``headlens`` command (a key of :data:`headlens.reports.cli.main.COMMANDS`)
    name: str
    #: ``"module:Class"``; default: the study's ``config``
    config: str | None = None
    #: the fields it exposes (None: every field whose setting has ``cli=True``)
    fields: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    #: field -> the command's flag, where it is not the field's
    rename: Mapping[str, str] = field(default_factory=dict)
    #: field -> {aspect: why the command's option differs from the field there}
    differs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Study:
    """One study: its function, its config classes and its commands."""

    name: str
    #: ``"module:function"``
    function: str
    #: ``"module:Class"``: the config given positionally and filled in by ``@study``
    config: str
    #: further config classes whose fields are keyword parameters too
    others: tuple[str, ...] = ()
    #: keyword parameters that are no field (``progress``, ``command``, ...)
    extra: tuple[str, ...] = ("command",)
    #: fields of ``others`` whose keyword is absent or differs on purpose, each with its reason
    unchecked: Mapping[str, str] = field(default_factory=dict)
    loading: bool = True
    commands: tuple[Command, ...] = ()


#: EvalSpec's fields that a loss-only study (gqa, projections) does not take.
_NO_METRIC = {
    "metric": "the loss on text windows (gqa: and a task's logit difference beside it)",
    "n_sentences": "no embedding metric",
    "complete_sentences": "no embedding metric",
}
#: gqa's and projections' --window range.
_WINDOW_3 = "at least 3 tokens per window, as these commands have always taken (ablate and prune: 2)"

STUDIES: tuple[Study, ...] = (
    Study(
        "capture",
        function="headlens.reports.api.capture:capture",
        config="headlens.probes.config:CaptureConfig",
        extra=("prompts", "seed", "verify", "tolerance", "progress", "command"),
        commands=(Command("capture"),),
    ),
    Study(
        "census",
        function="headlens.reports.api.census:census",
        config="headlens.analyses.heads.census_config:CensusConfig",
        others=("headlens.analyses.heads.census_config:ClassifyConfig",),
        extra=("evidence", "mask", "progress", "command"),
        commands=(
            Command("detect"),
            Command("classify"),
            Command(
                "classify",
                config="headlens.analyses.heads.census_config:ClassifyConfig",
                differs={
                    "thresholds": {
                        "type": "repeatable DETECTOR=VALUE text, parsed by parse_thresholds, for the mapping",
                        "default": "no --threshold: the empty tuple of click's multiple option, None in the library",
                        "help": "says the CLI's DETECTOR=VALUE form",
                    }
                },
            ),
            Command(
                "classify",
                config="headlens.analyses.patching.evidence_config:EvidenceSettings",
                fields=("n", "T", "roles", "sink_sample"),
                rename={
                    "n": "--evidence-n",
                    "T": "--evidence-seq-len",
                    "roles": "--evidence-roles",
                    "sink_sample": "--evidence-sink-sample",
                },
            ),
        ),
    ),
    Study(
        "ablate",
        function="headlens.reports.api.ablate:ablate",
        config="headlens.analyses.ablation.config:AblationConfig",
        others=("headlens.analyses.measure.spec:EvalSpec",),
        extra=("mask", "journal", "progress", "command"),
        commands=(Command("ablate"), Command("ablate", config="headlens.analyses.measure.spec:EvalSpec")),
    ),
    Study(
        "prune",
        function="headlens.reports.api.prune:prune",
        config="headlens.analyses.ablation.config:PruneConfig",
        others=("headlens.analyses.measure.spec:EvalSpec",),
        extra=("journal", "progress", "command"),
        commands=(Command("prune"), Command("prune", config="headlens.analyses.measure.spec:EvalSpec")),
    ),
    Study(
        "kv",
        function="headlens.reports.api.design:kv",
        config="headlens.analyses.design.config:KVConfig",
        extra=("mask", "command"),
        commands=(Command("kv"),),
    ),
    Study(
        "gqa",
        function="headlens.reports.api.design:gqa",
        config="headlens.analyses.design.config:GQAConfig",
        others=("headlens.analyses.measure.spec:EvalSpec",),
        unchecked=_NO_METRIC,
        extra=("journal", "progress", "command"),
        commands=(
            Command("gqa"),
            Command(
                "gqa",
                config="headlens.analyses.measure.spec:EvalSpec",
                fields=("text_file", "n_windows", "window", "prepend_bos", "task_file"),
                differs={
                    "window": {"type": _WINDOW_3},
                    "task_file": {"help": "gqa measures the task's logit difference beside the loss (no --metric)"},
                },
            ),
        ),
    ),
    Study(
        "projections",
        function="headlens.reports.api.design:projections",
        config="headlens.analyses.design.config:ProjectionConfig",
        others=("headlens.analyses.design.config:KnockoutRoles", "headlens.analyses.measure.spec:EvalSpec"),
        unchecked={**_NO_METRIC, "task": "knockouts are measured on text (loss)", "task_file": "knockouts are measured on text (loss)"},
        extra=("journal", "progress", "command"),
        commands=(
            Command("projections"),
            Command("projections", config="headlens.analyses.design.config:KnockoutRoles"),
            Command(
                "projections",
                config="headlens.analyses.measure.spec:EvalSpec",
                fields=("text_file", "n_windows", "window", "prepend_bos"),
                differs={"window": {"type": _WINDOW_3}},
            ),
        ),
    ),
    Study(
        "patch",
        function="headlens.reports.api.patch:patch",
        config="headlens.analyses.patching.config:PatchConfig",
        others=(
            "headlens.analyses.patching.config:PairSource",
            "headlens.analyses.patching.config:PathConfig",
            "headlens.analyses.patching.config:PatchExtras",
        ),
        unchecked={
            "task": "the library also takes the pairs in memory (a list of dicts or a DataFrame); the command a file",
            "receivers": "optional (None: no path patching), PathConfig requires receivers",
            "batch_size": "PathConfig's batch_size, n_resamples and seed are the call's (PatchConfig's)",
            "n_resamples": "PatchConfig's, as batch_size",
            "seed": "PatchConfig's, as batch_size",
        },
        extra=("progress", "command"),
        commands=(
            Command(
                "patch",
                rename={"directions": "--direction"},
                differs={
                    "directions": {
                        "type": "--direction both|denoising|noising: one direction or both, not a comma list",
                        "default": "both: every direction",
                    }
                },
            ),
            Command("patch", config="headlens.analyses.patching.config:PairSource"),
            Command("patch", config="headlens.analyses.patching.config:PathConfig", fields=("receivers", "receiver_input")),
            Command("patch", config="headlens.analyses.patching.config:PatchExtras"),
        ),
    ),
    Study(
        "circuit",
        function="headlens.reports.api.circuit:circuit",
        config="headlens.analyses.circuits.config:CircuitConfig",
        others=("headlens.analyses.patching.config:PairSource",),
        unchecked={"task": "the library also takes the pairs in memory (a list of dicts or a DataFrame); the command a file"},
        extra=("progress", "command"),
        commands=(
            Command("circuit"),
            Command(
                "circuit",
                config="headlens.analyses.patching.config:PairSource",
                differs={"n_pairs": {"help": "states the circuit's own cap (MAX_PAIRS), not patch's 1,000,000"}},
            ),
        ),
    ),
    Study(
        "composition",
        function="headlens.reports.api.composition:composition",
        config="headlens.analyses.circuits.config:CompositionConfig",
        extra=("progress", "command"),
        commands=(Command("composition"),),
    ),
    Study(
        "ioi",
        function="headlens.reports.api.ioi:ioi",
        config="headlens.analyses.patching.ioi_config:IOIConfig",
        extra=("progress", "command"),
        commands=(Command("ioi"),),
    ),
    Study(
        "report",
        function="headlens.reports.runs.report.build:build_report",
        config="headlens.reports.runs.report.settings:ReportSettings",
        extra=("out_dir", "redo", "overwrite", "progress", "command", "census"),
        commands=(
            Command(
                "report",
                config="headlens.reports.runs.report.report_config:ReportConfig",
                differs={
                    "example_prompts": {
                        "flag": "--example-prompt, repeatable: one prompt each",
                        "type": "one text per --example-prompt (a prompt may hold commas)",
                        "default": "no --example-prompt: the built-in prompts",
                        "help": "says one prompt per flag",
                    }
                },
            ),
        ),
    ),
    Study(
        "sinks",
        function="headlens.reports.api.sinks:sinks",
        config="headlens.analyses.sinks.config:SinkConfig",
        others=("headlens.analyses.sinks.config:LengthsConfig",),
        unchecked={
            "lengths": "optional: given, it selects the long-context study (and takes a str or one int too)",
            "n_sequences": "n_long (SinkConfig's) is the number of sequences per length",
            "prepend_bos": "bos (SinkConfig's) gives the BOS settings, one run each",
        },
        extra=("lengths", "prompts_file", "progress", "command"),
        commands=(
            Command(
                "sinks",
                differs={
                    "bos": {
                        "type": "--bos both|on|off: the CLI's words for (False, True), (True,), (False,)",
                        "default": "both, i.e. (False, True)",
                    }
                },
            ),
            Command("sinks", config="headlens.analyses.sinks.config:LengthsConfig", fields=("lengths", "attention", "query_block")),
        ),
    ),
    Study(
        "verify",
        function="headlens.reports.api.verify:verify",
        config="headlens.analyses.heads.verify_config:VerifyConfig",
        commands=(Command("verify"),),
    ),
)

#: Commands over no study function (``sweep`` runs the census as Ray tasks): their options only.
COMMAND_ONLY: tuple[tuple[str, Command], ...] = (
    (
        "headlens.reports.runs.sweep.config:SweepConfig",
        Command(
            "sweep",
            differs={
                "thresholds": {
                    "type": "repeatable DETECTOR=VALUE text, parsed by parse_thresholds, for the (detector, value) pairs",
                    "default": "no --threshold: click's empty tuple of a multiple option",
                },
                "text_file": {"type": "click.Path(exists=True): the text must exist before Ray starts"},
            },
        ),
    ),
    ("headlens.analyses.heads.census_config:CensusConfig", Command("sweep")),
)

#: Studies whose signatures still take ``**kwargs`` (converted by another line of work): remove a
#: name when its entry is in :data:`STUDIES`.
PENDING: set[str] = set()

#: Every study verb of ``headlens``.
VERBS = {
    "ablate",
    "prune",
    "gqa",
    "kv",
    "projections",
    "patch",
    "circuit",
    "composition",
    "ioi",
    "census",
    "sinks",
    "capture",
    "verify",
    "report",
}

LOAD_FIELDS = tuple(info for info in settings_of(ModelConfig) if info.name != "model")


def _obj(ref: str) -> Any:
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def _command(name: str) -> click.Command:
    module, attr = COMMANDS[name]
    return getattr(importlib.import_module(module), attr)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same type where they are numbers (``1`` is not ``1.0`` is not ``True``)."""
    if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float)) and type(a) is not type(b):
        return False
    return a == b


def signature_mismatches(fn: Callable[..., Any], configs: list[Any], *, loading: bool, extra: tuple[str, ...], skip=()) -> list[str]:
    """What differs between ``fn``'s keyword parameters and the fields of ``configs`` (+ loading fields)."""
    out = []
    params = inspect.signature(fn).parameters
    hints = typing.get_type_hints(fn)
    keywords = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        out.append("takes **kwargs")
    positional = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    if positional[:2] != ["model", "config"]:
        out.append(f"positional parameters {positional}, not (model, config, /)")
    infos: list[SettingInfo] = [i for cls in configs for i in settings_of(cls) if i.name not in skip]
    if loading:
        infos += list(LOAD_FIELDS)
    for info in infos:
        p = params.get(info.name)
        if p is None or info.name not in keywords:
            out.append(f"{info.name}: no keyword parameter")
            continue
        if hints.get(info.name) != info.type:
            out.append(f"{info.name}: annotated {hints.get(info.name)!r}, the field is {info.type!r}")
        default = REQUIRED if p.default is inspect.Parameter.empty else p.default
        if not _same(default, info.default):
            out.append(f"{info.name}: default {default!r}, the field's is {info.default!r}")
    known = {i.name for i in infos} | set(extra) | set(skip)
    out += [f"{n}: a keyword that is no field and not listed in extra" for n in sorted(keywords - known)]
    out += [f"{n}: listed in extra but not a keyword" for n in sorted(set(extra) - keywords)]
    return out


def cli_fields(cls: Any, command: Command) -> list[SettingInfo]:
    infos = {i.name: i for i in settings_of(cls)}
    names = list(command.fields) if command.fields is not None else [n for n, i in infos.items() if i.cli]
    return [infos[n] for n in names if n not in command.exclude]


def option_mismatches(cmd: click.Command, cls: Any, command: Command) -> list[str]:
    """What differs between ``cmd``'s options and the fields of ``cls`` it exposes."""
    out = []
    by_name = {p.name: p for p in cmd.params if isinstance(p, click.Option)}
    for info in cli_fields(cls, command):
        allowed = command.differs.get(info.name, {})
        p = by_name.get(info.name)
        if p is None:
            out.append(f"{command.name} {info.name}: no option")
            continue
        flag = flag_of(info, command.rename)
        if "flag" not in allowed and flag not in p.opts:
            out.append(f"{command.name} {info.name}: flag {p.opts}, the field's is {flag}")
        if "help" not in allowed and (p.help or "") != info.help:
            out.append(f"{command.name} {flag}: help {p.help!r}, the field's is {info.help!r}")
        if "default" not in allowed:
            want = info.default if isinstance(info.default, bool) else cli_default(info)
            if not _same(p.default, want):
                out.append(f"{command.name} {flag}: default {p.default!r}, the field's is {want!r}")
        if "type" not in allowed:
            out += [f"{command.name} {flag}: {m}" for m in _type_mismatches(p, info)]
    return out


def _type_mismatches(p: click.Option, info: SettingInfo) -> list[str]:
    t = p.type
    out = []
    if info.choices is not None and isinstance(t, click.Choice) and tuple(t.choices) != tuple(str(c) for c in info.choices):
        out.append(f"choices {tuple(t.choices)}, the field's are {info.choices}")
    if isinstance(t, (click.IntRange, click.FloatRange)):
        got = (t.min, t.max, t.min_open, t.max_open)
        want = (info.minimum, info.maximum, info.min_open, info.max_open)
        if got != want:
            out.append(f"range {got}, the field's is {want}")
    elif info.has_range and not getattr(t, "minimum", None) == info.minimum:
        out.append(f"type {t.name} has no range, the field's is {info.range_text()}")
    return out


@pytest.mark.parametrize("study", STUDIES, ids=lambda s: s.name)
def test_the_signature_shows_the_config_fields(study: Study):
    configs = [_obj(study.config), *(_obj(o) for o in study.others)]
    found = signature_mismatches(_obj(study.function), configs, loading=study.loading, extra=study.extra, skip=tuple(study.unchecked))
    assert not found, f"{study.function}:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("study", "command"), [(s, c) for s in STUDIES for c in s.commands], ids=lambda x: x.name if isinstance(x, (Study, Command)) else str(x)
)
def test_the_command_options_are_the_config_fields(study: Study, command: Command):
    cls = _obj(command.config or study.config)
    found = option_mismatches(_command(command.name), cls, command)
    assert not found, "\n".join(found)
    bad = [(f, a) for f, aspects in command.differs.items() for a in aspects if a not in ASPECTS]
    assert not bad, f"differs names aspects outside {ASPECTS}: {bad}"


@pytest.mark.parametrize(("config", "command"), COMMAND_ONLY, ids=lambda x: x.name if isinstance(x, Command) else x.split(":")[-1])
def test_the_options_of_commands_without_a_study_are_the_config_fields(config: str, command: Command):
    found = option_mismatches(_command(command.name), _obj(config), command)
    assert not found, "\n".join(found)


def test_every_study_is_registered():
    registered = {s.name for s in STUDIES}
    assert registered | PENDING == VERBS, f"neither registered nor pending: {sorted(VERBS - registered - PENDING)}"
    assert not registered & PENDING, f"registered and still pending (remove from PENDING): {sorted(registered & PENDING)}"


# A planted mismatch: the same checks on a config, a study and a command that disagree.


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Planted:
    n_prompts: int = setting(100, help="Prompts per set.", minimum=1)
    prepend_bos: bool = setting(True, help="Do not prepend BOS.", flag="--no-bos")


def _planted_study(model: str, config: _Planted | None = None, /, *, n_prompts: int = 10, prepend_bos: bool = True) -> None:
    """Its n_prompts default (10) is not the field's (100)."""


def _planted_float_study(model: str, config: _Planted | None = None, /, *, n_prompts: float = 100, prepend_bos: bool = True) -> None:
    """Its n_prompts annotation (float) is not the field's (int)."""


@click.command()
@config_options(_Planted)
@click.option("--extra", default=1)
def _right_command(**_: Any) -> None:
    pass


@click.command()
@click.option("--n-prompts", "n_prompts", default=100, type=click.IntRange(min=0), help="Prompts per set.")
@click.option("--no-bos", "prepend_bos", is_flag=True, flag_value=False, default=True, help="No BOS, said otherwise.")
def _wrong_command(**_: Any) -> None:
    pass


def test_a_planted_mismatch_is_found():
    assert signature_mismatches(_planted_study, [_Planted], loading=False, extra=()) == ["n_prompts: default 10, the field's is 100"]
    assert signature_mismatches(_planted_float_study, [_Planted], loading=False, extra=()) == [
        "n_prompts: annotated <class 'float'>, the field is <class 'int'>"
    ]
    assert signature_mismatches(_planted_study, [_Planted], loading=True, extra=())[:2] == [
        "n_prompts: default 10, the field's is 100",
        "device: no keyword parameter",
    ]
    assert option_mismatches(_right_command, _Planted, Command("right")) == []
    assert option_mismatches(_wrong_command, _Planted, Command("wrong")) == [
        "wrong --n-prompts: range (0, None, False, False), the field's is (1, None, False, False)",
        "wrong --no-bos: help 'No BOS, said otherwise.', the field's is 'Do not prepend BOS.'",
    ]
    # a difference listed in ``differs`` is accepted, and only that aspect
    listed = Command("wrong", differs={"prepend_bos": {"help": "said otherwise on purpose"}})
    assert option_mismatches(_wrong_command, _Planted, listed) == [
        "wrong --n-prompts: range (0, None, False, False), the field's is (1, None, False, False)"
    ]
    assert option_mismatches(_right_command, _Planted, Command("right", exclude=("prepend_bos",))) == []
