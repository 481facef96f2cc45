"""The settings of activation patching, path patching and the pairs they read, defined once.

:class:`PatchConfig` (activation patching per head), :class:`PathConfig` (path patching into
receiver heads) and :class:`PairSource` (which clean/corrupted pairs: a task file or a built-in
task; ``headlens patch`` and ``headlens circuit`` read pairs alike) carry each setting's type,
default, help text and range (:func:`headlens.probes.settings.setting`); :class:`PatchExtras` says which
estimates ``headlens.patch`` runs beside exact patching: the study signatures of
:mod:`headlens.reports.api` repeat them and the click options are generated from them.  Light
(``--help`` reads it); :mod:`~headlens.analyses.patching.activation` and
:mod:`~headlens.analyses.patching.path` re-export these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.settings import check_seed, seed_setting, setting

__all__ = ["DIRECTIONS", "RECEIVER_INPUTS", "BUILTINS", "PatchConfig", "PathConfig", "PairSource", "PatchExtras"]

#: Patching directions: clean into the corrupted run, corrupted into the clean run.
DIRECTIONS: tuple[str, ...] = ("denoising", "noising")
#: The inputs of a receiver head that path patching replaces.
RECEIVER_INPUTS: tuple[str, ...] = ("q", "k", "v")
#: The built-in pair tasks.
BUILTINS: tuple[str, ...] = ("induction", "names", "ioi", "referent")


@dataclass(frozen=True, kw_only=True)
class PatchConfig:
    directions: tuple[str, ...] = setting(
        DIRECTIONS,
        help="denoising: clean head output into the corrupted run; noising: corrupted into the clean run.",
        choices=DIRECTIONS,
    )
    per_position: bool = setting(False, help="Patch each position of each head alone (a row per head and position).")
    heads: tuple[tuple[int, int], ...] | None = setting(None, help="Only these heads (LAYER.HEAD,...); default every head.")
    batch_size: int = setting(8, help="Pairs per forward (each holds one copy per patched head).", minimum=1)
    max_rows: int = setting(256, help="Rows (copies x pairs) per forward.", minimum=1, cli=False)
    n_resamples: int = setting(1000, help="Bootstrap resamples of the pairs for each interval (0: no intervals).", minimum=0)
    seed: int = seed_setting(0, help="Seed of the built-in task and of the bootstrap.")
    start_late: bool = setting(
        True, help="Start each layer's forwards at that block when the model allows (the same numbers, faster).", cli=False
    )

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.heads is not None:
            object.__setattr__(self, "heads", as_heads(self.heads, name="heads"))
        bad = [d for d in self.directions if d not in DIRECTIONS]
        if bad or not self.directions:
            raise InputError(f"unknown patching direction {bad[0] if bad else '(none)'!r}: choose from {', '.join(DIRECTIONS)}")
        if self.batch_size < 1 or self.max_rows < 1:
            raise InputError("batch_size and max_rows must be at least 1")
        check_count("n_resamples", self.n_resamples, minimum=0)


@dataclass(frozen=True, kw_only=True)
class PathConfig:
    receivers: tuple[tuple[int, int], ...] = setting(
        help="Receiver heads of path patching, LAYER.HEAD,... (implies --path): every earlier head -> each receiver's "
        "--receiver-input, other heads frozen at their corrupted value."
    )
    receiver_input: str = setting("k", help="Path patching: which input of the receivers is patched.", choices=RECEIVER_INPUTS)
    #: Patch each sender into every receiver's input at once (one row per sender, ``receiver``
    #: lists them joined by ``+``): what a sender feeds a set of heads that share one job.
    joint: bool = setting(
        False,
        help="Patch each sender into every receiver's input at once (one row per sender): what a sender feeds a set of heads "
        "that share one job.",
        cli=False,
    )
    batch_size: int = setting(8, help="Pairs per forward.", minimum=1)
    n_resamples: int = setting(1000, help="Bootstrap resamples of the pairs for each interval (0: no intervals).", minimum=0)
    seed: int = seed_setting(0, help="Seed of the bootstrap.")

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.receiver_input not in RECEIVER_INPUTS:
            raise InputError(f"unknown receiver input {self.receiver_input!r}: choose from {', '.join(RECEIVER_INPUTS)}")
        object.__setattr__(self, "receivers", as_heads(self.receivers, name="receivers"))
        if not self.receivers:
            raise InputError("path patching needs at least one receiver head")
        check_count("n_resamples", self.n_resamples, minimum=0)


@dataclass(frozen=True, kw_only=True)
class PairSource:
    """Which clean/corrupted pairs a patching or circuit run reads: ``task`` (a JSONL file of pairs)
    or ``builtin`` (default ``"induction"``) with ``n_pairs`` pairs; ``prepend_bos``: the model's
    framing tokens or none.  Checked by the study that reads the pairs (its manifest records them)."""

    task: str | None = setting(
        None,
        help='JSONL pairs: {"clean": ..., "corrupt": ..., "correct": " Mary", "incorrect": " John"} per line; clean and corrupt '
        "of the same token length, single-token answers.",
        path="file",
    )
    builtin: str | None = setting(
        None,
        help="A built-in task instead of --task (default: induction): repeated random tokens, a short IOI-style name task, "
        "IOI after Wang et al. 2022 (15 templates, ABBA and BABA, the ABC corruption), or the referent pairs.",
        choices=BUILTINS,
    )
    n_pairs: int = setting(
        64,
        help="Pairs of a built-in task: at least 2 (the rule a --task file's pairs meet too), at most 1,000,000. Built-in rows are "
        "padded with the tokenizer's pad id (0 when it has none, as GPT-2's), after each row's last real token, where effects are "
        "read; padding is masked out of attention.",
    )
    prepend_bos: bool = setting(True, help="Do not prepend BOS (for an encoder, no [CLS]/[SEP] either).", flag="--no-bos")


@dataclass(frozen=True, kw_only=True)
class PatchExtras:
    """What :func:`headlens.reports.api.patch.patch` runs beside exact activation patching (its
    manifest records each one's own settings and results)."""

    path: bool = setting(
        False,
        help="Also path patching: every earlier head -> each --receivers head's --receiver-input, other heads frozen at their "
        "corrupted value (needs --receivers, which alone imply it).",
    )
    attribution: bool = setting(
        False,
        help="Also attribution patching (one forward and one backward; a first-order ESTIMATE of denoising), with its agreement "
        "with exact patching.",
    )
    dla: bool = setting(False, help="Also direct logit attribution per head on the clean inputs (decoders).")
