"""``headlens report``: every analysis of a model, as one HTML page, Markdown and figure files."""

from __future__ import annotations

import sys

import click

from headlens.probes.errors import CheckFailed
from headlens.reports.cli.common import model_options, parse_csv
from headlens.reports.cli.options import config_options
from headlens.reports.cli.shared import reuse, shared
from headlens.reports.render.progress import ReportBars
from headlens.reports.runs.report.report_config import ReportConfig

#: Heads with a role listed on stdout; the rest are counted ("... and 25 more").
SHOWN_ROLES = 12
#: ``--example-prompt``, repeatable: one of ``example_prompts``.
EXAMPLE_OPTION = {
    "decls": ("--example-prompt",),
    "multiple": True,
    "type": click.STRING,
    "default": (),
    "show_default": False,
    "help": "A prompt whose attention the page shows head by head (repeatable; default: three built-in prompts).",
}


@click.command("report")
@model_options
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Report folder: report.html, report.md, manifest.json and one folder per stage.",
)
@config_options(
    ReportConfig, ("quick", "text_file", "example_prompts", "prepend_bos", "skip"), overrides={"example_prompts": EXAMPLE_OPTION}
)
@click.option("--redo", default=None, help="Stages to recompute even if finished, comma-separated, or 'all'.")
@config_options(ReportConfig, ("batch_size", "seed"))
@click.option(
    "--overwrite",
    is_flag=True,
    help="Write into a folder that holds another model's report (or other files); its stage folders are replaced.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def report_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    out_dir,
    redo,
    overwrite,
    quiet,
    **settings,
):
    """Run the head census, attention sinks, zero and mean ablation, pruning and example
    attention patterns; write OUT/report.html (one self-contained page), OUT/report.md and
    figures (PNG, SVG, PDF).

    Each stage writes OUT/<stage>/ and then a marker; rerunning the same command loads
    finished stages instead of recomputing them (an interrupted run resumes).  A stage that
    fails is shown in the page as FAILED with its error, the others still run, and the exit
    code is 1.
    """
    from headlens.reports.render.tables import roles_joined
    from headlens.reports.runs.report import build

    # inside `demo run`: the model an earlier step loaded with these flags, and classify's census of it
    loaded = reuse(model, device, dtype, revision, allow_new_weights)
    box = shared()
    given = box.census if box is not None and loaded is not None else None
    with ReportBars(quiet=quiet) as bars:
        report = build.build_report(  # through the module: tests replace build.build_report
            loaded if loaded is not None else model,
            **{k: v for k, v in settings.items() if v not in (None, ())},  # ReportConfig's fields; left out: their defaults
            out_dir=out_dir,
            redo=tuple(parse_csv(redo) or ()),
            overwrite=overwrite,
            **(
                {}
                if loaded is not None
                else {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
            ),
            progress=bars,
            command=["headlens", *sys.argv[1:]],
            census=given[1] if given is not None and given[0] is loaded else None,
        )
    counts: dict[str, int] = {}
    for s in report.stages:
        counts[s.status] = counts.get(s.status, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    if report.roles is not None:
        shown = roles_joined(report.roles, report.heads, sep=", ") if len(report.heads) else []
        named = [(name, text) for name, text in zip(report.heads["name"], shown, strict=True) if text]
        named.sort(key=lambda item: item[1] == "sink")  # heads with another role first: most heads of a Llama-family model sink
        listed = ", ".join(f"{name} ({text})" for name, text in named[:SHOWN_ROLES]) + (
            f", ... and {len(named) - SHOWN_ROLES} more (report.html)" if len(named) > SHOWN_ROLES else ""
        )
        click.echo(f"{len(named)} of {len(report.heads)} heads have a role" + (f": {listed}" if named else ""))
    smoke = [s.name for s in report.stages if report.smoke_test(s.name)]
    if smoke:
        click.echo(
            f"--quick: {', '.join(smoke)} ran as smoke tests (a few windows and prompts): they state no finding; "
            "run without --quick for results"
        )
    click.echo(f"wrote {report.out_dir}/report.html, report.md, manifest.json ({len(report.stages)} stages: {summary})")
    if report.failed:
        first = report.failed[0]
        raise CheckFailed(
            f"{len(report.failed)} stage(s) failed ({first.name}: {first.error}); "
            f"the report marks them FAILED: {report.out_dir}/report.html"
        )


COMMANDS = [report_cmd]
