"""One sweep task: load the checkpoint, run the census, measure the held-out loss, write its folder.

The census is the study ``headlens detect`` and ``headlens classify`` run
(:func:`headlens.reports.api.census.census`), so a task's ``scores.csv`` is what
``headlens detect --out scores.csv`` writes for the same model and settings.  The folder
``OUT/tasks/KEY/`` is written under a temporary name and renamed when complete:
``manifest.json`` in it means the task is done, and a rerun skips it.  With ``ablation`` the
task also runs ``headlens ablate``'s study (zero ablation of each head alone) on the windows of
the held-out loss (:func:`headlens.reports.api.heldout.heldout`) and writes ``ablation.csv``.

This module imports neither Ray nor pyarrow: it runs the same in a Ray worker and in-process.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.analyses.ablation.study import AblationConfig
from headlens.probes.errors import HeadlensError, InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.outputs import atomic_dir, write_json
from headlens.reports.api.census import CensusResult, census
from headlens.reports.api.heldout import HeldoutLoss, heldout
from headlens.reports.api.models import load_model
from headlens.reports.render.tables import write_table
from headlens.reports.runs.sweep.plan import SweepConfig, SweepTask

log = logging.getLogger(__name__)

__all__ = ["run_task", "task_folder", "is_done", "heldout_loss", "read_loss_set", "TASK_FILES"]

TASK_FILES = ("scores.csv", "roles.csv", "checkpoint.json", "manifest.json")


def task_folder(out: str | Path, task: SweepTask) -> Path:
    return Path(out) / "tasks" / task.key


def is_done(out: str | Path, task: SweepTask) -> bool:
    folder = task_folder(out, task)
    return all((folder / name).is_file() for name in TASK_FILES)


def heldout_loss(loaded: Any, config: SweepConfig) -> HeldoutLoss:
    """The held-out loss (and with ``config.ablation`` the zero-ablation table) of one checkpoint
    (:func:`headlens.reports.api.heldout.heldout`)."""
    ablation = AblationConfig(method="zero", seed=config.census.seed, batch_size=config.census.batch_size) if config.ablation else None
    result = heldout(
        loaded,
        text_file=config.text_file,
        n_windows=config.loss_windows,
        window=config.loss_window,
        batch_size=config.census.batch_size,
        ablation=ablation,
    )
    if ablation is not None and result.ablation is None:
        raise InputError("--ablate needs the held-out loss windows (--loss-windows above 0, a decoder)")
    return result


def _loss_fields(loss: HeldoutLoss) -> dict[str, Any]:
    """The held-out loss's columns of ``checkpoint.json`` (and of the dataset's rows)."""
    data = loss.data
    if data is None:
        return {"heldout_loss": None, "loss_tokens": 0, **({"loss_note": loss.note} if loss.note else {})}
    return {
        "heldout_loss": loss.loss,
        "loss_tokens": loss.tokens,
        "loss_text": data.source.get("text"),
        "loss_windows": int(data.tokens.shape[0]),
        "loss_window": data.source.get("window"),
        "loss_basis": data.basis(),
    }


def _role_table(roles: pd.DataFrame) -> pd.DataFrame:
    """``layer, head, role``: one row per (head, role) it has, from the census' long role table."""
    return roles[["layer", "head", "role"]].reset_index(drop=True)


def _census(task: SweepTask, config: SweepConfig, command: list[str]) -> tuple[LoadedModel, CensusResult, pd.DataFrame, dict[str, Any]]:
    """``headlens classify``'s census of one checkpoint (:func:`headlens.reports.api.census.census`)."""
    loaded = load_model(
        task.model, device=config.device, dtype=config.dtype, revision=task.revision, allow_new_weights=config.allow_new_weights
    )
    result = census(loaded, config.census, thresholds=dict(config.thresholds), baseline_factor=config.baseline_factor, command=command)
    roles = _role_table(result.roles)
    manifest = {**result.manifest, "sweep_task": asdict(task), "sweep": config.to_dict()}
    return loaded, result, roles, manifest


def run_task(task: SweepTask, config: SweepConfig, out: str, command: list[str]) -> dict[str, Any]:
    """Run one task; returns ``{"key", "status": "done"|"failed", "error", "exit_code", "wall_s", ...}``.

    A :class:`HeadlensError` (bad revision, not a checkpoint, unsupported model, ...) becomes a
    ``failed`` record with its one-line message; anything else propagates (Ray reports it).
    """
    t0, c0 = time.perf_counter(), time.process_time()
    record: dict[str, Any] = {
        "key": task.key,
        "label": task.label,
        "model": task.model,
        "revision": task.revision,
        "step": task.step,
        "host": os.uname().nodename,
    }
    try:
        loaded, result, roles, manifest = _census(task, config, command)
        t_census = time.perf_counter() - t0
        measured = heldout_loss(loaded, config)
    except HeadlensError as exc:
        log.info("task %s failed: %s", task.label, exc)
        return {
            **record,
            "status": "failed",
            "error": " ".join(str(exc).split()),
            "exit_code": exc.exit_code,
            "wall_s": round(time.perf_counter() - t0, 2),
        }
    data, ablation = measured.data, measured.ablation
    info = {
        **record,
        **_loss_fields(measured),
        "run": task.run,
        "n_layers": loaded.n_layers,
        "n_heads": loaded.n_heads,
        "n_params": sum(p.numel() for p in loaded.bridge.parameters()),
        "device": str(loaded.device),
        "census_s": round(t_census, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(
            time.process_time() - c0, 2
        ),  # CPU seconds of this worker (all its threads): a cost that does not depend on the machine's load
    }
    # a folder left incomplete by an earlier, interrupted run is replaced
    with atomic_dir(task_folder(out, task)) as tmp:
        write_table(result.scores, tmp / "scores.csv")
        write_table(roles, tmp / "roles.csv")
        if ablation is not None:
            write_table(ablation, tmp / "ablation.csv")
        write_json(tmp / "checkpoint.json", info)
        # how the held-out windows were cut (offsets, BOS counted in the window, source text): the loss by hand
        manifest["heldout_loss"] = (
            {"value": measured.loss, "evalset": data.describe(), "frame_ids": [list(map(int, ids)) for ids in loaded.frame(True)]}
            if data is not None
            else {"value": None, "note": measured.note or "no loss windows (--loss-windows 0)"}
        )
        write_json(tmp / "manifest.json", manifest)  # last: its presence marks the task done
    return {**info, "status": "done", "error": None, "exit_code": 0}


def read_loss_set(out: str | Path, task: SweepTask) -> dict[str, Any] | None:
    """The task's held-out windows as its manifest records them (:meth:`EvalSet.describe`, and the
    ids of the framing tokens, ``frame_ids``: [prefix, suffix]); None: no loss."""
    manifest = json.loads((task_folder(out, task) / "manifest.json").read_text(encoding="utf-8"))
    loss = manifest.get("heldout_loss") or {}
    return {**loss["evalset"], "frame_ids": loss.get("frame_ids")} if loss.get("evalset") else None


def read_task_info(out: str | Path, task: SweepTask) -> dict[str, Any]:
    return json.loads((task_folder(out, task) / "checkpoint.json").read_text(encoding="utf-8"))
