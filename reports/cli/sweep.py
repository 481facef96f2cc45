"""``headlens sweep``: the census over many models, revisions or checkpoint folders, as Ray tasks."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from headlens.analyses.heads.census_config import CensusConfig
from headlens.probes.outputs import write_json
from headlens.reports.api.text_files import read_text_file
from headlens.reports.cli.census_options import attention_options, census_options
from headlens.reports.cli.common import check_model_names, fail, parse_csv
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.runs.sweep.config import SweepConfig

__all__ = ["sweep_cmd", "COMMANDS"]


def _count(n: int, noun: str) -> str:
    """``1 task``, ``2 tasks``, ``0 tasks``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        click.echo(msg, err=True)


@click.command("sweep")
@click.option(
    "--model",
    "-m",
    "models",
    multiple=True,
    required=True,
    callback=check_model_names,
    help="Repeatable: a Hub id, demo, a checkpoint folder, or a folder of checkpoint folders "
    "(e.g. what 'headlens demo train --save-every' keeps).",
)
@click.option(
    "--revision", "revisions", multiple=True, help="Repeatable or comma-separated: Hub revisions of every Hub --model (e.g. step1000)."
)
@click.option(
    "--steps",
    "steps",
    multiple=True,
    help="Repeatable: Pythia-style revisions stepN, START:STOP:EVERY (1000:143000:1000) or a list (0,1,2,4,...,512).",
)
@config_options(SweepConfig, ("device", "dtype", "allow_new_weights"))
@census_options
@attention_options
@config_options(
    SweepConfig,
    ("thresholds", "baseline_factor", "text_file", "loss_windows", "loss_window", "ablation"),
    overrides={
        "thresholds": {"multiple": True, "type": click.STRING, "default": ()},
        "text_file": {"type": click.Path(exists=True, dir_okay=False)},  # an existing file, checked before Ray starts
    },
)
@click.option(
    "--address", default=None, help="Ray cluster to run on (HOST:PORT, ray://HOST:PORT or auto); default $RAY_ADDRESS, else local Ray."
)
@click.option("--num-cpus", default=None, type=click.IntRange(min=1), help="CPUs of local Ray (default: all).")
@click.option("--cpus-per-task", default=1.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--gpus-per-task", default=None, type=click.FloatRange(min=0.0), help="Default: 1 where the cluster has GPUs, else 0.")
@click.option(
    "--max-retries", default=1, show_default=True, type=click.IntRange(min=0), help="Reruns of a task whose worker or node was lost."
)
@click.option("--no-figures", is_flag=True, help="Write the dataset only.")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Sweep folder: tasks/, dataset/, checkpoints.csv, figures/, manifest.json.",
)
@click.option(
    "--overwrite", is_flag=True, help="Discard finished tasks of an earlier sweep in --out (default: keep them, run only what is missing)."
)
@click.option("--quiet", "-q", is_flag=True, help="No per-task lines.")
def sweep_cmd(
    models,
    revisions,
    steps,
    device,
    dtype,
    allow_new_weights,
    thresholds,
    baseline_factor,
    text_file,
    loss_windows,
    loss_window,
    ablation,
    address,
    num_cpus,
    cpus_per_task,
    gpus_per_task,
    max_retries,
    no_figures,
    out_dir,
    overwrite,
    quiet,
    **settings,
):
    """Census every model x revision (or checkpoint folder) as a Ray task and gather one Parquet dataset.

    Each task writes OUT/tasks/KEY/ (scores.csv as 'headlens detect' writes it, roles.csv,
    checkpoint.json with the held-out loss, manifest.json); finished tasks are skipped when
    the same command runs again, so an interrupted sweep resumes. A failed task (unknown
    revision, not a checkpoint) is reported in one line and the others go on; the exit code
    is then 1. The dataset OUT/dataset is partitioned by model: model, revision, step,
    label, layer, head, detector, score, baseline, ci_low, ci_high, n, accuracy, role.
    """
    from headlens.probes.cluster.session import import_ray
    from headlens.reports.runs.sweep.engine import check_settings, run_sweep
    from headlens.reports.runs.sweep.gather import import_pyarrow
    from headlens.reports.runs.sweep.plan import plan_tasks

    import_ray()
    import_pyarrow()
    config, revs = _sweep_config(
        revisions, steps, settings, device=device, dtype=dtype, allow_new_weights=allow_new_weights, thresholds=thresholds,
        baseline_factor=baseline_factor, text_file=text_file, loss_windows=loss_windows, loss_window=loss_window, ablation=ablation,
    )  # fmt: skip
    tasks = plan_tasks(list(models), revs)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        fail(f"output {out} exists and is not a folder", 4)
    out.mkdir(parents=True, exist_ok=True)
    check_settings(out, config, overwrite=overwrite)
    command = ["headlens", *sys.argv[1:]]
    _say(f"sweep: {_count(len(tasks), 'task')} -> {out}", quiet)
    outcome = run_sweep(
        tasks, config, out, command=command, address=address, num_cpus=num_cpus, cpus_per_task=cpus_per_task,
        gpus_per_task=gpus_per_task, max_retries=max_retries, on_record=_on_record(quiet),
    )  # fmt: skip
    skipped, failed = outcome.by_status("skipped"), outcome.by_status("failed")
    if skipped:
        _say(f"{len(skipped)} of {_count(len(tasks), 'task')} {'was' if len(skipped) == 1 else 'were'} done already (skipped)", quiet)
    _write_outputs(out, tasks, outcome, config, command, no_figures=no_figures, quiet=quiet)
    if failed:
        fail(f"{len(failed)} of {_count(len(tasks), 'task')} failed (see {out}/tasks.csv); rerun the same command to retry them", 1)


def _sweep_config(revisions, steps, settings, *, thresholds, text_file, **fields):
    """The sweep's settings (census config checked, thresholds parsed, the text read and resolved) and the revisions
    (``--revisions`` items, then the ``--steps`` ranges), all before Ray starts."""
    from headlens.reports.api.census import check_census_config, parse_thresholds
    from headlens.reports.runs.sweep.plan import parse_steps

    revs = [r for item in revisions for r in (parse_csv(item) or [])]
    for item in steps:
        revs += parse_steps(item)
    if text_file:
        read_text_file(text_file)  # a text every task would fail on is refused before Ray starts
    census = config_from(CensusConfig, settings)
    check_census_config(census)
    config = SweepConfig(
        census=census,
        thresholds=tuple(sorted(parse_thresholds(list(thresholds)).items())),
        text_file=str(Path(text_file).resolve()) if text_file else None,
        **fields,
    )
    return config, revs


def _on_record(quiet):
    """The line printed as each task finishes (a failure on stderr, always)."""

    def on_record(record, finished, total):
        if record["status"] == "failed":
            click.echo(f"headlens: error: [{finished}/{total}] {record['label']}: {record['error']}", err=True)
        else:
            loss = record.get("heldout_loss")
            _say(
                f"[{finished}/{total}] {record['label']}: census {record.get('census_s', 0):.1f} s, held-out loss {loss:.3f}"
                if loss is not None
                else f"[{finished}/{total}] {record['label']}: done in {record.get('wall_s', 0):.1f} s",
                quiet,
            )

    return on_record


def _write_outputs(out, tasks, outcome, config, command, *, no_figures, quiet):
    """tasks.csv, the gathered dataset, the figures and manifest.json; then the closing lines."""
    from headlens.probes.manifest import build_manifest
    from headlens.reports.api.census import default_thresholds
    from headlens.reports.render.figures.sweep import sweep_figures
    from headlens.reports.render.tables import write_table
    from headlens.reports.runs.sweep.gather import gather, loss_sets

    write_table(_status_table(outcome.records), out / "tasks.csv")
    data, checkpoints = gather(out, tasks)
    windows = loss_sets(out, tasks)
    figures: list[str] = []
    if not no_figures and len(checkpoints):
        used = {**default_thresholds(), **dict(config.thresholds)}
        figures = [str(p.relative_to(out)) for p in sweep_figures(data, checkpoints, out / "figures", thresholds=used)]
    write_json(
        out / "manifest.json",
        build_manifest(
            command=command,
            seed=config.census.seed,
            prepend_bos=config.census.prepend_bos,
            configs={"sweep": config},
            extra={
                "tasks": len(tasks),
                "done_now": len(outcome.by_status("done")),
                "skipped": len(outcome.by_status("skipped")),
                "failed": len(outcome.by_status("failed")),
                "ray_start_s": round(outcome.ray_start_s, 2),
                "sweep_wall_s": round(outcome.wall_s, 2),
                "ray_resources": outcome.resources,
                "figures": figures,
                # per distinct set of windows: the source text, the cut (offsets, BOS in the window) and the tasks scored on it
                "heldout_loss_windows": windows,
            },
        ),
    )
    click.echo(
        f"{_count(len(checkpoints), 'checkpoint')}, {_count(len(data), 'score')} -> {out}/dataset"
        + (f"; figures in {out}/figures" if figures else "")
    )
    for w in windows:  # one line per distinct set of windows (one tokenizer: one line)
        which = (
            ""
            if len(windows) == 1
            else " of " + (", ".join(w["labels"]) if len(w["labels"]) <= 3 else _count(len(w["labels"]), "checkpoint"))
        )
        _say(f"held-out loss{which}: {w['basis']}", quiet)


def _status_table(records):
    import pandas as pd

    cols = ["key", "label", "model", "revision", "step", "status", "error", "exit_code", "wall_s", "host"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in records], columns=cols)


COMMANDS = [sweep_cmd]
