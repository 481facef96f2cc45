"""The demo recipe's settings (:class:`RecipeConfig`, :data:`RECIPE`) and what a training run returns.

Shared by :mod:`headlens.analyses.demo.train` (runs the recipe) and
:mod:`headlens.analyses.demo.checkpoints` (writes and reads it back from a summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headlens.analyses.demo.data import Corpus

__all__ = ["RecipeConfig", "RECIPE", "TrainRun"]


@dataclass(frozen=True, kw_only=True)
class RecipeConfig:
    """Every setting of the recipe; all of them are written to ``training_summary.json``."""

    # architecture (GPT-2, tied embeddings, no dropout)
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    n_ctx: int = 256
    pos_init: str = "normal"  # "normal" or "sinusoidal" (Vaswani et al., scaled to wpe_std)
    init_std: float = 0.02  # GPT2Config.initializer_range: initial std of the other weights (GPT-2: 0.02)
    wte_std: float = 0.02  # initial std of the token embedding (GPT-2: 0.02)
    wpe_std: float = 0.02  # initial std of the position embedding (GPT-2: 0.02)
    # data: one batch = one row of each kind listed, each ``seq_len`` tokens
    seq_len: int = 256
    random_span: tuple[int, int] = (10, 100)  # period T of the random repeated sequences, log-uniform
    vocab_schedule: tuple[int, int] | None = (1000, 3000)  # (ids in the random pool at step 0, step from which all ids are used)
    random_len: int = 256  # length of the random rows (BOS-padded to seq_len, padding not scored)
    # after the warm-up, score the first copy of the random rows too: it cannot be predicted, so
    # heads learn to stay quiet (attend to BOS, the sink) where nothing earlier matches
    score_first_copy: bool = True
    # the first ``warm_steps`` steps use ``warm_kinds`` (random repeated tokens only: copying
    # and induction form much faster without text, whose frequent tokens crowd out the rare ones)
    warm_steps: int = 600
    warm_kinds: tuple[str, ...] = ("random",) * 16
    kinds: tuple[str, ...] = ("random",) * 8 + ("natural",) * 6 + ("span",) * 2
    # optimisation
    schedule_steps: int = 4000
    lr: float = 1e-3
    min_lr_frac: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.01
    embed_lr_scale: float = 1.0  # learning rate of wte and wpe, as a fraction of ``lr``
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    # text rows: sampled softmax over the batch's text targets plus this many uniform negatives;
    # synthetic (random) rows: a softmax over the synthetic rows' own targets, so that copying is
    # not fought by the text's unigram prior
    neg_samples: int = 2048
    # evaluation
    eval_every: int = 250
    eval_windows: int = 32
    # reproducibility
    seed: int = 0
    threads: int = 1

    @property
    def batch_size(self) -> int:
        return len(self.kinds)


#: The recipe that produced the shipped checkpoint (``analyses/demo/model``).
RECIPE = RecipeConfig()


@dataclass
class TrainRun:
    model: Any
    log: list[dict[str, Any]]
    summary: dict[str, Any]
    corpus: Corpus = field(repr=False)
