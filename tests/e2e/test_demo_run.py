"""``headlens demo run``: the main job's five steps in one process (scripts/demo.sh), each parsed and
run as its own command line would be."""

from __future__ import annotations

import click
from click.testing import CliRunner

from headlens.reports.cli.demo import MAIN_JOB, demo_group
from headlens.reports.cli.main import cli


def test_each_step_is_a_valid_command_line_of_the_real_commands(tmp_path):
    """Every step parses against the real ``headlens`` group (options, choices, required flags)."""
    for line in MAIN_JOB:
        args = [a.format(out=str(tmp_path)) for a in line]
        with cli.make_context("headlens", list(args)) as ctx:
            name, command, rest = cli.resolve_command(ctx, args)
            assert command is not None and name == args[0]
            with command.make_context(name, rest, parent=ctx) as sub:
                if isinstance(command, click.Group):
                    assert command.resolve_command(sub, rest)[1] is not None
    assert [line[0] for line in MAIN_JOB] == ["verify", "capture", "classify", "demo", "report"]


def test_run_invokes_the_steps_in_order_with_their_arguments(tmp_path):
    """Under a group whose verify/capture/classify/report record their arguments; ``demo heldout`` is the real one."""
    calls: list[tuple[str, tuple[str, ...]]] = []

    def recorder(name: str) -> click.Command:
        @click.command(name, context_settings={"ignore_unknown_options": True})
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def record(args: tuple[str, ...]) -> None:
            calls.append((name, args))

        return record

    root = click.Group("headlens", commands=[*(recorder(n) for n in ("verify", "capture", "classify", "report")), demo_group])
    out = tmp_path / "demo-out"
    res = CliRunner().invoke(root, ["demo", "run", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert [name for name, _ in calls] == ["verify", "capture", "classify", "report"]
    assert calls[2][1] == ("--model", "demo", "--out", f"{out}/census", "--overwrite")
    assert (out / "heldout.txt").stat().st_size > 100_000
    assert "demo: headlens demo heldout --out" in res.output and "demo: done in" in res.output


#: The main job's shape on the session's tiny checkpoint (``{model}``): every step that loads the model,
#: the report quick and without the stages that do not read the census (seconds, not a minute).
TINY_JOB: tuple[tuple[str, ...], ...] = (
    ("verify", "--model", "{model}"),
    ("capture", "--model", "{model}", "--text", "Apple raised its price target", "--out", "{out}/capture", "--overwrite"),
    ("classify", "--model", "{model}", "--out", "{out}/census", "--overwrite"),
    (
        "report",
        "--model",
        "{model}",
        "--quick",
        "--skip",
        "sinks,ablation_zero,ablation_mean,pruning,examples,design",
        "--out",
        "{out}/report",
        "--overwrite",
    ),
)


def _counting(monkeypatch, module, name: str) -> list[int]:
    """Count the calls of ``module.name`` (still calling it)."""
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _files(root) -> dict[str, bytes]:
    """Every file under ``root`` by relative path; tables and summaries with their bytes (PNG and
    manifests carry times and paths: only their presence is compared)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.suffix in (".csv", ".md") and p.name != "report.md" else b""
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_run_loads_the_model_once_and_writes_what_the_separate_commands_write(tiny_checkpoint, tmp_path, monkeypatch):
    """The steps run one by one (each its own invocation, as five processes would) boot the model four times
    and compute the census twice (classify, the report's census stage); ``demo run`` boots it once and its
    report reuses classify's census, with the same files and the same tables byte for byte."""
    import headlens.probes.loading as loading
    import headlens.reports.cli.demo as demo
    import headlens.reports.runs.report.stage_census as stage_census

    job = tuple(tuple(a.replace("{model}", str(tiny_checkpoint)) for a in line) for line in TINY_JOB)
    boots = _counting(monkeypatch, loading, "boot")
    stage_censuses = _counting(monkeypatch, stage_census, "census")

    alone = tmp_path / "alone"
    for line in job:
        res = CliRunner().invoke(cli, [a.format(out=alone) for a in line])
        assert res.exit_code == 0, (line, res.output)
    assert (len(boots), len(stage_censuses)) == (4, 1)

    boots.clear()
    stage_censuses.clear()
    monkeypatch.setattr(demo, "MAIN_JOB", job)
    together = tmp_path / "together"
    res = CliRunner().invoke(cli, ["demo", "run", "--out", str(together)])
    assert res.exit_code == 0, res.output
    assert len(boots) == 1, f"the model booted {len(boots)} times"
    assert stage_censuses == [], "the report's census stage computed a census of its own instead of classify's"
    assert "the model loaded 1 time)" in res.output and "reusing the census computed earlier" in res.output

    a, b = _files(alone), _files(together)
    assert sorted(a) == sorted(b)
    assert "report/census/scores.csv" in a and "census/roles.csv" in a
    assert [k for k in a if a[k] != b[k]] == []
    # the report's roles are classify's
    assert (together / "report/census/roles.csv").read_bytes() == (together / "census/roles.csv").read_bytes()


def test_the_report_computes_its_own_census_when_classify_ran_with_other_settings(tiny_checkpoint, tmp_path, monkeypatch):
    """classify with --n-prompts 20 is not the report's census (100 prompts): the stage computes its own; the model still loads once."""
    import headlens.probes.loading as loading
    import headlens.reports.cli.demo as demo
    import headlens.reports.runs.report.stage_census as stage_census

    job = [tuple(a.replace("{model}", str(tiny_checkpoint)) for a in line) for line in TINY_JOB]
    job[2] = (*job[2][:3], "--n-prompts", "20", *job[2][3:])
    boots = _counting(monkeypatch, loading, "boot")
    stage_censuses = _counting(monkeypatch, stage_census, "census")
    monkeypatch.setattr(demo, "MAIN_JOB", tuple(job))
    res = CliRunner().invoke(cli, ["demo", "run", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (len(boots), len(stage_censuses)) == (1, 1)
    assert "reusing the census" not in res.output
