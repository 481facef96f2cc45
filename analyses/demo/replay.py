"""Replay the first steps of a logged demo-model run and compare its losses with the log."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from headlens.analyses.demo.checkpoints import config_from_summary
from headlens.analyses.demo.data import build_corpus, fingerprint
from headlens.analyses.demo.train import train
from headlens.probes.errors import InputError
from headlens.probes.jsonl import read_jsonl

__all__ = ["ReplayUnavailable", "ReplayReport", "read_log", "replay"]

_SUMMARY_KEYS = ("recipe", "steps", "data", "versions")


class ReplayUnavailable(InputError):
    """The training log cannot be read or replayed here (missing or broken files, or other training text)."""


@dataclass
class ReplayReport:
    steps: int
    logged: list[float]
    rerun: list[float]
    wall_s: float
    mismatches: list[tuple[int, float, float]] = field(default_factory=list)  # (step, logged, rerun)

    @property
    def max_abs_diff(self) -> float:
        return max((abs(a - b) for a, b in zip(self.logged, self.rerun, strict=True)), default=0.0)

    def summary(self) -> str:
        head = f"replayed {self.steps} steps in {self.wall_s:.0f} s: "
        if not self.mismatches:
            return head + f"every training loss matches the log to 3 decimals (largest difference {self.max_abs_diff:.2e})"
        step, want, got = self.mismatches[0]
        return head + f"{len(self.mismatches)} losses differ at 3 decimals; first at step {step}: logged {want:.6f}, rerun {got:.6f}"


def read_log(folder: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(training_summary, log rows)`` of a folder written by ``headlens demo train``."""
    folder = Path(folder)
    try:
        summary = json.loads((folder / "training_summary.json").read_text(encoding="utf-8"))
        log_file = folder / "training_log.jsonl"
        if not log_file.is_file():
            raise FileNotFoundError(2, "missing", str(log_file))
        rows = [row for _, row in read_jsonl(log_file, what="training log")]
    except FileNotFoundError as exc:
        raise ReplayUnavailable(f"{folder}: no training log ({Path(exc.filename).name} is missing)", folder=str(folder)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, InputError) as exc:
        raise ReplayUnavailable(f"{folder}: unreadable training log ({exc})", folder=str(folder)) from None
    missing = [k for k in _SUMMARY_KEYS if not isinstance(summary, dict) or k not in summary]
    if missing or not all(isinstance(r, dict) and "step" in r for r in rows):
        what = f"training_summary.json lacks {', '.join(missing)}" if missing else "training_log.jsonl has rows without a step"
        raise ReplayUnavailable(f"{folder}: not a log written by `headlens demo train` ({what})", folder=str(folder))
    return summary, rows


def replay(folder: str | Path, steps: int, on_step: Callable[[int], None] | None = None) -> ReplayReport:
    """Rerun the first ``steps`` steps of the run logged in ``folder`` with its recorded recipe."""
    summary, rows = read_log(folder)
    logged = {r["step"]: r["train_loss"] for r in rows if r.get("train_loss") is not None}
    if steps > len(logged):
        raise ReplayUnavailable(f"the log has {len(logged)} steps; cannot replay {steps}")
    here = fingerprint(build_corpus())
    if here != summary["data"]["fingerprint"]:
        raise ReplayUnavailable(
            f"this Python ships other training text than the Python {summary['versions']['python']} that made the log "
            f"(fingerprint {here} vs {summary['data']['fingerprint']})"
        )
    threads = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        result = train(config_from_summary(summary), steps=steps, eval_every=0, on_log=(lambda r: on_step(r["step"])) if on_step else None)
    finally:
        torch.set_num_threads(threads)
    rerun = [r["train_loss"] for r in result.log if r["step"] >= 1]
    want = [logged[s] for s in range(1, steps + 1)]
    bad = [(s, w, g) for s, (w, g) in enumerate(zip(want, rerun, strict=True), start=1) if round(w, 3) != round(g, 3)]
    return ReplayReport(steps=steps, logged=want, rerun=rerun, wall_s=time.perf_counter() - t0, mismatches=bad)
