"""The settings of the IOI class analysis (``headlens.ioi`` / ``headlens ioi``), defined once.

Light (``--help`` reads it): the analysis is :mod:`headlens.analyses.patching.ioi`.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlens.probes.counts import check_count
from headlens.probes.settings import check_seed, seed_setting, setting

__all__ = ["IOIConfig"]


@dataclass(frozen=True, kw_only=True)
class IOIConfig:
    n_pairs: int = setting(32, help="IOI pairs (the built-in ioi task: Wang et al.'s templates, ABBA and BABA, the ABC corruption).")
    seed: int = seed_setting(0, help="Seed of the pairs and of the bootstrap.")
    n_resamples: int = setting(1000, help="Bootstrap resamples of the pairs for each interval.", minimum=1)
    batch_size: int = setting(8, help="Pairs per forward.", minimum=1)
    screen_senders: bool = setting(
        True,
        help="Path-patch every earlier head, not only those whose attention fits the class (END -> S2 for S-inhibition, "
        "S2 -> S1 or S1+1 for induction and duplicate-token heads); slow on a large model.",
        flag="--no-screen-senders",
    )
    prepend_bos: bool = setting(True, help="Do not prepend BOS.", flag="--no-bos")

    def __post_init__(self) -> None:
        check_seed(self.seed)
        check_count("n_pairs", self.n_pairs, minimum=2, why="an interval over pairs needs two")
        check_count("n_resamples", self.n_resamples, minimum=1)
