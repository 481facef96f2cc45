"""Which text a model is measured on: the one rule.

A model that carries held-out text of its own is measured on it by default; any other model on
the text that ships with headlens (:func:`headlens.analyses.stimuli.eval_text`).  Ablation,
pruning, the design studies (through :func:`headlens.analyses.measure.setup.eval_setup`) and the
sink evidence of ``classify --evidence`` (:mod:`headlens.analyses.patching.evidence`) all ask
:func:`choose_text`; the manifest records its :meth:`TextChoice.describe` (which text, why).

Named texts (``text=`` takes the name in place of a text):

* ``"heldout"``: the model's own held-out text.  Today the one model family that carries one is
  the demo model (any checkpoint ``headlens demo train`` writes: a ``training_summary.json`` with
  the recipe beside the weights): its held-out split, as ``headlens demo heldout`` writes it
  (:func:`headlens.analyses.measure.python_docs.heldout_text`), which the training never saw.
* ``"builtin"``: the built-in English evaluation text, whatever the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from headlens.analyses.measure.python_docs import heldout_text
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_TEXT",
    "HELDOUT_TEXT",
    "TEXT_NAMES",
    "TEXT_RULE",
    "TextChoice",
    "choose_text",
    "own_text_name",
    "demo_text",
    "named_text",
]

#: How the evaluation text that ships with headlens is named in manifests and pages.
BUILTIN_TEXT = "built-in evaluation text"
#: How the demo model's held-out text is named in manifests, pages and its model card.
HELDOUT_TEXT = "demo's held-out text (`headlens demo heldout`)"
#: The names ``text=`` takes in place of a text.
TEXT_NAMES = ("heldout", "builtin")
#: The default, in one sentence (stage keys and manifests quote it).
TEXT_RULE = "the model's own held-out text when it carries one (the demo model's held-out split), else the built-in evaluation text"


@dataclass(frozen=True)
class TextChoice:
    """The text a study measures on: ``text`` itself, ``name`` (``"heldout"``, ``"builtin"``,
    ``"text"`` for a text given, ``"text_file"``), ``label`` (how outputs name it) and ``why``."""

    text: str
    name: str
    label: str
    why: str

    def describe(self) -> dict[str, Any]:
        """The manifest's record: which text, why, and its SHA-256 (first 16 hex digits) and length."""
        digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]
        return {"name": self.name, "label": self.label, "why": self.why, "sha256": digest, "n_chars": len(self.text)}


def _is_demo_checkpoint(folder: Path) -> bool:
    """A folder written by ``headlens demo train`` (the shipped demo model is one)."""
    summary = folder / "training_summary.json"
    if not summary.is_file():
        return False
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.debug("%s: not a demo training summary (%s)", summary, exc)
        return False
    return isinstance(data, dict) and isinstance(data.get("recipe"), dict) and isinstance(data.get("data"), dict)


#: Models that carry held-out text of their own: (recognises the model's folder, what it is).
_OWN_TEXTS: tuple[tuple[Callable[[Path], bool], str], ...] = (
    (_is_demo_checkpoint, "a `headlens demo train` checkpoint, training_summary.json beside its weights"),
)


def _own_text(model: Any) -> str | None:
    """What makes ``model`` carry its own held-out text (None: it carries none)."""
    if getattr(model, "source", None) != "local" or not getattr(model, "path", None):
        return None
    folder = Path(model.path)
    return next((what for recognises, what in _OWN_TEXTS if recognises(folder)), None)


def own_text_name(model: Any) -> str | None:
    """``"heldout"`` when ``model`` carries held-out text of its own, else None."""
    return "heldout" if _own_text(model) is not None else None


@lru_cache(maxsize=1)
def demo_text(split: str = "heldout") -> str:
    """The demo model's ``split`` as one text (``"heldout"``: its held-out documents joined by
    ``<|endoftext|>``, what ``headlens demo heldout`` writes; built from the Python installation's
    standard library, cached per process)."""
    if split != "heldout":
        raise InputError(f"split={split!r}: the demo's public text is its held-out split; use split='heldout'", split=split)
    return heldout_text()


def named_text(name: str, model: Any = None) -> TextChoice:
    """The text called ``name`` (:data:`TEXT_NAMES`), asked for; ``"heldout"`` needs a ``model`` that carries one."""
    if name == "builtin":
        return TextChoice(eval_text(), "builtin", BUILTIN_TEXT, "asked for (text='builtin')")
    if name != "heldout":
        raise InputError(f"text={name!r} is not a named text: choose from {', '.join(TEXT_NAMES)}", text=name)
    own = _own_text(model) if model is not None else None
    if own is None:
        what = getattr(model, "name", None) or "this model"
        raise InputError(
            f"text='heldout': {what} carries no held-out text of its own (only demo checkpoints do); give text= or text_file=", text=name
        )
    return TextChoice(demo_text("heldout"), "heldout", HELDOUT_TEXT, "asked for (text='heldout')")


def choose_text(model: Any, text: str | None = None, *, text_file: str | None = None) -> TextChoice:
    """The text ``model`` is measured on: ``text`` read from ``text_file``, a text given, a named
    text (:data:`TEXT_NAMES`), or with neither the default (:data:`TEXT_RULE`)."""
    if text_file is not None:
        if text is None:
            raise InputError(f"text_file={text_file!r} arrived without its text", text_file=text_file)
        return TextChoice(text, "text_file", f"text file {text_file}", f"asked for (text_file={text_file!r})")
    if text is not None:
        if text in TEXT_NAMES:
            return named_text(text, model)
        return TextChoice(text, "text", "text", "asked for (text= given)")
    what = _own_text(model)
    if what is not None:
        return TextChoice(demo_text("heldout"), "heldout", HELDOUT_TEXT, f"default: the model carries its own held-out text ({what})")
    return TextChoice(eval_text(), "builtin", BUILTIN_TEXT, "default: the model carries no held-out text of its own")
