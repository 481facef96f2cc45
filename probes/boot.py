"""Booting a TransformerBridge, with the libraries' output and loading report kept.

While a model boots, the log records of transformers, transformer_lens and huggingface_hub
go through headlens loggers (``headlens.probes.loading.<library logger>``, one line each),
and transformers' ``LoadStateDictInfo`` (which tensors were missing, unexpected or of
another shape) is kept for :mod:`headlens.probes.loading` to judge.  Everything is put back
afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from typing import Any

import torch

from headlens.probes.placement import Placement

__all__ = ["boot", "LoadReports"]

log = logging.getLogger(__name__)

#: Library records are re-logged under this logger's children (the loading module's, so
#: ``headlens -vv`` and ``caplog`` see them where loading messages are).
_FORWARD_TO = "headlens.probes.loading"

#: Library loggers whose records go through ``headlens.probes.loading.<logger name>`` while a model boots.
_LIBRARY_LOGGERS = ("transformers", "transformer_lens", "huggingface_hub", "accelerate")

#: Library messages that headlens says better itself, or that are harmless: demoted to
#: DEBUG (``headlens -vv`` shows them), never dropped.
_DEMOTED = (
    # transformers' multi-line LOAD REPORT table: the same facts headlens turns into the
    # one-line error or warning below (and the manifest).
    "LOAD REPORT",
    # transformers, when both ends of a tied pair are absent (all-MiniLM-L6-v2's MLM bias):
    # "This checkpoint seem corrupted ..."; the new-weights report names those tensors.
    "The tied weights mapping for this model specifies to tie",
    # TransformerBridge sets output_attentions=True on the config, which the generation
    # config then calls an invalid generation flag: harmless for everything headlens does.
    "generation flags are not valid",
    # accelerate's offload (--device-map with cpu/disk): the placement is in the manifest.
    "Some parameters are on the meta device because they were offloaded",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Forward(logging.Handler):
    """Re-log a library record under ``headlens.probes.loading.<its logger>``, on one line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _ANSI.sub("", record.getMessage()).strip()
        except Exception:  # noqa: BLE001 - a malformed library record must not break a load
            self.handleError(record)
            return
        # Library INFO is detail for headlens (config dumps, file names): DEBUG.
        level = logging.DEBUG if record.levelno < logging.WARNING or any(p in text for p in _DEMOTED) else record.levelno
        target = logging.getLogger(f"{_FORWARD_TO}.{record.name}")
        if target.isEnabledFor(level):
            target.log(level, "%s", " ".join(text.split()) if level > logging.DEBUG else text)


class LoadReports:
    """transformers' ``LoadStateDictInfo`` of each ``from_pretrained`` during the boot.

    transformers 5 builds it for every load and hands it, with the model, to
    ``transformers.modeling_utils.log_state_dict_report``; while a model boots that name
    is wrapped to keep a reference (and the original still runs).
    """

    def __init__(self) -> None:
        #: ``(model, loading info, base-model prefix or None)``; the prefix is None when the
        #: model is a bare base model (no head), read before the bridge rewires the model.
        self.reports: list[tuple[Any, Any, str | None]] = []
        self.hooked = False

    def keep(self, model: Any, info: Any) -> None:
        prefix = getattr(model, "base_model_prefix", "") or ""
        base = getattr(model, prefix, None) if prefix else None
        self.reports.append((model, info, prefix if base is not None and base is not model else None))

    def for_model(self, model: Any) -> tuple[Any, str | None] | None:
        for m, info, prefix in self.reports:
            if m is model:
                return info, prefix
        return self.reports[-1][1:] if self.reports else None


_BOOT_LOCK = threading.Lock()


@contextlib.contextmanager
def _booting():
    """While a model boots: library log records go through headlens loggers, the
    weights-loading progress bar is off, and transformers' loading report is kept.
    Everything is put back afterwards, library logger levels included (importing
    transformer_lens sets the ``transformers`` logger to ERROR for good; that is undone).

    Dropped: transformers' "Loading weights" progress bar (harmless chatter).  Kept:
    huggingface_hub's download progress bars (a download can take minutes).
    """
    # Importing transformers configures its own logger (handler, level); do it before the snapshot.
    import transformers.modeling_utils as modeling_utils
    import transformers.utils.logging as tf_logging

    with _BOOT_LOCK:
        reports = LoadReports()
        forward = _Forward()
        saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in map(logging.getLogger, _LIBRARY_LOGGERS)]
        import transformer_lens.model_bridge  # noqa: F401 - its first import sets transformers' level, restored below

        # Warnings always; everything when headlens' own debug output is on (headlens -vv);
        # more if the caller had set a library logger lower than that.
        wanted = logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.WARNING
        for logger, level, handlers, _ in saved:
            for h in handlers:
                logger.removeHandler(h)
            logger.addHandler(forward)
            logger.propagate = False
            logger.setLevel(min(level or logging.WARNING, wanted))
        tqdm_was = getattr(tf_logging, "_tqdm_active", None)
        original = getattr(modeling_utils, "log_state_dict_report", None)

        def keep_report(*args: Any, **kwargs: Any) -> Any:
            model = kwargs.get("model", args[0] if args else None)
            info = kwargs.get("loading_info", args[3] if len(args) > 3 else None)
            if info is not None:
                reports.keep(model, info)
            return original(*args, **kwargs)  # type: ignore[misc]

        try:
            if tqdm_was is not None:
                tf_logging._tqdm_active = False
            if callable(original):
                setattr(modeling_utils, "log_state_dict_report", keep_report)  # noqa: B010 - not in its __all__
                reports.hooked = True
            yield reports
        finally:
            if callable(original):
                setattr(modeling_utils, "log_state_dict_report", original)  # noqa: B010 - not in its __all__
            if tqdm_was is not None:
                tf_logging._tqdm_active = tqdm_was
            for logger, level, handlers, propagate in saved:
                logger.removeHandler(forward)
                for h in handlers:
                    logger.addHandler(h)
                logger.propagate = propagate
                logger.setLevel(level)


def boot(
    name: str, device: torch.device, dtype: torch.dtype, revision: str | None, placement: Placement | None = None
) -> tuple[Any, LoadReports]:
    """Boot ``name`` on ``device``, or dispatched by accelerate as ``placement`` says (then ``device`` is unused)."""
    with _booting() as reports:
        from transformer_lens.model_bridge import TransformerBridge  # imported by _booting

        kwargs: dict[str, Any] = {"dtype": dtype, **(placement.boot_kwargs() if placement is not None else {"device": str(device)})}
        if revision is not None:
            kwargs["revision"] = revision
        try:
            return TransformerBridge.boot_transformers(name, **kwargs), reports
        except Exception as exc:
            with contextlib.suppress(AttributeError, TypeError):
                exc.headlens_load_reports = reports  # type: ignore[attr-defined]
            raise
