"""What came from the checkpoint: transformers' loading report sorted into body and head.

:func:`weight_check` reads the ``LoadStateDictInfo`` transformers builds while loading
(missing, unexpected and mismatched tensors); :func:`report_weights` raises or logs what it
found (see :mod:`headlens.probes.loading`); :func:`mismatch_message` is the one line for
tensors of another shape than config.json implies.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from headlens.probes.config import ModelConfig
from headlens.probes.errors import ModelLoadError

__all__ = ["WeightCheck", "weight_check", "report_weights", "mismatch_message"]

# Messages are logged under the loading module's logger, where loading messages have always been.
log = logging.getLogger("headlens.probes.loading")

#: Names listed in a one-line message before "...".
_SHOW = 4


@dataclass(frozen=True)
class WeightCheck:
    checked: bool
    new: list[str]
    unexpected: list[str]
    body_new: list[str]
    head_new: list[str]


def weight_check(found: tuple[Any, str | None] | None) -> WeightCheck:
    """Sort transformers' loading report into body and head; ``found`` is ``(info, prefix)``."""
    if found is None:
        return WeightCheck(False, [], [], [], [])
    info, prefix = found
    new = sorted(set(info.missing_keys) | {k[0] for k in getattr(info, "mismatched_keys", ())})
    unexpected = sorted(info.unexpected_keys)
    if prefix is None:  # a bare base model: it is all body
        body, head = new, []
    else:  # the body is the base model (model.<base_model_prefix>), the head everything else
        body = [k for k in new if k.startswith(prefix + ".")]
        head = [k for k in new if not k.startswith(prefix + ".")]
    return WeightCheck(True, new, unexpected, body, head)


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOW])
    return shown + (f", ... ({len(keys) - _SHOW} more)" if len(keys) > _SHOW else "")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def report_weights(check: WeightCheck, config: ModelConfig, architecture: str) -> None:
    """Raise or log what :func:`weight_check` found."""
    spec = config.model
    if not check.checked:
        log.warning(
            "%s: could not check which weights came from the checkpoint (this transformers version no longer exposes its loading report); "
            "weights missing from the checkpoint would be randomly initialised without notice",
            spec,
        )
        return
    if check.body_new:
        what = f"{_count(len(check.body_new), 'weight')} of the network body {_are(len(check.body_new))} not in the checkpoint"
        if not config.allow_new_weights:
            raise ModelLoadError(
                f"model={spec!r}: {what} and would be randomly initialised ({_names(check.body_new)}); a partial save, or weights"
                f" of another architecture than config.json names ({architecture})? Pass allow_new_weights=True to load it anyway",
                model=spec,
                new_weights=check.body_new,
            )
        log.warning(
            "%s: %s and %s randomly initialised, as allow_new_weights=True (--allow-new-weights) allows (%s); every result depends on them",
            spec,
            what,
            _were(len(check.body_new)),
            _names(check.body_new),
        )
    if check.head_new:
        log.warning(
            "%s: %s of the output head %s not in the checkpoint and %s randomly initialised (%s): its logits, and any loss or logit "
            "difference, are meaningless; attention is not affected",
            spec,
            _count(len(check.head_new), "tensor"),
            _are(len(check.head_new)),
            _were(len(check.head_new)),
            _names(check.head_new),
        )
    if check.unexpected:
        log.info(
            "%s: %s in the checkpoint %s not used by %s (%s)",
            spec,
            _count(len(check.unexpected), "tensor"),
            _are(len(check.unexpected)),
            architecture,
            _names(check.unexpected),
        )


def mismatch_message(spec: str, info: Any) -> str | None:
    mismatched: list[Any] = sorted(getattr(info, "mismatched_keys", ()) or ())
    if not mismatched:
        return None
    shown = ", ".join(f"{k} ({tuple(a)} in the checkpoint, {tuple(b)} in the model)" for k, a, b in mismatched[:_SHOW])
    more = f", ... ({len(mismatched) - _SHOW} more)" if len(mismatched) > _SHOW else ""
    has = "has" if len(mismatched) == 1 else "have"
    return (
        f"model={spec!r}: {_count(len(mismatched), 'tensor')} in the checkpoint {has} another shape than config.json implies: {shown}{more}"
    )
