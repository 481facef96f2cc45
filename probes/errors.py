"""Every error headlens raises on purpose, in one place.

Each exception carries the fields a caller needs and an ``exit_code`` that the CLI
turns into the process exit status (documented in docs/cli.md, "Exit codes"):

====  =============================================================
code  meaning
====  =============================================================
0     success
1     a check ran and failed (``verify``, ``selftest``)
2     bad input: arguments, prompt or data files, layers or heads; a model family or
      feature a command cannot handle (named in the message)
3     the model or its tokenizer could not be loaded
4     the output already exists (pass ``--overwrite``) or cannot be written
5     the device or dtype asked for is not available
====  =============================================================
"""

from __future__ import annotations

__all__ = [
    "HeadlensError",
    "InputError",
    "ModelLoadError",
    "OutputExistsError",
    "OutputError",
    "DeviceError",
    "CheckFailed",
    "StimulusError",
    "UnsupportedModelError",
    "InterventionError",
]


class HeadlensError(Exception):
    """Base class: a one-line, user-facing message plus an exit code."""

    exit_code: int = 2

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return self.message


class InputError(HeadlensError):
    """Bad user input: an argument, a prompt file, a layer or head index, a data file."""

    exit_code = 2


class ModelLoadError(HeadlensError):
    """The model or its tokenizer could not be loaded (``model`` names what was asked for)."""

    exit_code = 3


class OutputError(HeadlensError):
    """An output could not be written."""

    exit_code = 4


class OutputExistsError(OutputError):
    """The output path already holds something and ``overwrite`` was not given."""

    exit_code = 4


class DeviceError(HeadlensError):
    """The device or dtype asked for is not available here."""

    exit_code = 5


class CheckFailed(HeadlensError):
    """A numerical check ran to completion and failed (``verify``, ``selftest``)."""

    exit_code = 1


class StimulusError(InputError, ValueError):
    """Bad stimulus input: a malformed file, a span that does not fit its text, a word
    that is not a single token, or a text too short for what was asked."""

    exit_code = 2


class UnsupportedModelError(InputError):
    """A command cannot handle this model family or one of its features (``family`` names it)."""

    exit_code = 2


class InterventionError(UnsupportedModelError):
    """An edit of scores or patterns would not change this model's output, so it is refused."""

    exit_code = 2
