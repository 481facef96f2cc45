"""The sweep's task list and settings.

A task is one model at one revision, or one local checkpoint folder.  ``--model`` names a
Hub id (crossed with every ``--revision``), a named model (``demo``, ``minilm``:
:mod:`headlens.reports.api.named_models`), a checkpoint folder, or a folder of checkpoint folders
(``headlens demo train --save-every`` writes one), which stands for each checkpoint inside it.
Each task knows its training step when one can be read:

* a revision named ``stepN`` (Pythia's convention: ``step0`` ... ``step143000``);
* ``checkpoint.json`` in the folder (``{"step": N, "run": NAME}``, written by ``demo train --save-every``);
* ``training_summary.json`` (a finished ``demo train`` folder: its ``steps``);
* a folder named ``step-N``, ``stepN`` or ``step_N``.

The ``model`` column of the dataset groups the checkpoints of one run: the Hub id, the
``run`` of ``checkpoint.json``, or the folder's (or, for a ``step-N`` folder, its parent's) name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headlens.probes.errors import InputError
from headlens.reports.api.named_models import named_models
from headlens.reports.runs.sweep.config import SweepConfig

log = logging.getLogger(__name__)

__all__ = ["SweepTask", "SweepConfig", "plan_tasks", "parse_steps", "step_of_revision", "checkpoint_info", "CHECKPOINT_INFO"]

#: The file in a kept checkpoint folder that records its step (and the run it belongs to).
CHECKPOINT_INFO = "checkpoint.json"

_STEP_REVISION = re.compile(r"^step[-_]?(\d+)$")


@dataclass(frozen=True, kw_only=True)
class SweepTask:
    """One census: ``model`` (as loaded: Hub id, folder or ``demo``) at ``revision``."""

    model: str
    revision: str | None = None
    #: the dataset's ``model`` column: the run or model this checkpoint belongs to
    run: str
    step: int | None = None
    #: short human label (``pythia-70m@step1000``, ``demo-checkpoints/step-000100``)
    label: str
    #: folder name under ``OUT/tasks/``: the label made safe, plus a hash of model and revision
    key: str


def step_of_revision(revision: str | None) -> int | None:
    m = _STEP_REVISION.match(revision or "")
    return int(m.group(1)) if m else None


def parse_steps(text: str) -> list[str]:
    """``"0:3000:1000"`` -> ``["step0", "step1000", "step2000", "step3000"]`` (stop included);
    ``"0,512,1000"`` -> ``["step0", "step512", "step1000"]``."""
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) != 3 or parts[2] <= 0 or parts[1] < parts[0]:
                raise ValueError
            return [f"step{n}" for n in range(parts[0], parts[1] + 1, parts[2])]
        return [f"step{int(p)}" for p in text.split(",")]
    except ValueError:
        raise InputError(f"--steps {text!r}: expected START:STOP:EVERY (e.g. 0:143000:1000) or a list such as 0,512,1000") from None


def checkpoint_info(folder: Path) -> dict[str, Any]:
    """``{"step": ..., "run": ...}`` as far as the folder tells (empty when it tells nothing)."""
    info: dict[str, Any] = {}
    for name, key in ((CHECKPOINT_INFO, "step"), ("training_summary.json", "steps")):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s (%s); the step is taken from the folder name if it has one", path, exc)
            continue
        if isinstance(data, dict) and isinstance(data.get(key), int):
            info["step"] = data[key]
            if isinstance(data.get("run"), str):
                info["run"] = data["run"]
            return info
    step = step_of_revision(folder.name)
    if step is not None:
        info["step"] = step
        info["run"] = folder.resolve().parent.name
    return info


def _key(label: str, model: str, revision: str | None) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._")[:60] or "task"
    digest = hashlib.sha1(f"{model}\0{revision or ''}".encode()).hexdigest()[:8]
    return f"{safe}-{digest}"


def _is_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def _folder_tasks(path: Path) -> list[SweepTask]:
    """A checkpoint folder, or a folder of checkpoint folders (sorted by step, then name)."""
    path = path.resolve()
    if not _is_checkpoint(path):
        children = [c for c in sorted(path.iterdir()) if c.is_dir() and _is_checkpoint(c)] if path.is_dir() else []
        if children:
            tasks = [t for c in children for t in _folder_tasks(c)]
            return sorted(tasks, key=lambda t: (t.step is None, t.step or 0, t.label))
        # not a checkpoint: the task fails with the loader's one-line error, the others go on
    info = checkpoint_info(path) if path.is_dir() else {}
    run = info.get("run") or path.name
    label = f"{path.parent.name}/{path.name}" if "step" in info and info.get("run") != path.name else path.name
    return [
        SweepTask(
            model=str(path.resolve()),
            revision=None,
            run=run,
            step=info.get("step"),
            label=label,
            key=_key(label, str(path.resolve()), None),
        )
    ]


def plan_tasks(models: list[str], revisions: list[str] | None = None) -> list[SweepTask]:
    """Expand ``--model`` values (and ``--revision``/``--steps``) to the task list, duplicates dropped.

    Revisions apply to Hub ids; given with a local folder they are an error (a folder has one version).
    """
    if not models:
        raise InputError("no models: pass --model (repeatable)")
    named = named_models()
    tasks: list[SweepTask] = []
    for model in models:
        path = Path(model).expanduser()
        if model in named and not path.exists():  # a folder of that name here wins, as in the loader
            # the named model's folder by its path: a worker started elsewhere (another cwd, another node) loads the same
            folder = named[model]()
            step = checkpoint_info(folder).get("step")
            tasks.append(SweepTask(model=str(folder), run=model, step=step, label=model, key=_key(model, model, None)))
        elif path.exists() or model.startswith((".", "/", "~")):
            if revisions:
                raise InputError(
                    f"--revision/--steps apply to Hub models; {model} is a local folder (pass each checkpoint folder as --model)"
                )
            tasks.extend(_folder_tasks(path))
        else:
            for revision in revisions or [None]:
                label = model.split("/")[-1] + (f"@{revision}" if revision else "")
                tasks.append(
                    SweepTask(
                        model=model,
                        revision=revision,
                        run=model,
                        step=step_of_revision(revision),
                        label=label,
                        key=_key(label, model, revision),
                    )
                )
    seen: set[str] = set()
    unique = []
    for task in tasks:
        if task.key not in seen:
            seen.add(task.key)
            unique.append(task)
    return unique
