"""``headlens detect``, ``headlens classify`` and ``headlens selftest``: a few lines over
:func:`headlens.reports.api.census.census`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from headlens.analyses.heads.census_config import CensusConfig, ClassifyConfig
from headlens.analyses.patching.evidence_config import EvidenceSettings
from headlens.probes.errors import CheckFailed, InputError
from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.reports.cli.census_options import attention_options, census_options
from headlens.reports.cli.common import command_line, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.cli.shared import load, shared
from headlens.reports.render.progress import progress_bars

#: The evidence settings' flags (their fields' names are the library's, ``n`` and ``T``).
EVIDENCE_FLAGS = {"n": "--evidence-n", "T": "--evidence-seq-len", "roles": "--evidence-roles", "sink_sample": "--evidence-sink-sample"}
#: ``--threshold DETECTOR=VALUE``, repeatable: the CLI's form of ``thresholds={"induction": 0.4}``.
THRESHOLD_OPTION = {
    "multiple": True,
    "type": click.STRING,
    "default": (),
    "help": "DETECTOR=VALUE, repeatable, e.g. --threshold induction=0.4.",
}

if TYPE_CHECKING:
    from headlens.analyses.patching.evidence import EvidenceConfig
    from headlens.reports.api.census import CensusResult


@click.command("detect")
@model_options
@census_options
@attention_options
@click.option("--out", "out_file", required=True, help="Scores table: .csv, .parquet or .json (a manifest is written beside it).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def detect_cmd(model, device, dtype, revision, allow_new_weights, out_file, overwrite, quiet, **settings):
    """Score every head with the chosen detectors; write the long-form scores table.

    Columns: layer, head, detector, score, baseline, ci_low, ci_high, n, accuracy
    (accuracy for referent only).
    """
    from headlens.reports.api.census import DetectResult, census, check_census_config
    from headlens.reports.render.tables import check_table_path

    out = check_table_path(out_file)
    check_out_file(out, overwrite=overwrite)
    config = config_from(CensusConfig, settings)
    check_census_config(config)
    loaded = load(model, device, dtype, revision, allow_new_weights)
    with progress_bars("census", quiet=quiet) as progress:
        result = census(loaded, config, progress=progress, command=command_line())
    DetectResult.of_census(result).write(out)  # the table, then <stem>.manifest.json
    _echo_notes(result)
    click.echo(
        f"{len(result.scores)} scores ({result.scores['detector'].nunique()} detectors x {loaded.n_layers * loaded.n_heads} heads) -> {out}"
    )


def _echo_notes(result: CensusResult) -> None:
    """Detectors that cannot measure this model (next_token on causal attention), on stderr."""
    for note in (result.notes or {}).values():
        click.echo(f"note: {note}", err=True)


@click.command("classify")
@model_options
@census_options
@attention_options
@config_options(ClassifyConfig, ("thresholds", "baseline_factor"), overrides={"thresholds": THRESHOLD_OPTION})
@click.option(
    "--mask",
    "mask_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Pruned-head set (JSON from 'headlens prune'): census the model with those heads zero-ablated.",
)
@click.option(
    "--evidence",
    is_flag=True,
    help=(
        "Then test each role with the intervention it predicts: evidence.csv (supported / not supported / not testable "
        "here, with the figure)."
    ),
)
@config_options(EvidenceSettings, ("n", "T", "roles", "sink_sample"), rename=EVIDENCE_FLAGS)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def classify_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    thresholds,
    baseline_factor,
    mask_file,
    evidence,
    n,
    T,
    roles,
    sink_sample,
    out_dir,
    overwrite,
    quiet,
    **settings,
):
    """Give every head its roles: scores.csv, roles.csv, heatmaps, summary.md, manifest.json
    (with --evidence also evidence.csv and an evidence column in heads.csv)."""
    from headlens.reports.api.census import census, check_census_config, check_classify_settings
    from headlens.reports.api.evidence import evidence as run_evidence
    from headlens.reports.render.evidence_text import EVIDENCE_FILE
    from headlens.reports.render.finding_lines import evidence_count_line

    given = [
        flag
        for p, flag in EVIDENCE_FLAGS.items()
        if click.get_current_context().get_parameter_source(p) != click.core.ParameterSource.DEFAULT
    ]
    evidence_config = _evidence_config(evidence, n, T, settings["seed"], mask_file, given, roles=roles, sink_sample=sink_sample)
    out = check_out_dir(out_dir, overwrite=overwrite)
    parsed = check_classify_settings(thresholds, baseline_factor, mask_file)
    config = config_from(CensusConfig, settings)  # with --mask, census(mask=) zeroes the mask's heads
    check_census_config(config)
    loaded = load(model, device, dtype, revision, allow_new_weights)
    if evidence_config is not None:
        with _evidence_flags():
            evidence_config.check_fits(loaded)  # before the census: nothing is written for a T the context cannot hold
    with progress_bars("census", quiet=quiet) as progress:
        result = census(
            loaded, config, thresholds=parsed, baseline_factor=baseline_factor, mask=mask_file, progress=progress, command=command_line()
        )
    result.save(out, overwrite=overwrite)  # the census files first: a failing evidence run loses none of them
    box = shared()
    if box is not None:  # inside `demo run`: the report's census stage reuses it when its settings are equal
        box.census = (loaded, result)
    if evidence_config is not None:
        with progress_bars("evidence", quiet=quiet) as progress:  # the cost first (forwards, time), then progress in forwards
            result = run_evidence(loaded, result, evidence_config, progress=progress, say=progress.write)
        result.write(out)
    found = result.findings()  # the notebook view's lines (one wording), with evidence the composition note too
    for note in found.warnings:
        click.echo(f"note: {note}", err=True)
    lines = list(found.lines)
    if lines:
        click.echo(f"{lines[0]} -> {out}/roles.csv")
    counted = evidence_count_line(result.evidence) if result.evidence is not None else None
    for line in lines[1:]:
        click.echo(f"{line} -> {out}/{EVIDENCE_FILE}" if line == counted else line)


def _evidence_config(evidence, n, seq_len, seed, mask_file, given=(), *, roles=None, sink_sample=None) -> EvidenceConfig | None:
    """The evidence settings (None without --evidence), checked before the model loads; ``given``:
    the evidence flags set on the command line."""
    from headlens.analyses.patching.evidence import EvidenceConfig

    if not evidence:
        if given:
            raise InputError(f"{', '.join(given)}: the evidence flags need --evidence")
        return None
    if mask_file:
        raise InputError(
            "--evidence with --mask: the interventions run on the unpruned model, so they would not test the pruned model's roles"
        )
    more = {"roles": roles} if roles else {}
    if sink_sample is not None:
        more["sink_sample"] = sink_sample
    with _evidence_flags():
        return EvidenceConfig(n=n, T=seq_len, seed=seed, **more)


@contextmanager
def _evidence_flags() -> Iterator[None]:
    """The evidence settings' errors in their flags' words: ``(T=128`` -> ``(--evidence-seq-len 128``."""
    try:
        yield
    except InputError as exc:
        text = str(exc)
        for field, flag in EVIDENCE_FLAGS.items():
            text = text.replace(f"({field}=", f"({flag} ")
            if text.startswith(f"{field}="):
                text = f"{flag} {text[len(field) + 1 :]}"
        raise InputError(text) from None


@click.command("selftest")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N or mps.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32", show_default=True)
@click.option("--n-prompts", default=40, show_default=True, type=click.IntRange(min=1))
@click.option("--keep", default=None, type=click.Path(file_okay=False), help="Keep the planted checkpoint and census in this folder.")
@click.option("--quiet", "-q", is_flag=True)
def selftest_cmd(device, dtype, n_prompts, keep, quiet):
    """Build a model with planted heads and check that the census finds each one, and nothing else.

    Exit 0 when every planted role is recovered on its head and no other head gets a
    role; 1 otherwise.
    """
    from headlens.reports.api.verify import selftest

    with progress_bars("census", quiet=quiet) as progress:
        report = selftest(device=device, dtype=dtype, n_prompts=n_prompts, folder=keep, progress=None if quiet else progress)
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        raise CheckFailed(f"selftest failed: {report.n_failed} check(s) failed")
    click.echo(f"selftest: pass ({len(report.checks)} checks on {report.device}, {report.dtype})")


COMMANDS = [detect_cmd, classify_cmd, selftest_cmd]
