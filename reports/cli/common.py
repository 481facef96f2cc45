"""Shared pieces of the click CLI: the group, option sets, parsers, errors (progress: :mod:`headlens.reports.render.progress`)."""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from headlens.probes.config import ModelConfig
from headlens.probes.errors import HeadlensError, ModelLoadError
from headlens.probes.head_lists import parse_heads
from headlens.probes.settings import settings_of

if TYPE_CHECKING:
    from headlens.probes.loading import LoadedModel

# Light at module level (click, the standard library, headlens.probes.errors): every command's
# options import this module, and `headlens CMD --help` must not import torch.  What the helpers
# below run (model loading, placement, head parsing) they import when called.

__all__ = [
    "HeadlensGroup",
    "model_options",
    "check_model_names",
    "setup_logging",
    "parse_layers",
    "parse_ints",
    "HeadsType",
    "HEADS",
    "parse_csv",
    "fail",
    "flag_words",
    "load",
    "command_line",
]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


#: Library parameters (in error messages as ``name=value``) -> the CLI's flag, where it is not
#: ``--`` + the name with dashes.  The one place library words become the CLI's.
FLAG_NAMES: dict[str, str] = {"task_file": "--task", "directions": "--direction", "thresholds": "--threshold"}
#: ``name=value`` pairs said by one flag of their own (``prepend_bos=False`` is ``--no-bos``).
FLAG_VALUES: dict[str, str] = {
    "prepend_bos=False": "--no-bos",
    "allow_new_weights=True": "--allow-new-weights",
    "overwrite=True": "--overwrite",
    "truncate=True": "--truncate",
}
#: Parameters whose ``name=value`` in a library message is said as the CLI flag.
MAPPED_PARAMETERS = (
    "model",
    "device",
    "dtype",
    "revision",
    "allow_new_weights",
    "device_map",
    "max_memory",
    "prepend_bos",
    "overwrite",
    "n_prompts",
    "batch_size",
    "seq_len",
    "max_seq_len",
    "window",
    "seed",
    "detectors",
    "layers",
    "heads",
    "what",
    "attention",
    "query_block",
    "lengths",
    "eps",
    "n_long",
    "keep_first",
    "attn_windows",
    "long_tokens",
    "max_single",
    "skip",
    "text",
    "prompts",
    "metric",
    "task",
    "task_file",
    "text_file",
    "n_windows",
    "n_sentences",
    "builtin",
    "attribution",
    "directions",
    "method",
    "mask",
    "step",
    "max_increase",
    "random_seeds",
    "max_fraction",
    "batch",
    "context",
    "truncate",
    "thresholds",
    "baseline_factor",
    "steps",
    "top_n",
    "threshold",
    "confirm",
    "n_bootstrap",
    "n_pairs",
    "target_faithfulness",
    "modes",
    "n_baseline",
    "n_tokens",
    "n_resamples",
    "receivers",
)
_PARAMETER = re.compile(r"(?<![\w.-])(" + "|".join(MAPPED_PARAMETERS) + r")=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s,;:)]+)?")
#: A parameter named bare as the subject of a message or clause: ``n_prompts must be at least 1``.
_SUBJECT = re.compile(r"(?:^|(?<=[:;] ))(" + "|".join(MAPPED_PARAMETERS) + r")(?= (?:must|needs|is empty) )")


def _flag(name: str) -> str:
    return FLAG_NAMES.get(name, "--" + name.replace("_", "-"))


def flag_words(message: str) -> str:
    """A library message in the CLI's words: ``model='dmeo'`` -> ``--model dmeo``, ``prepend_bos=False``
    -> ``--no-bos``, ``heads=`` -> ``--heads``, ``n_prompts must ...`` -> ``--n-prompts must ...``."""

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if value is None:
            return _flag(name)
        if f"{name}={value}" in FLAG_VALUES:
            return FLAG_VALUES[f"{name}={value}"]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        return f"{_flag(name)} {value}"

    return _SUBJECT.sub(lambda m: _flag(m.group(1)), _PARAMETER.sub(flag, message))


def fail(message: str, code: int = 2) -> None:
    click.echo(f"headlens: error: {message}", err=True)
    sys.exit(code)


class HeadlensGroup(click.Group):
    """A click group whose errors are one line on stderr with a documented exit code.

    * click usage errors (bad option, bad value): exit 2;
    * :class:`headlens.probes.errors.HeadlensError`: its ``exit_code`` (see ``headlens.probes.errors``);
    * Ctrl-C: exit 130.
    """

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None, standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            return super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            fail("interrupted", 130)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
            fail(exc.format_message().replace("\n", " ") + hint, exc.exit_code)
        except HeadlensError as exc:
            fail(flag_words(str(exc)).replace("\n", " "), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)


def load(
    model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False, *, seed: int | None = None
) -> LoadedModel:
    """The model of ``--model``, ``--device``, ``--dtype``, ``--revision``, ``--allow-new-weights`` (every command's load);
    with ``seed`` (``--seed``) torch is seeded first, so weights missing from the checkpoint are drawn reproducibly."""
    from headlens.reports.api.models import as_loaded

    return as_loaded(model, {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}, seed=seed)


def echo_findings(result: Any) -> None:
    """A result's findings as the command prints them: its lines on stdout, its notes on stderr
    (``note: ...``); the same lines its notebook view leads with."""
    found = result.findings()
    for line in found.lines:
        click.echo(line)
    for note in found.warnings:
        click.echo(f"note: {note}", err=True)


def command_line() -> list[str]:
    """The command as typed, for manifests: ``["headlens", "classify", ...]``."""
    return ["headlens", *sys.argv[1:]]


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--model`` (required), ``--device``, ``--dtype``, ``--revision``, ``--allow-new-weights``,
    ``--device-map``, ``--max-memory``: :class:`~headlens.probes.config.ModelConfig`'s settings
    (help, defaults and choices from its fields), checked before anything loads; they reach the
    command's loads through :func:`headlens.probes.placement.command_placement`."""
    infos = {info.name: info for info in settings_of(ModelConfig)}

    def option(name: str, *decls: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        info = infos[name]
        extra: dict[str, Any] = {"help": info.help}
        if info.metavar:
            extra["metavar"] = info.metavar
        if info.choices is not None:
            extra["type"] = click.Choice(list(info.choices))
        if isinstance(info.default, bool):
            extra["is_flag"] = True
        elif info.required:
            pass
        elif info.default is not None:
            extra.update(default=info.default, show_default=True)
        else:
            extra["default"] = None
        return click.option(*(decls or ("--" + name.replace("_", "-"),)), name, **{**extra, **kwargs})

    fn = _with_placement(fn)
    for name in ("max_memory", "device_map", "allow_new_weights", "revision", "dtype", "device"):
        fn = option(name)(fn)
    return option("model", "--model", "-m", required=True, callback=check_model_names)(fn)


def _with_placement(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` with ``--device-map``/``--max-memory`` checked and in force for its loads."""

    @functools.wraps(fn)
    def run(*args: Any, device_map: str | None = None, max_memory: str | None = None, **kwargs: Any) -> Any:
        if device_map is None and max_memory is None:
            return fn(*args, **kwargs)
        from headlens.probes.placement import command_placement, placement_of

        placement_of(device_map, max_memory, device=kwargs.get("device", "auto"))  # bad input: one line, before anything loads
        with command_placement(device_map, max_memory):
            return fn(*args, **kwargs)

    return run


def check_model_names(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--model`` callback (one value or several): a probable typo of a named model (``dmeo``) is
    refused with the names it is close to (exit 3), before anything loads."""
    from headlens.reports.api.named_models import model_flag_hint

    for spec in value if isinstance(value, (tuple, list)) else (value,):
        hint = model_flag_hint(spec) if isinstance(spec, str) else None
        if hint:
            raise ModelLoadError(hint, model=spec)
    return value


#: Loggers of headlens' own packages (each module logs to ``logging.getLogger(__name__)``).
_OWN_LOGGERS = ("headlens",)

#: ``headlens -q`` / default / ``-v`` / ``-vv``: the level of headlens' own loggers.
_LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}


class _OneLineHandler(logging.Handler):
    """Log records on stderr, one line each: ``headlens: warning: ...``, ``headlens: error: ...``,
    ``headlens: ...`` (info) and ``headlens: debug: LOGGER: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.name == "py.warnings":  # "file:line: Category: message" plus the source line
                text = (text.strip().splitlines() or [""])[0]
            text = " ".join(text.split())
            if record.levelno >= logging.ERROR:
                prefix = "headlens: error: "
            elif record.levelno >= logging.WARNING:
                prefix = "headlens: warning: "
            elif record.levelno >= logging.INFO:
                prefix = "headlens: "
            else:
                prefix = f"headlens: debug: {record.name}: "
            click.echo(prefix + text, err=True)
        except Exception:  # noqa: BLE001 - logging must never break a command
            self.handleError(record)


def setup_logging(verbosity: int) -> Callable[[], None]:
    """Configure logging for one CLI run and return the function that undoes it.

    ``verbosity`` is ``-v`` count minus ``-q`` count: below 0 errors only, 0 warnings (the
    default), 1 also headlens' info lines, 2 or more also debug lines (library chatter
    from model loading included).  Records of any logger that reach the root logger,
    Python warnings included, are printed as one line on stderr.
    """
    level = _LEVELS[max(-1, min(2, verbosity))]
    root = logging.getLogger()
    own = [logging.getLogger(name) for name in _OWN_LOGGERS]
    saved_root, saved_own = root.level, [(lg, lg.level) for lg in own]
    was_capturing = getattr(logging, "_warnings_showwarning", None) is not None
    handler = _OneLineHandler()
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))  # other libraries: warnings and errors, or errors with -q
    for lg in own:
        lg.setLevel(level)
    logging.captureWarnings(True)
    bars_back = _hub_bars_off()

    def restore() -> None:
        bars_back()
        root.removeHandler(handler)
        root.setLevel(saved_root)
        for lg, lvl in saved_own:
            lg.setLevel(lvl)
        if not was_capturing:
            logging.captureWarnings(False)

    return restore


#: Hugging Face's switch of its progress bars, read when transformers and huggingface_hub are imported.
HUB_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def _hub_bars_off() -> Callable[[], None]:
    """Hugging Face's own progress bars (``Loading weights``, ``Writing model shards``) off for one
    CLI run: they wrote tqdm lines on stderr beside headlens' one-line messages.  Modules imported
    later read :data:`HUB_BARS_ENV`; transformers if already imported is switched off and back.
    The user's own setting of the variable is kept.  Returns the function that undoes it."""
    saved = os.environ.get(HUB_BARS_ENV)
    if saved is None:
        os.environ[HUB_BARS_ENV] = "1"
    hf = sys.modules.get("transformers.utils.logging")
    was_on = bool(hf.is_progress_bar_enabled()) if hf is not None else False
    if hf is not None and was_on and saved is None:
        hf.disable_progress_bar()

    def restore() -> None:
        if saved is None:
            os.environ.pop(HUB_BARS_ENV, None)
            if hf is not None and was_on:
                hf.enable_progress_bar()

    return restore


def parse_csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise click.BadParameter(f"empty item in {value!r}")
    return items


def parse_ints(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """Click callback: ``"0,3"`` -> ``(0, 3)``."""
    items = parse_csv(value)
    if items is None:
        return None
    try:
        return tuple(int(v) for v in items)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated whole numbers such as 0,3") from None


#: ``--layers 0,3``
parse_layers = parse_ints


class HeadsType(click.ParamType):
    """``--heads 5.1,5.5`` -> ``((5, 1), (5, 5))``; a bad head is a one-line usage error (exit 2).

    Each head goes through :func:`headlens.probes.head_lists.parse_head`, the parser that mask
    files and the report use too.
    """

    name = "LAYER.HEAD,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[tuple[int, int], ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_heads(value)
        except HeadlensError as exc:
            self.fail(str(exc), param, ctx)


#: ``--heads 5.1,5.5`` (``type=HEADS``)
HEADS = HeadsType()
