"""Gather the finished tasks into one Parquet dataset, partitioned by model.

``OUT/dataset/model=NAME/part-0.parquet`` (Hive partitioning, the name URI-encoded: a Hub
id's ``/`` is ``%2F``), one row per (checkpoint, head, detector), columns
:data:`DATASET_COLUMNS`: ``score``, ``baseline`` and the 95% interval ``ci_low``/``ci_high``
exactly as the task's ``scores.csv`` (``headlens detect``'s table) holds them, plus ``role``:
whether the head gets that detector's role at that checkpoint (:func:`classify_heads`).
``OUT/checkpoints.csv`` has one row per checkpoint: step, held-out loss, parameters, timing;
with ``--ablate``, ``OUT/ablation.parquet`` has each checkpoint's single-head zero-ablation
table (``headlens ablate``'s columns, ``delta`` = loss increase) with the same first four columns.

Read it back with :func:`read_dataset` (or ``pandas.read_parquet(OUT / "dataset")``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from headlens.probes.errors import InputError
from headlens.probes.outputs import atomic_dir
from headlens.reports.render.tables import write_table
from headlens.reports.runs.sweep.plan import SweepTask
from headlens.reports.runs.sweep.task import is_done, read_loss_set, task_folder

log = logging.getLogger(__name__)

__all__ = ["DATASET_COLUMNS", "CHECKPOINT_COLUMNS", "gather", "loss_sets", "read_dataset", "import_pyarrow"]

DATASET_COLUMNS = [
    "model",
    "revision",
    "step",
    "label",
    "layer",
    "head",
    "detector",
    "score",
    "baseline",
    "ci_low",
    "ci_high",
    "n",
    "accuracy",
    "role",
]
CHECKPOINT_COLUMNS = [
    "model",
    "revision",
    "step",
    "label",
    "key",
    "n_layers",
    "n_heads",
    "n_params",
    "heldout_loss",
    "loss_tokens",
    "census_s",
    "wall_s",
    "cpu_s",
    "device",
    "host",
]


def import_pyarrow():
    try:
        import pyarrow
        import pyarrow.dataset
    except ImportError:
        raise InputError("headlens sweep writes a Parquet dataset and needs pyarrow: pip install 'headlens[sweep]'") from None
    return pyarrow


def _task_rows(out: Path, task: SweepTask) -> tuple[pd.DataFrame, dict]:
    folder = task_folder(out, task)
    scores = pd.read_csv(folder / "scores.csv")
    roles = pd.read_csv(folder / "roles.csv", keep_default_na=False)
    info = json.loads((folder / "checkpoint.json").read_text(encoding="utf-8"))
    has = set(zip(roles["layer"].astype(int).tolist(), roles["head"].astype(int).tolist(), roles["role"].astype(str).tolist(), strict=True))
    scores["role"] = [(int(la), int(h), d) in has for la, h, d in zip(scores["layer"], scores["head"], scores["detector"], strict=True)]
    scores.insert(0, "label", task.label)
    scores.insert(0, "step", task.step)
    scores.insert(0, "revision", task.revision)
    scores.insert(0, "model", task.run)
    if "accuracy" not in scores:
        scores["accuracy"] = float("nan")
    row = {
        **{c: info.get(c) for c in CHECKPOINT_COLUMNS},
        "model": task.run,
        "revision": task.revision,
        "step": task.step,
        "label": task.label,
        "key": task.key,
    }
    return scores[DATASET_COLUMNS], row


def _with_task(table: pd.DataFrame, task: SweepTask) -> pd.DataFrame:
    front = pd.DataFrame({"model": task.run, "revision": task.revision, "step": task.step, "label": task.label}, index=table.index)
    out = pd.concat([front, table], axis=1)
    out["step"] = out["step"].astype("Int64")
    return out


def gather(out: str | Path, tasks: list[SweepTask]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``OUT/dataset`` and ``OUT/checkpoints.csv`` from every finished task; returns both tables.

    The dataset is written beside the old one and swapped in, so an interrupted gather never
    leaves half a dataset; tasks not finished are left out (a rerun adds them).
    """
    pa = import_pyarrow()
    import pyarrow.dataset as ds

    out = Path(out)
    frames, rows = [], []
    for task in tasks:
        if is_done(out, task):
            scores, row = _task_rows(out, task)
            frames.append(scores)
            rows.append(row)
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DATASET_COLUMNS)
    data["step"] = data["step"].astype("Int64")
    data["revision"] = data["revision"].astype("string")
    data = data.sort_values(["model", "step", "label", "detector", "layer", "head"], na_position="last", kind="stable").reset_index(
        drop=True
    )
    checkpoints = pd.DataFrame(rows, columns=CHECKPOINT_COLUMNS)
    checkpoints["step"] = checkpoints["step"].astype("Int64")
    checkpoints = checkpoints.sort_values(["model", "step", "label"], na_position="last", kind="stable").reset_index(drop=True)
    table = pa.Table.from_pandas(data, preserve_index=False)
    with atomic_dir(out / "dataset") as tmp:
        ds.write_dataset(
            table,
            tmp,
            format="parquet",
            basename_template="part-{i}.parquet",
            partitioning=ds.partitioning(pa.schema([("model", pa.string())]), flavor="hive"),
            existing_data_behavior="error",
        )
    write_table(checkpoints, out / "checkpoints.csv")
    ablation = [
        _with_task(pd.read_csv(task_folder(out, t) / "ablation.csv"), t)
        for t in tasks
        if is_done(out, t) and (task_folder(out, t) / "ablation.csv").is_file()
    ]
    if ablation:
        write_table(pd.concat(ablation, ignore_index=True), out / "ablation.parquet")
    log.info("dataset: %d rows from %d checkpoints -> %s", len(data), len(checkpoints), out / "dataset")
    return data, checkpoints


def loss_sets(out: str | Path, tasks: list[SweepTask]) -> list[dict]:
    """The held-out windows of the finished tasks, once per distinct set (checkpoints of one run share
    a tokenizer, hence the same windows): each :meth:`EvalSet.describe` (source text, window, BOS
    counted in it, offsets, fingerprint of the token ids) with the ``labels`` of the tasks scored on it."""
    sets: dict[str, dict] = {}
    for task in tasks:
        if is_done(out, task) and (described := read_loss_set(out, task)) is not None:
            sets.setdefault(described["fingerprint"], {"labels": [], **described})["labels"].append(task.label)
    return list(sets.values())


def read_dataset(out: str | Path) -> pd.DataFrame:
    """The dataset under ``OUT/dataset`` as one frame, ``model`` a plain string column, sorted as written."""
    import_pyarrow()
    path = Path(out) / "dataset"
    if not path.is_dir():
        raise InputError(f"{path} does not exist: run headlens sweep first")
    data = pd.read_parquet(path)
    data["model"] = data["model"].astype(str)
    data = data[DATASET_COLUMNS]
    return data.sort_values(["model", "step", "label", "detector", "layer", "head"], na_position="last", kind="stable").reset_index(
        drop=True
    )
