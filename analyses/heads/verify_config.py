"""What ``verify`` checks on (:class:`VerifyConfig`) and the prompts check it shares with ``capture``.

Light (no torch): ``headlens verify --help`` reads the settings of this dataclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headlens.probes.errors import InputError
from headlens.probes.settings import setting

__all__ = ["VerifyConfig", "DEFAULT_VERIFY_PROMPTS", "DEFAULT_VERIFY_TEXT", "check_prompts"]

DEFAULT_VERIFY_TEXT = (
    "Apple raised its price target. Down by the river bank, the water was calm, "
    "and by the time you reach the bank the river has settled what you meant."
)

#: verify's default prompts: two lengths, so the padding mask of a batch is checked too.
DEFAULT_VERIFY_PROMPTS = (DEFAULT_VERIFY_TEXT, "Apple raised its price target.")


@dataclass(frozen=True, kw_only=True)
class VerifyConfig:
    """What :func:`headlens.verify` checks on."""

    prompts: tuple[str, ...] = setting(
        DEFAULT_VERIFY_PROMPTS,
        help="Texts to check on (default: two built-in prompts of different lengths, so padding is checked too).",
        split=False,
        cli=False,  # the command's --text / --prompts FILE
    )
    prepend_bos: bool = setting(True, help="Do not prepend BOS (encoders: no [CLS]/[SEP]).", flag="--no-bos")
    tolerance: float | None = setting(
        None,
        help="Largest absolute error accepted (default 1e-4 in float32, 3e-2 bfloat16, 5e-3 float16).",
        minimum=0,
        min_open=True,
    )
    batch_size: int = setting(8, help="Prompts per forward pass.", minimum=1, cli=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", check_prompts(self.prompts))
        if self.tolerance is not None and not self.tolerance > 0:
            raise InputError(f"tolerance={self.tolerance}: must be above 0", tolerance=self.tolerance)


def check_prompts(prompts: str | Sequence[str]) -> tuple[str, ...]:
    """``prompts`` as a tuple of texts (one text is one prompt); empty ones refused, naming ``prompts``."""
    texts = (prompts,) if isinstance(prompts, str) else tuple(prompts)
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise InputError("prompts is empty: give at least one non-empty text", prompts=texts)
    return texts
