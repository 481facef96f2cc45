"""The census's settings (:class:`CensusConfig`) and the classification's (:class:`ClassifyConfig`).

Light (no torch): ``headlens detect --help``, ``classify --help`` and ``sweep --help`` read their
options from these fields (:mod:`headlens.probes.settings`).  :mod:`headlens.analyses.heads.census`
re-exports :class:`CensusConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from headlens.probes.settings import check_seed, seed_setting, setting, setting_of

__all__ = ["CensusConfig", "ClassifyConfig", "ATTENTION_HELP", "DEFAULT_BASELINE_FACTOR"]

#: A role needs ``ci_low >= DEFAULT_BASELINE_FACTOR x`` the uniform baseline.
DEFAULT_BASELINE_FACTOR = 2.0


@dataclass(frozen=True, kw_only=True)
class CensusConfig:
    """Settings of a census run; all of them go into the manifest.

    ``n_prompts`` is per stimulus set; natural-text windows and the referent sentences
    are capped at what the text and the sentence set hold (the table's ``n`` says how
    many were used), and the referent sentences are at least as many as a head needs to be
    able to pass the referent sign test (:func:`~headlens.analyses.heads.detectors.referent.min_referent_prompts`:
    16 on 8 heads, 24 on GPT-2's 144).  ``ablate`` lists heads zeroed on ``hook_z`` during the census (to
    census a pruned model).  ``attention``: ``eager`` reads ``hook_pattern``; ``streaming`` recomputes
    the pattern from q and k in blocks of ``query_block`` queries inside the model's SDPA forward
    (:mod:`headlens.analyses.heads.passes`); ``auto`` streams when one layer's eager patterns would
    exceed :data:`headlens.probes.streaming.DEFAULT_MEMORY_BUDGET`.  The ranges of ``n_prompts``,
    ``seq_len`` and ``window`` are checked by :func:`headlens.analyses.heads.census.check_census_settings`.
    """

    detectors: tuple[str, ...] | None = setting(None, help="Comma-separated detector names (default: all).")
    n_prompts: int = setting(100, help="Prompts per stimulus set.")
    seq_len: int = setting(50, help="T: random tokens per sequence, repeated twice (duplicate, induction).")
    window: int = setting(64, help="Tokens per natural-text window (previous-token, sink).")
    prepend_bos: bool = setting(
        True,
        help="Do not prepend BOS (Hugging Face / paper convention); on encoders, no [CLS] ... [SEP] around the text.",
        flag="--no-bos",
    )
    seed: int = seed_setting(0, help="Seed of the random-token sequences, the referent sentences and the bootstrap.")
    batch_size: int = setting(16, help="Prompts per forward pass.", minimum=1)
    n_bootstrap: int = setting(1000, help="Bootstrap resamples for each score's interval.", cli=False)
    referent_file: str | None = setting(None, help="JSONL: text plus character spans of pronoun, antecedent and distractor.", path="file")
    ablate: tuple[tuple[int, int], ...] = setting((), help="Heads zeroed on hook_z during the census (a pruned model).", cli=False)
    attention: str = setting(
        "auto",
        help="eager: read the attention patterns (batch x heads x n x n per layer); streaming: recompute them from q and k in blocks"
        " of --query-block queries inside the model's SDPA forward (memory linear in n); auto: streaming when one layer's"
        " eager patterns would exceed 2 GiB.",
        choices=("auto", "eager", "streaming"),
    )
    query_block: int = setting(256, help="Queries per block on the streaming path.", minimum=1)

    def __post_init__(self) -> None:
        check_seed(self.seed)


@dataclass(frozen=True, kw_only=True)
class ClassifyConfig:
    """How scores become roles (:func:`headlens.analyses.heads.classify.classify_heads`; checked by
    :func:`~headlens.analyses.heads.classify.check_thresholds` and
    :func:`~headlens.analyses.heads.classify.check_baseline_factor`)."""

    thresholds: Mapping[str, float] | None = setting(
        None, help="Detector thresholds overriding the defaults, e.g. {'induction': 0.4}.", flag="--threshold"
    )
    baseline_factor: float = setting(DEFAULT_BASELINE_FACTOR, help="A role needs ci_low >= this x the uniform baseline (at least 1).")


#: ``--attention``'s help (the field's).
ATTENTION_HELP = setting_of(CensusConfig, "attention").help
