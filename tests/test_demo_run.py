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
