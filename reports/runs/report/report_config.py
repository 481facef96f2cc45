"""The report's settings as fields (:class:`ReportConfig`): light (no torch), so ``headlens report
--help`` reads its options from them.  :class:`~headlens.reports.runs.report.settings.ReportSettings`
is this dataclass with each stage's configuration derived from it."""

from __future__ import annotations

from dataclasses import dataclass

from headlens.probes.settings import check_seed, seed_setting, setting

__all__ = ["ReportConfig", "DEFAULT_EXAMPLE_PROMPTS", "MAX_EXAMPLE_PROMPTS"]

#: Shown when no ``--example-prompt`` is given: natural text, a repeated phrase (induction,
#: duplicate-token) and a pronoun with two candidate antecedents (referent).
DEFAULT_EXAMPLE_PROMPTS: tuple[str, ...] = (
    "Apple raised its price target on the shares after the strong quarter.",
    "The old keeper fed his grey cat at dawn. The old keeper fed his grey cat at dawn.",
    "Mary thanked John because she had finished the report early.",
)
MAX_EXAMPLE_PROMPTS = 8


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """What the stages run with.  ``quick`` shrinks every stage to a smoke run (tests, CI)."""

    quick: bool = setting(
        False,
        help="Smoke-test settings (few windows and prompts, the sink census only; the head census keeps classify's defaults, "
        "so the roles are classify's): seconds on a small model.",
    )
    prepend_bos: bool = setting(True, help="Do not prepend BOS (Hugging Face / paper convention).", flag="--no-bos")
    seed: int = seed_setting(0, help="Seed of every stage (recorded in the manifest).")
    batch_size: int = setting(8, help="Sequences per forward pass.", minimum=1)
    example_prompts: tuple[str, ...] = setting(
        DEFAULT_EXAMPLE_PROMPTS,
        help=f"Prompts whose attention the page shows head by head (at most {MAX_EXAMPLE_PROMPTS}; default: three built-in prompts).",
        split=False,
    )
    skip: tuple[str, ...] = setting(
        (), help="Stages not to run, comma-separated: census, sinks, ablation_zero, ablation_mean, pruning, examples, design."
    )
    #: Evaluation text of ablation and pruning (``--text-file``); default the built-in English text.
    text_file: str | None = setting(
        None,
        help="Evaluation text of ablation, pruning and design (default: the model's own held-out text when it carries one, as the demo "
        "model does, else the text that ships with headlens, analyses/data/eval_text.txt), as for `headlens ablate`.",
        path="file",
    )

    def __post_init__(self) -> None:
        check_seed(self.seed)
