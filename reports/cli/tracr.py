"""``headlens tracr-model``: compile a tracr program into a GPT-2 checkpoint headlens loads, with its ground truth."""

from __future__ import annotations

import click

#: The program names (a literal here so that --help needs no heavy import; tests check it equals PROGRAMS).
PROGRAM_NAMES = ("frac_prevs", "hist", "reverse", "sort", "shift", "detect_pattern", "shuffle_dyck")


@click.command("tracr-model")
@click.argument("program", type=click.Choice(PROGRAM_NAMES))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write the checkpoint into.")
@click.option("--max-seq-len", type=int, default=None, help="Longest input (1-8; default: the program's own, 5 for most).")
@click.option("--overwrite", is_flag=True, help="Replace --out if it holds files.")
def tracr_model_cmd(program: str, out_dir: str, max_seq_len: int | None, overwrite: bool) -> None:
    """Compile tracr's PROGRAM (causal attention) into a GPT-2 checkpoint in --out.

    The folder is loadable as --model by every command; it holds the word-level tokenizer, program.py,
    ground_truth.json (each head's and MLP's job, the true edges) and agreement.json (the checkpoint
    against the RASP program on every input up to the program's length).  Needs the circuits-bench
    extra.  Exit codes: 0 written, 2 bad input (or a program tracr cannot compile causally: sort),
    4 --out holds files without --overwrite (an empty folder is written into).
    """
    from headlens.reports.api.tracr import tracr_model

    built = tracr_model(program, out_dir, overwrite=overwrite, max_seq_len=max_seq_len)
    click.echo(built.summary())
