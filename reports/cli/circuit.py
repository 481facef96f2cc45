"""``headlens circuit``: which edges between heads, MLPs, embeddings and logits carry a task.

The task options (``--task``, ``--builtin``, ``--n-pairs``, ``--no-bos``, ``--batch-size``,
``--seed``) are ``headlens patch``'s own option objects, so the two commands read pairs alike.
Module level is light (click and the CLI's light modules); the study is imported when the command runs.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import click

from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import command_line, echo_findings, model_options
from headlens.reports.cli.patch import patch_cmd
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

__all__ = ["circuit_cmd", "METHODS", "TASK_OPTIONS", "with_task_options"]

#: ``--method``: :data:`headlens.analyses.circuits.config.METHODS`, written out so that ``--help`` imports no analysis.
METHODS = ("eap", "eap-ig", "exact")
#: ``headlens patch``'s options that say which pairs a run reads, by parameter name.
TASK_OPTIONS = ("task_file", "builtin", "n_pairs", "no_bos", "batch_size", "seed")
#: ``--n-pairs``' cap, :data:`headlens.reports.api.circuit.MAX_PAIRS` (written out so that ``--help`` imports no study; a test checks).
MAX_PAIRS = 4096
_MODEL_OPTIONS = ("model", "device", "dtype", "revision", "allow_new_weights", "device_map", "max_memory")


def with_task_options(command: click.Command) -> click.Command:
    """``command`` with ``headlens patch``'s task options (:data:`TASK_OPTIONS`) after its model options."""
    theirs = {p.name: p for p in patch_cmd.params}
    n_pairs = copy.copy(theirs["n_pairs"])  # patch's option, with the circuit's own cap in its help
    n_pairs.help = (
        f"Pairs of a built-in task: at least 2 (the rule a --task file's pairs meet too), at most {MAX_PAIRS:,}"
        " (a circuit run keeps pairs x edges values and bootstraps them)."
    )
    theirs = {**theirs, "n_pairs": n_pairs}
    at = max(i for i, p in enumerate(command.params) if p.name in _MODEL_OPTIONS) + 1
    command.params[at:at] = [theirs[name] for name in TASK_OPTIONS]
    return command


@click.command("circuit")
@model_options
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="eap-ig",
    show_default=True,
    help="Edge scores: eap (one backward, a first-order ESTIMATE), eap-ig (integrated gradients over --steps, an ESTIMATE), "
    "exact (every edge patched: exact, ~one forward per edge).",
)
@click.option(
    "--steps",
    default=5,
    show_default=True,
    type=click.IntRange(min=2),
    help="Integrated-gradient steps of --method eap-ig: at least 2 (one step is --method eap).",
)
@click.option(
    "--top-n",
    default=None,
    type=click.IntRange(min=1),
    help="The circuit: the N strongest edges (default: the smallest reaching the target).",
)
@click.option("--threshold", default=None, type=click.FloatRange(min=0, min_open=True), help="The circuit: every edge with |score| >= T.")
@click.option(
    "--target-faithfulness",
    default=0.95,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True, max=1.5),
    help="Without --top-n/--threshold: the smallest circuit reaching this faithfulness (0 corrupted .. 1 clean).",
)
@click.option("--confirm", default=20, show_default=True, type=click.IntRange(min=0), help="Top circuit edges confirmed by exact patching.")
@click.option(
    "--direction",
    type=click.Choice(["noising", "denoising"]),
    default="noising",
    show_default=True,
    help="noising: clean run, the edge's sender set to its corrupted value; denoising: the reverse.",
)
@click.option(
    "--n-bootstrap", default=1000, show_default=True, type=click.IntRange(min=1), help="Bootstrap resamples of the pairs (intervals)."
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def circuit_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    task_file,
    builtin,
    n_pairs,
    no_bos,
    batch_size,
    seed,
    method,
    steps,
    top_n,
    threshold,
    target_faithfulness,
    confirm,
    direction,
    n_bootstrap,
    out_dir,
    overwrite,
    quiet,
):
    """Which edges carry a task: score every edge (embeddings, heads' q/k/v inputs, MLPs, logits),
    take the circuit, measure its faithfulness and confirm its top edges by exact patching.

    Scores are shares of the clean-corrupt gap with 95% bootstrap intervals over pairs and a
    stability (how often the edge is selected, with its sign, over resamples).  Writes edges.csv,
    faithfulness.csv, circuit.png/svg and manifest.json to --out.
    """
    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.reports.api.circuit import circuit

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = CircuitConfig(
        method=method,
        steps=steps,
        direction=direction,
        top_n=top_n,
        threshold=threshold,
        confirm=confirm,
        n_bootstrap=n_bootstrap,
        seed=seed,
        target_faithfulness=target_faithfulness,
        batch_size=batch_size,
    )
    with progress_bars("circuit", quiet=quiet) as progress:
        result = circuit(
            model,
            config,
            task=task_file,
            builtin=builtin,
            n_pairs=n_pairs,
            prepend_bos=not no_bos,
            progress=progress,
            command=command_line(),
            device=device,
            dtype=dtype,
            revision=revision,
            allow_new_weights=allow_new_weights,
        )
    result.save(out, overwrite=overwrite)
    echo_findings(result)
    click.echo(f"wrote edges.csv, faithfulness.csv, circuit.png/svg and manifest.json to {Path(out)}")


with_task_options(circuit_cmd)

COMMANDS = [circuit_cmd]
