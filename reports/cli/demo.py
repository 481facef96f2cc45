"""``headlens demo train|card|heldout|replay``: train the demo model, write its card, write its
held-out text, replay its log (progress goes to stderr)."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from headlens.analyses.demo import MODEL_DIR
from headlens.probes.outputs import atomic_dir, check_out_file, write_text
from headlens.probes.settings import SEED_MAX
from headlens.reports.cli.shared import sharing

__all__ = ["demo_group", "COMMANDS"]


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.group("demo", context_settings={"help_option_names": ["-h", "--help"]})
def demo_group() -> None:
    """The demo model (--model demo): train it, write its model card or its held-out text, replay its training log."""


@demo_group.command("train")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Checkpoint folder to write.")
@click.option(
    "--steps",
    type=click.IntRange(min=0),
    default=None,
    help="Stop after N steps (the schedule stays the full recipe's). Default: the full recipe.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, SEED_MAX),
    default=None,
    help="Seed for initialisation, data order and negatives. Default: the recipe's (0).",
)
@click.option(
    "--eval-every", type=click.IntRange(min=0), default=None, help="Held-out evaluation interval in steps (0: none). Default: the recipe's."
)
@click.option(
    "--save-every",
    "keep_every",
    type=click.IntRange(min=0),
    default=0,
    help="Also keep the weights every N steps (and at step 0) as checkpoint folders OUT-checkpoints/step-NNNNNN, "
    "each loadable with --model DIR and swept with 'headlens sweep -m OUT-checkpoints'. Default 0: none.",
)
@click.option("--no-card", is_flag=True, help="Do not run the census and write MODEL_CARD.md.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output folder (and its kept checkpoints).")
def train_cmd(
    out_dir: str, steps: int | None, seed: int | None, eval_every: int | None, keep_every: int, no_card: bool, overwrite: bool
) -> None:
    """Train the demo model on CPU (the recipe fixes the thread count) and save it as a checkpoint folder.

    Every 250 steps the training state (not a checkpoint folder) is saved to OUT.state.pt;
    running the same command again after an interruption goes on from there (and computes
    exactly what an uninterrupted run would). The file is removed when the folder is written.
    With --save-every N the weights of every N-th step are kept too, in OUT-checkpoints/.
    """
    from headlens.analyses.demo.card import loss_bases
    from headlens.analyses.demo.checkpoints import config_dict, save_checkpoint, save_step_checkpoint, step_folder_name
    from headlens.analyses.demo.recipe import RECIPE
    from headlens.analyses.demo.train import train
    from headlens.reports.runs.demo_card import write_model_card

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(out_dir)
    kept = out.with_name(out.name + "-checkpoints")
    state_file = out.with_name(out.name + ".state.pt")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise click.UsageError(f"{out} exists and is not empty; pass --overwrite")
    if kept.exists() and any(kept.iterdir()) and not state_file.is_file():
        if not overwrite:
            raise click.UsageError(f"{kept} exists and is not empty; pass --overwrite")
        shutil.rmtree(kept)
    config = RECIPE if seed is None else replace(RECIPE, seed=seed)
    n_steps = steps if steps is not None else config.schedule_steps
    _say(f"demo recipe: {config.n_layer} layers x {config.n_head} heads, d_model {config.d_model}, {n_steps} steps, seed {config.seed}")
    if eval_every != 0 and (eval_every or config.eval_every):
        _say(f"held-out loss below (nats/token, full softmax): {loss_bases(config_dict(config), {})['curve']}")

    def on_log(row: dict[str, Any]) -> None:
        if row.get("heldout_loss") is not None:
            _say(
                f"step {row['step']:>5}  tokens {row['tokens']:>9,}  train {row['train_loss'] if row['train_loss'] is not None else '-'}"
                f"  held-out {row['heldout_loss']:.3f}  induction {row['induction']:.2f} ({row['induction_head']})"
                f"  prev {row['previous_token']:.2f}  sink {row['sink']:.2f}  [{row['elapsed_s']:.0f} s]"
            )

    if state_file.is_file():
        _say(f"resuming from {state_file}")
    out.parent.mkdir(parents=True, exist_ok=True)
    recipe = config_dict(config)

    def keep(step: int, model: Any, row: dict[str, Any]) -> None:
        save_step_checkpoint(model, kept / step_folder_name(step), step=step, run=out.name, row=row, recipe=recipe)

    try:
        result = train(
            config,
            steps=steps,
            eval_every=eval_every,
            on_log=on_log,
            state_file=state_file,
            checkpoint_every=keep_every,
            on_checkpoint=keep,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    final = result.summary["final"]
    if final:
        bases = loss_bases(config_dict(config), final)
        _say(f"held-out loss {final['heldout_loss']:.3f} (unigram {final['heldout_unigram_loss']:.3f}) on {bases['heldout']}")
        _say(f"evaluation text loss {final['eval_text_loss']:.3f} (unigram {final['eval_text_unigram_loss']:.3f}) on {bases['eval_text']}")
    # write into a temporary sibling, then swap in: a crashed run never leaves half a folder
    with atomic_dir(out) as tmp:
        save_checkpoint(result, tmp)
        if not no_card:
            _say("running the head census for MODEL_CARD.md ...")
            write_model_card(tmp)
    state_file.unlink(missing_ok=True)
    _say(f"wrote {out}" + (f"; checkpoints every {keep_every} steps in {kept}" if keep_every else ""))


@demo_group.command("card")
@click.option("--model", "folder", required=True, type=click.Path(exists=True, file_okay=False), help="A folder written by `train`.")
def card_cmd(folder: str) -> None:
    """(Re)write MODEL_CARD.md for a checkpoint folder written by `train`."""
    from headlens.reports.runs.demo_card import write_model_card

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = write_model_card(folder)
    _say(f"wrote {path}")


@demo_group.command("heldout")
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False), help="Text file to write (UTF-8).")
@click.option("--overwrite", is_flag=True, help="Replace an existing file.")
def heldout_cmd(out_file: str, overwrite: bool) -> None:
    """Write the demo model's held-out text: the documents it never trained on, joined by <|endoftext|>.

    Built from the Python that runs it, as the training recipe builds its held-out split
    (the same Python version gives the same file). Pass it to `headlens report --text-file`
    (or `ablate`/`prune --text-file`) to measure the demo model on text from its own domain;
    the report's manifest records the file's SHA-256, which this command prints.
    """
    from headlens.analyses.measure.python_docs import heldout_documents, heldout_text

    out = Path(out_file)
    check_out_file(out, overwrite=overwrite)
    docs = heldout_documents()
    text = heldout_text()
    write_text(out, text)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    _say(f"wrote {out}: {len(docs)} held-out documents, {len(text):,} characters, sha256 {sha} (Python {platform.python_version()})")


@demo_group.command("replay")
@click.option(
    "--model",
    "folder",
    default=None,
    type=click.Path(exists=True, file_okay=False),
    help="A folder written by `train`. Default: the shipped demo model.",
)
@click.option("--steps", type=click.IntRange(min=1), default=300, show_default=True, help="How many of the logged steps to rerun.")
def replay_cmd(folder: str | None, steps: int) -> None:
    """Rerun the first STEPS steps of a logged run and compare its training losses to 3 decimals.

    Exit 0 when every rerun loss rounds to the logged one, 1 when one does not, 2 when the
    log cannot be replayed here (another Python ships other training text).
    """
    from headlens.analyses.demo.replay import replay

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    target = Path(folder) if folder else MODEL_DIR
    report = replay(target, steps, on_step=lambda done: _say(f"  replayed {done}/{steps} steps") if done and done % 50 == 0 else None)
    _say(report.summary())
    if report.mismatches:
        sys.exit(1)


#: The main job (scripts/demo.sh): each step as its own command line would be, after ``headlens``;
#: ``{out}`` is ``--out``.  Ablation and pruning in the report measure the loss on the demo's own
#: held-out text (documents it never trained on), not the built-in English text it never learned.
MAIN_JOB: tuple[tuple[str, ...], ...] = (
    ("verify", "--model", "demo"),
    ("capture", "--model", "demo", "--text", "Apple raised its price target", "--out", "{out}/capture", "--overwrite"),
    ("classify", "--model", "demo", "--out", "{out}/census", "--overwrite"),
    ("demo", "heldout", "--out", "{out}/heldout.txt", "--overwrite"),
    ("report", "--model", "demo", "--quick", "--text-file", "{out}/heldout.txt", "--out", "{out}/report", "--overwrite"),
)


_RUN_HELP = (
    "The main job in one process (scripts/demo.sh): verify the demo model, capture one text, its head census, its held-out "
    "text and a quick report, into OUT; the library is imported once for all five steps.  Each step is the command below, "
    "parsed and run as on its own command line:\n\n"
    + "\n\n".join("\b\n  headlens " + " ".join(shlex.quote(a.format(out="OUT")) for a in line) for line in MAIN_JOB)
)


@demo_group.command("run", help=_RUN_HELP)
@click.option(
    "--out",
    "out_dir",
    default="demo-out",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Output folder (its steps' files are replaced).",
)
@click.pass_context
def run_cmd(ctx: click.Context, out_dir: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = ctx.find_root()
    group = root.command
    assert isinstance(group, click.Group)
    start = time.perf_counter()
    # the steps share what they load: the model once (the first step to need it loads it), classify's census for the report
    with sharing(ctx) as box:
        for line in MAIN_JOB:
            args = [a.format(out=out_dir) for a in line]
            _say(f"demo: headlens {' '.join(shlex.quote(a) for a in args)}")
            step = time.perf_counter()
            _invoke(root, group, args)
            _say(f"demo: {args[0] if args[0] != 'demo' else 'demo ' + args[1]} done in {time.perf_counter() - step:.1f} s")
    _say(
        f"demo: done in {time.perf_counter() - start:.0f} s (the model loaded {box.loads} time{'s' if box.loads != 1 else ''}); "
        f"see {out_dir}/census/summary.md and {out_dir}/report/report.html"
    )


def _invoke(parent: click.Context, group: click.Group, args: list[str]) -> None:
    """Run ``headlens ARGS`` inside this process: parsed and checked as on the command line."""
    name, command, rest = group.resolve_command(parent, args)
    assert command is not None and name is not None
    with command.make_context(name, rest, parent=parent) as sub:
        command.invoke(sub)


COMMANDS = [demo_group]
