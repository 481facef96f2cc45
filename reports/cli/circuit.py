"""``headlens circuit``: which edges between heads, MLPs, embeddings and logits carry a task.

The pair options (``--task``, ``--builtin``, ``--n-pairs``, ``--no-bos``) are generated from
:class:`~headlens.analyses.patching.config.PairSource`'s fields, as ``headlens patch``'s are, so the
two commands read pairs alike; the others from :class:`~headlens.analyses.circuits.config.CircuitConfig`'s.
Module level is light (click, the CLI's light modules and the light config modules); the study is
imported when the command runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from headlens.analyses.circuits.config import MAX_PAIRS, METHODS, CircuitConfig
from headlens.analyses.patching.config import PairSource
from headlens.probes.outputs import check_out_dir
from headlens.probes.settings import settings_of
from headlens.reports.cli.common import command_line, echo_findings, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

__all__ = ["circuit_cmd", "METHODS", "MAX_PAIRS"]

#: ``--n-pairs``' help: :class:`PairSource`'s, with the circuit's own cap.
N_PAIRS_HELP = (
    f"Pairs of a built-in task: at least 2 (the rule a --task file's pairs meet too), at most {MAX_PAIRS:,}"
    " (a circuit run keeps pairs x edges values and bootstraps them)."
)


@click.command("circuit")
@model_options
@config_options(PairSource, ("task", "builtin", "n_pairs", "prepend_bos"), overrides={"n_pairs": {"help": N_PAIRS_HELP}})
@config_options(
    CircuitConfig,
    (
        "batch_size",
        "seed",
        "method",
        "steps",
        "top_n",
        "threshold",
        "target_faithfulness",
        "held_out",
        "confirm",
        "confirm_sample",
        "direction",
        "ablation",
        "ground_truth",
        "n_bootstrap",
        "address",
        "workers",
        "journal",
    ),
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def circuit_cmd(model, device, dtype, revision, allow_new_weights, out_dir, overwrite, quiet, **settings):
    """Which edges carry a task: score every edge (embeddings, heads' q/k/v inputs, MLPs, logits),
    take the circuit, measure its faithfulness and confirm its top edges by exact patching.

    Scores are shares of the clean-corrupt gap with 95% bootstrap intervals over pairs and a
    stability (how often the edge is selected, with its sign, over resamples).  Writes edges.csv,
    faithfulness.csv, circuit.png/svg and manifest.json to --out.
    """
    from headlens.reports.api.circuit import circuit

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = config_from(CircuitConfig, settings)
    pairs = {info.name: settings[info.name] for info in settings_of(PairSource)}
    load = {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
    with progress_bars("circuit", quiet=quiet) as progress:
        result = circuit(model, config, progress=progress, command=command_line(), **pairs, **load)
    result.save(out, overwrite=overwrite)
    echo_findings(result)
    click.echo(f"wrote edges.csv, faithfulness.csv, circuit.png/svg and manifest.json to {Path(out)}")


COMMANDS = [circuit_cmd]
