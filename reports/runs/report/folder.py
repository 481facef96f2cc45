"""The report's output folder: which folders may be written, and the report manifest."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from headlens.probes.errors import OutputExistsError
from headlens.probes.manifest import build_manifest
from headlens.probes.outputs import write_json
from headlens.reports.runs.report.markers import MARKER, REPORT_FORMAT, REPORT_VERSION
from headlens.reports.runs.report.result import StageStatus
from headlens.reports.runs.report.stages import STAGES

log = logging.getLogger(__name__)

__all__ = ["read_manifest", "check_report_dir", "remove_old_report", "write_report_manifest", "SMOKE_WHY"]

#: The manifest's word on a ``--quick`` report's smoke-test stages.
SMOKE_WHY = "--quick: a few windows, prompts and random orders; these stages show that they run and state no finding"


def read_manifest(out: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("report"), dict) and obj["report"].get("format") == REPORT_FORMAT:
        return obj
    return None


def check_report_dir(out_dir: str | Path, identity: dict[str, Any], *, overwrite: bool) -> dict[str, Any] | None:
    """Refuse a folder that holds anything but a report of this model, unless ``overwrite``.

    Returns the folder's report manifest when it holds a report of this model (to resume).
    Writes nothing.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output {out} exists and is not a folder", path=str(out))
    if not out.is_dir() or not any(out.iterdir()):
        return None
    manifest = read_manifest(out)
    if manifest is not None and manifest["report"].get("identity") == identity:
        return manifest
    if overwrite:
        return None
    if manifest is not None:
        other = manifest["report"].get("identity") or {}
        raise OutputExistsError(
            f"output folder {out} holds the report of another model ({other.get('path')}); pass --overwrite to replace it", path=str(out)
        )
    raise OutputExistsError(
        f"output folder {out} is not empty and holds no headlens report; pass --overwrite to write the report into it", path=str(out)
    )


def remove_old_report(out: Path) -> None:
    """With ``overwrite``: remove what an earlier report wrote (its stage folders and pages)."""
    for name in STAGES:
        d = out / name
        if d.is_dir() and (d / MARKER).is_file():
            shutil.rmtree(d)
    for name in ("report.html", "report.md", "manifest.json"):
        (out / name).unlink(missing_ok=True)


def write_report_manifest(
    out: Path,
    loaded: Any,
    identity: dict[str, Any],
    settings: Any,
    command: list[str],
    stages: dict[str, StageStatus],
    *,
    previous: dict[str, Any] | None,
) -> dict[str, Any]:

    report_info = {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "identity": identity,
        "quick": settings.quick,
        "eval_text": settings.eval_text_record(loaded, previous),
        "stages": {
            name: {
                "status": s.status,
                "seconds": s.seconds,
                "error": s.error,
                "files": [f"{name}/{f}" for f in s.files],
                "smoke_test": settings.smoke_test(name) and s.ok,
            }
            for name, s in stages.items()
        },
        # --quick: the sections these stages feed are smoke tests and state no finding
        "smoke_test": {"stages": [name for name, s in stages.items() if settings.smoke_test(name) and s.ok], "why": SMOKE_WHY}
        if settings.quick
        else None,
        "files": ["report.html", "report.md", "manifest.json"],
    }
    manifest = build_manifest(
        model=loaded,
        command=command,
        seed=settings.seed,
        prepend_bos=settings.prepend_bos,
        configs={"report": settings.to_json()},
        extra={"report": report_info},
    )
    if loaded is None and previous is not None:
        for k in ("model", "dtype", "device"):
            if k in previous:
                manifest[k] = previous[k]
    write_json(out / "manifest.json", manifest)
    return manifest
