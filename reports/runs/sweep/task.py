"""One sweep task: load the checkpoint, run the census, measure the held-out loss, write its folder.

The census is the study ``headlens detect`` and ``headlens classify`` run
(:func:`headlens.reports.api.census.census`), so a task's ``scores.csv`` is what
``headlens detect --out scores.csv`` writes for the same model and settings.  The folder
``OUT/tasks/KEY/`` is written under a temporary name and renamed when complete:
``manifest.json`` in it means the task is done, and a rerun skips it.  With ``ablation`` the
task also runs ``headlens ablate``'s study (:func:`run_ablation`, zero ablation of each
head alone) on the windows of the held-out loss and writes ``ablation.csv``.

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

from headlens.analyses.ablation.evalset import text_eval_set
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.sinks.intervene import mean_loss
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import HeadlensError, InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.outputs import atomic_dir, write_json
from headlens.probes.prompts import TokenBatch
from headlens.reports.api.census import CensusResult, census
from headlens.reports.api.models import load_model
from headlens.reports.api.text_files import read_text_file
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


def _read_text(config: SweepConfig) -> tuple[str, str]:
    if config.text_file:
        return read_text_file(config.text_file), config.text_file
    return eval_text(), "built-in evaluation text"


def _eval_set(loaded: Any, config: SweepConfig) -> Any:
    text, source = _read_text(config)
    window = min(config.loss_window, loaded.n_ctx)
    return text_eval_set(
        loaded.tokenizer,
        text,
        n_windows=config.loss_windows,
        window=window,
        prepend_bos=True,
        n_ctx=loaded.n_ctx,
        source=source,
        frame=loaded.frame(True),
    )


def heldout_loss(loaded: Any, config: SweepConfig, data: Any = None) -> dict[str, Any]:
    """Mean next-token loss (nats) over ``loss_windows`` windows of the held-out text; None on encoders."""
    if config.loss_windows == 0:
        return {"heldout_loss": None, "loss_tokens": 0}
    if getattr(loaded, "is_encoder", False):
        log.info("%s is an encoder: no next-token loss to measure", loaded.name)
        return {"heldout_loss": None, "loss_tokens": 0, "loss_note": "encoder: no next-token loss"}
    data = data if data is not None else _eval_set(loaded, config)
    source, window = data.source.get("text"), data.source.get("window")
    batch = TokenBatch(
        tokens=data.tokens,
        lengths=data.lengths,
        strings=[[] for _ in range(len(data.lengths))],
        prepend_bos=True,
        pad_id=loaded.bos_id or 0,
    )
    loss, count = mean_loss(loaded, batch, batch_size=config.census.batch_size)
    return {
        "heldout_loss": loss,
        "loss_tokens": count,
        "loss_text": source,
        "loss_windows": int(data.tokens.shape[0]),
        "loss_window": window,
        "loss_basis": data.basis(),
    }


def _role_table(roles: pd.DataFrame) -> pd.DataFrame:
    """``layer, head, role``: one row per (head, role) it has, from the census' long role table."""
    return roles[["layer", "head", "role"]].reset_index(drop=True)


def _ablation(loaded: Any, config: SweepConfig, data: Any) -> Any:
    """``headlens ablate``'s exact single-head table (zero ablation, loss on the held-out windows)."""
    if data is None:
        raise InputError("--ablate needs the held-out loss windows (--loss-windows above 0, a decoder)")
    result = run_ablation(loaded, data, AblationConfig(method="zero", seed=config.census.seed, batch_size=config.census.batch_size))
    table = result.table.copy()
    table["unablated_value"] = result.unablated_value
    return table


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
        data = _eval_set(loaded, config) if config.loss_windows and not getattr(loaded, "is_encoder", False) else None
        loss = heldout_loss(loaded, config, data)
        ablation = _ablation(loaded, config, data) if config.ablation else None
    except HeadlensError as exc:
        log.info("task %s failed: %s", task.label, exc)
        return {
            **record,
            "status": "failed",
            "error": " ".join(str(exc).split()),
            "exit_code": exc.exit_code,
            "wall_s": round(time.perf_counter() - t0, 2),
        }
    info = {
        **record,
        **loss,
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
            {"value": loss["heldout_loss"], "evalset": data.describe(), "frame_ids": [list(map(int, ids)) for ids in loaded.frame(True)]}
            if data is not None
            else {"value": None, "note": loss.get("loss_note", "no loss windows (--loss-windows 0)")}
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
