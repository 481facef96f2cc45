"""One report run's stages, in order: each skipped, loaded from a finished earlier run, or run now and
its marker written (:class:`StageRunner`, used by :func:`headlens.reports.runs.report.build.build_report`,
whose module docstring says how resuming and failures work)."""

from __future__ import annotations

import logging
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headlens.probes.config import ModelConfig
from headlens.probes.loading import load_model
from headlens.probes.progress import Progress
from headlens.reports.api.named_models import named_models
from headlens.reports.runs.report import stages as _stages
from headlens.reports.runs.report.context import StageContext
from headlens.reports.runs.report.markers import (
    JOURNAL,
    MARKER,
    REPORT_FORMAT,
    clear_stage_dir,
    json_key,
    key_hash,
    now_utc,
    one_line,
    read_marker,
    write_marker,
)
from headlens.reports.runs.report.result import StageStatus
from headlens.reports.runs.report.settings import ReportSettings
from headlens.reports.runs.report.stages import STAGES

log = logging.getLogger(__name__)

__all__ = ["StageRunner", "skipped_stages"]


def skipped_stages(settings: ReportSettings) -> dict[str, str | None]:
    """The stages not to run, each with its reason (None: skipped as asked): those in ``settings.skip``
    and those whose input stage is skipped (evidence reads the census's roles)."""
    skipped: dict[str, str | None] = {n: None for n in STAGES if n in settings.skip}
    for n in STAGES:
        dep = next((d for d in _stages.STAGE_DEFS[n].needs if d in skipped), None)
        if n not in skipped and dep is not None:
            skipped[n] = f"skipped: it reads the {dep} stage, which is skipped"
    return skipped


@dataclass(kw_only=True)
class StageRunner:
    """What every stage of one report run shares: the folder, the settings, each stage's key, the
    stages to redo, where progress goes, and the model (loaded once, when a stage first needs it)."""

    out: Path
    settings: ReportSettings
    keys: dict[str, Any]
    redo: set[str]
    reporter: Progress | None
    model_name: str
    load: dict[str, Any]
    dtype: str
    loaded: Any = None
    statuses: list[StageStatus] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tell(self, text: str) -> None:
        """A stage event: ``reporter.message(text)`` where it has one (a plain Progress: a log line)."""
        message = getattr(self.reporter, "message", None)
        if callable(message):
            message(text)
        elif self.reporter is not None:
            log.info("%s", text)

    def finished(self, name: str) -> dict[str, Any] | None:
        """The marker of stage ``name`` when it finished earlier with this run's key and its files are all there."""
        marker = read_marker(self.out / name)
        if name in self.redo or marker is None or marker.get("status") != "done" or marker.get("key") != self.keys[name]:
            return None
        if not all((self.out / name / f).is_file() for f in marker.get("files", [])):
            return None
        return marker

    def model(self) -> Any:
        """The model, loaded on first use (with a stage line saying how long it took)."""
        if self.loaded is None:
            t0 = time.perf_counter()
            self.loaded = load_model(ModelConfig(model=self.model_name, **self.load), named=named_models())
            if self.reporter is not None:  # after loading: a model that fails to load leaves one error line
                self.tell(f"loaded {self.model_name} in {time.perf_counter() - t0:.1f} s ({self.loaded.device}, {self.dtype})")
        return self.loaded

    def run_all(self, skipped: dict[str, str | None], command: list[str], census: Any) -> None:
        """Every stage in order, into :attr:`statuses` and :attr:`results` (``census``: a census the census stage may reuse)."""
        n = len(STAGES)
        for i, name in enumerate(STAGES, start=1):
            label = f"stage {i}/{n} {name}"

            def say(text: str, label: str = label) -> None:
                self.tell(f"{label}: {text}")

            if name in skipped:
                self.statuses.append(StageStatus(name, "skipped"))
                say(skipped[name] or "skipped")
            elif not self._load_finished(name, say):
                self._run(name, label, say, command, census)

    def _load_finished(self, name: str, say: Any) -> bool:
        """Stage ``name`` loaded from its earlier outputs; False when it has to run (not finished, or unreadable)."""
        marker = self.finished(name)
        if marker is None:
            return False
        d = self.out / name
        try:
            self.results[name] = _stages.STAGE_DEFS[name].load(d, marker)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:  # unreadable outputs: recompute
            log.warning("stage %s: cannot read its earlier outputs in %s (%s: %s); running it again", name, d, type(exc).__name__, exc)
            return False
        status = StageStatus(name, "loaded", seconds=marker.get("seconds"), files=marker.get("files", []), info=marker.get("info", {}))
        self.statuses.append(status)
        say(f"finished earlier, loaded from {d}")
        return True

    def _run(self, name: str, label: str, say: Any, command: list[str], census: Any) -> None:
        """Run stage ``name`` now, write its marker (done or failed) and record its status."""
        say("running")
        d = self.out / name
        d.mkdir(parents=True, exist_ok=True)
        clear_stage_dir(d)
        t0 = time.perf_counter()
        reporter = self.reporter

        def step(sub: str, done: int, total: int, label: str = label) -> None:
            if reporter is not None:
                reporter(f"{label}: {sub}", done, total)

        quiet = reporter is None or bool(getattr(reporter, "quiet", False))
        ctx = StageContext(
            name=name, dir=d, settings=self.settings, key=self.keys[name], model=self.model,
            step=step, command=command, quiet=quiet, say=say, census=census,
        )  # fmt: skip
        try:
            info = _stages.STAGE_DEFS[name].run(ctx)
            seconds = round(time.perf_counter() - t0, 3)
            files = sorted(
                str(p.relative_to(d))
                for p in d.rglob("*")
                if p.is_file() and p.name not in (MARKER, JOURNAL) and not p.name.startswith(".")
            )
            marker = {**self._marker(name, "done", seconds), "files": files, "info": json_key(info)}
            write_marker(d, marker)
            self.results[name] = _stages.STAGE_DEFS[name].load(d, marker)
            self.statuses.append(StageStatus(name, "done", seconds=seconds, files=files, info=marker["info"]))
            say(f"done in {seconds:.1f} s")
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing stage is reported, the others still run
            seconds = round(time.perf_counter() - t0, 3)
            error = one_line(exc)
            write_marker(d, {**self._marker(name, "failed", seconds), "error": error})
            self.statuses.append(StageStatus(name, "failed", seconds=seconds, error=error))
            say(f"FAILED: {error}")

    def _marker(self, name: str, status: str, seconds: float) -> dict[str, Any]:
        """The fields a stage marker starts with, in the order the marker file has always listed them."""
        return {
            "format": f"{REPORT_FORMAT}.stage",
            "stage": name,
            "status": status,
            "key": self.keys[name],
            "key_hash": key_hash(self.keys[name]),
            "seconds": seconds,
            "finished_utc": now_utc(),
        }
