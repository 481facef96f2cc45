"""The census flags shared by ``detect``, ``classify`` and ``sweep``, and the config they make."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from headlens.reports.cli.common import parse_csv

if TYPE_CHECKING:
    from headlens.analyses.heads.census import CensusConfig

__all__ = ["census_options", "attention_options", "census_config", "ATTENTION_HELP"]


def census_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option(
            "--referent-file",
            default=None,
            type=click.Path(dir_okay=False),
            help="JSONL: text plus character spans of pronoun, antecedent and distractor.",
        ),
        click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1)),
        click.option(
            "--no-bos",
            is_flag=True,
            help="Do not prepend BOS (Hugging Face / paper convention); on encoders, no [CLS] ... [SEP] around the text.",
        ),
        click.option("--window", default=64, show_default=True, type=int, help="Tokens per natural-text window (previous-token, sink)."),
        click.option(
            "--seq-len",
            default=50,
            show_default=True,
            type=int,
            help="T: random tokens per sequence, repeated twice (duplicate, induction).",
        ),
        click.option("--seed", default=0, show_default=True, type=int),
        click.option("--n-prompts", default=100, show_default=True, type=int, help="Prompts per stimulus set."),
        click.option("--detectors", default=None, help="Comma-separated detector names (default: all)."),
    ]
    for opt in opts:
        fn = opt(fn)
    return fn


ATTENTION_HELP = (
    "eager: read the attention patterns (batch x heads x n x n per layer); streaming: recompute them from q and k in blocks"
    " of --query-block queries inside the model's SDPA forward (memory linear in n); auto: streaming when one layer's"
    " eager patterns would exceed 2 GiB."
)


def attention_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--attention auto|eager|streaming`` and ``--query-block``."""
    fn = click.option(
        "--query-block", default=256, show_default=True, type=click.IntRange(min=1), help="Queries per block on the streaming path."
    )(fn)
    return click.option(
        "--attention", type=click.Choice(["auto", "eager", "streaming"]), default="auto", show_default=True, help=ATTENTION_HELP
    )(fn)


def census_config(
    detectors: str | None,
    n_prompts: int,
    seed: int,
    seq_len: int,
    window: int,
    no_bos: bool,
    batch_size: int,
    referent_file: str | None,
    ablate: Any = (),
    attention: str = "auto",
    query_block: int = 256,
) -> CensusConfig:
    """The :class:`CensusConfig` of the census flags."""
    from headlens.analyses.heads.census import CensusConfig

    return CensusConfig(
        attention=attention,
        query_block=query_block,
        detectors=tuple(parse_csv(detectors) or ()) if detectors else None,
        n_prompts=n_prompts,
        seq_len=seq_len,
        window=window,
        prepend_bos=not no_bos,
        seed=seed,
        batch_size=batch_size,
        referent_file=referent_file,
        ablate=tuple(ablate),
    )
