"""``headlens detect``, ``headlens classify`` and ``headlens selftest``."""

from __future__ import annotations

import sys

import click

from headlens.reports.cli.common import model_options, parse_csv
from headlens.reports.models import named_models
from headlens.reports.census_files import classify_to_dir
from headlens.reports.progress import progress_bars


def census_options(fn):
    opts = [
        click.option("--referent-file", default=None, type=click.Path(dir_okay=False), help="JSONL: text plus character spans of pronoun, antecedent and distractor."),
        click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1)),
        click.option("--no-bos", is_flag=True, help="Do not prepend BOS (Hugging Face / paper convention); on encoders, no [CLS] ... [SEP] around the text."),
        click.option("--window", default=64, show_default=True, type=int, help="Tokens per natural-text window (previous-token, sink)."),
        click.option("--seq-len", default=50, show_default=True, type=int, help="T: random tokens per sequence, repeated twice (duplicate, induction)."),
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


def attention_options(fn):
    """``--attention auto|eager|streaming`` and ``--query-block``."""
    fn = click.option("--query-block", default=256, show_default=True, type=click.IntRange(min=1), help="Queries per block on the streaming path.")(fn)
    return click.option("--attention", type=click.Choice(["auto", "eager", "streaming"]), default="auto", show_default=True, help=ATTENTION_HELP)(fn)


def _census_config(detectors, n_prompts, seed, seq_len, window, no_bos, batch_size, referent_file, ablate=(), attention="auto", query_block=256):
    from headlens.analyses.heads.census import CensusConfig

    return CensusConfig(
        attention=attention,
        query_block=query_block,
        detectors=tuple(parse_csv(detectors)) if detectors else None,
        n_prompts=n_prompts,
        seq_len=seq_len,
        window=window,
        prepend_bos=not no_bos,
        seed=seed,
        batch_size=batch_size,
        referent_file=referent_file,
        ablate=tuple(ablate),
    )


def _load(model, device, dtype, revision, allow_new_weights=False):
    from headlens.probes.config import ModelConfig
    from headlens.probes.loading import load_model

    return load_model(ModelConfig(model=model, device=device, dtype=dtype, revision=revision, allow_new_weights=allow_new_weights), named=named_models())


def _precheck(config) -> None:
    """Cheap input checks before the model loads (the census repeats them)."""
    from headlens.analyses.heads.detectors import get_detectors
    from headlens.probes.errors import InputError

    get_detectors(list(config.detectors) if config.detectors is not None else None)
    if config.n_prompts < 1:
        raise InputError(f"--n-prompts must be at least 1, got {config.n_prompts}")
    if config.referent_file:
        from headlens.analyses.stimuli import load_referent_file

        load_referent_file(config.referent_file)


@click.command("detect")
@model_options
@census_options
@attention_options
@click.option("--out", "out_file", required=True, help="Scores table: .csv, .parquet or .json (a manifest is written beside it).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output file.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def detect_cmd(model, device, dtype, revision, allow_new_weights, detectors, n_prompts, seed, seq_len, window, no_bos, batch_size, referent_file, attention, query_block, out_file, overwrite, quiet):
    """Score every head with the chosen detectors; write the long-form scores table.

    Columns: layer, head, detector, score, baseline, ci_low, ci_high, n, accuracy
    (accuracy for referent only).
    """
    from headlens.analyses.heads.census import run_census
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import check_out_file, write_json
    from headlens.reports.tables import check_table_path, write_table

    out = check_table_path(out_file)
    check_out_file(out, overwrite=overwrite)
    manifest_path = out.with_name(out.stem + ".manifest.json")
    config = _census_config(detectors, n_prompts, seed, seq_len, window, no_bos, batch_size, referent_file, attention=attention, query_block=query_block)
    _precheck(config)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    with progress_bars("census", quiet=quiet) as progress:
        result = run_census(loaded, config, progress=progress)
    write_table(result.scores, out)
    write_json(manifest_path, build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], seed=seed, prepend_bos=config.prepend_bos, configs={"census": config}, extra={"stimuli": result.stimuli}))
    _echo_notes(result)
    click.echo(f"{len(result.scores)} scores ({result.scores['detector'].nunique()} detectors x {loaded.n_layers * loaded.n_heads} heads) -> {out}")


def _echo_notes(result) -> None:
    """Detectors that cannot measure this model (next_token on causal attention), on stderr."""
    for note in getattr(result, "detector_notes", {}).values():
        click.echo(f"note: {note}", err=True)


@click.command("classify")
@model_options
@census_options
@attention_options
@click.option("--threshold", "thresholds", multiple=True, help="DETECTOR=VALUE, repeatable, e.g. --threshold induction=0.4.")
@click.option("--baseline-factor", default=2.0, show_default=True, type=click.FloatRange(min=1.0), help="A role needs ci_low >= this x the uniform baseline.")
@click.option("--mask", "mask_file", default=None, type=click.Path(dir_okay=False), help="Pruned-head set (JSON from 'headlens prune'): census the model with those heads zero-ablated.")
@click.option("--evidence", is_flag=True, help="Then test each role with the intervention it predicts: evidence.csv (supported / not supported / not testable here, with the figure).")
@click.option("--evidence-n", default=32, show_default=True, type=int, help="Pairs, sequences or windows per evidence test (at least 10).")
@click.option("--evidence-seq-len", default=20, show_default=True, type=int, help="Random tokens per copy in the induction evidence (at least 4).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def classify_cmd(model, device, dtype, revision, allow_new_weights, detectors, n_prompts, seed, seq_len, window, no_bos, batch_size, referent_file, attention, query_block, thresholds, baseline_factor, mask_file, evidence, evidence_n, evidence_seq_len, out_dir, overwrite, quiet):
    """Give every head its roles: scores.csv, roles.csv, heatmaps, summary.md, manifest.json
    (with --evidence also evidence.csv and an evidence column in heads.csv)."""
    from headlens.analyses.heads.classify import parse_thresholds
    from headlens.probes.outputs import check_out_dir

    given = [f for f, p in (("--evidence-n", "evidence_n"), ("--evidence-seq-len", "evidence_seq_len")) if click.get_current_context().get_parameter_source(p) != click.core.ParameterSource.DEFAULT]
    evidence_config = _evidence_config(evidence, evidence_n, evidence_seq_len, seed, mask_file, given)
    out = check_out_dir(out_dir, overwrite=overwrite)
    parsed = parse_thresholds(list(thresholds))
    ablate: list[tuple[int, int]] = []
    if mask_file:
        from headlens.analyses.ablation.masks import read_mask

        ablate = list(read_mask(mask_file).heads)
    config = _census_config(detectors, n_prompts, seed, seq_len, window, no_bos, batch_size, referent_file, ablate, attention=attention, query_block=query_block)
    _precheck(config)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    if mask_file:
        from headlens.analyses.ablation.masks import read_mask

        read_mask(mask_file).check(loaded.n_layers, loaded.n_heads)
    result, roles = classify_to_dir(
        loaded, config, out, thresholds=parsed, baseline_factor=baseline_factor, quiet=quiet, command=["headlens", *sys.argv[1:]], extra={"mask": mask_file}, evidence=evidence_config
    )
    _echo_notes(result)
    named = roles[roles["roles"] != ""]
    click.echo(f"{len(named)} of {len(roles)} heads have a role -> {out}/roles.csv")
    for r in named.itertuples():
        click.echo(f"  {r.name:>6}  {r.roles}")
    if evidence_config is not None:
        _echo_evidence(out)


def _evidence_config(evidence, n, seq_len, seed, mask_file, given=()):
    """The evidence settings (None without --evidence), checked before the model loads; ``given``:
    the evidence flags set on the command line."""
    from headlens.probes.errors import InputError

    if not evidence:
        if given:
            raise InputError("--evidence-n and --evidence-seq-len need --evidence")
        return None
    if mask_file:
        raise InputError("--evidence with --mask: the interventions run on the unpruned model, so they would not test the pruned model's roles")
    from headlens.analyses.patching.evidence import EvidenceConfig

    try:
        return EvidenceConfig(n=n, T=seq_len, seed=seed)
    except InputError as exc:
        raise InputError(str(exc).replace("(n=", "(--evidence-n ").replace("(T=", "(--evidence-seq-len ")) from None


def _echo_evidence(out) -> None:
    """One line per (head, role) from evidence.csv."""
    import pandas as pd

    from headlens.reports.evidence_text import EVIDENCE_FILE, evidence_lines

    table = pd.read_csv(out / EVIDENCE_FILE, dtype={"name": str}, keep_default_na=False, na_values=[""])
    counts = table["evidence"].value_counts()
    click.echo(f"evidence: {', '.join(f'{v} {k}' for k, v in counts.items()) or 'no role to test'} -> {out}/{EVIDENCE_FILE}")
    for line in evidence_lines(table):
        click.echo(line)


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
    from headlens.analyses.synthetic.selftest import run_selftest
    from headlens.probes.errors import CheckFailed

    with progress_bars("census", quiet=quiet) as progress:
        report = run_selftest(device=device, dtype=dtype, n_prompts=n_prompts, folder=keep, progress=None if quiet else progress)
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        raise CheckFailed(f"selftest failed: {report.n_failed} check(s) failed")
    click.echo(f"selftest: pass ({len(report.checks)} checks on {report.device}, {report.dtype})")


COMMANDS = [detect_cmd, classify_cmd, selftest_cmd]
