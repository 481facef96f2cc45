"""``kv``, ``gqa`` and ``projections`` say what they do: no KV cache for an encoder, no context
beyond the model's, the group-size rule (g > 1), a ``--resume`` with nothing to resume, progress
lines without a doubled prefix, the loss's basis on stdout and in summary.md, and manifests that
record how the windows were cut."""

from __future__ import annotations

import io
import json

from headlens.reports.cli.main import cli
from headlens.reports.render.progress import ProgressBars

COMMON = ["--n-windows", "2", "--window", "24"]


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("headlens: error")]


def test_kv_refuses_an_encoder(family_checkpoint, runner, tmp_path):
    out = tmp_path / "kv.csv"
    r = runner.invoke(cli, ["kv", "-m", str(family_checkpoint("bert")), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert len(_errors(r.stderr)) == 1 and "encoder" in r.stderr and "no KV cache" in r.stderr
    assert "Traceback" not in r.output and not out.exists() and r.stdout == ""


def test_kv_refuses_a_context_beyond_the_model(tiny_checkpoint, runner, tmp_path):
    r = runner.invoke(cli, ["kv", "-m", str(tiny_checkpoint), "--context", "129"])  # n_ctx 128
    assert r.exit_code == 2
    assert len(_errors(r.stderr)) == 1 and "--context" in r.stderr and "longer than the model's context of 128 tokens" in r.stderr
    r = runner.invoke(cli, ["kv", "-m", str(tiny_checkpoint), "--context", "128"])
    assert r.exit_code == 0, r.stderr


def test_gqa_group_size_one_states_the_rule(tiny_checkpoint, runner, tmp_path):
    out = tmp_path / "g"
    r = runner.invoke(cli, ["gqa", "-m", str(tiny_checkpoint), *COMMON, "--group-sizes", "1", "--out", str(out)])
    assert r.exit_code == 2
    assert "g > 1" in r.stderr and "does not divide" not in r.stderr and "--group-sizes" in r.stderr
    assert not out.exists()  # refused before anything is written
    r = runner.invoke(cli, ["gqa", "-m", str(tiny_checkpoint), *COMMON, "--group-sizes", "3", "--out", str(out)])
    assert r.exit_code == 2 and "does not divide" in r.stderr  # 3 > 1 but not a divisor of 4


def test_progress_prefix_said_once():
    stream = io.StringIO()
    with ProgressBars("gqa", stream=stream, tty=False) as bars:
        bars("gqa", 2, 2)
        bars("census", 2, 2)
    assert stream.getvalue().splitlines() == ["gqa: 2/2", "gqa: census: 2/2"]


def _cut_ok(manifest: dict, key: str) -> None:
    data = manifest[key]["data"]
    cut = data["cut"]
    assert cut["window_includes_bos"] is True and cut["text_tokens_per_window"] == 23
    assert cut["offsets"] == [0, 23] and cut["stride"] == 23
    assert data["n_predictions"] == 2 * 23


def test_gqa_resume_without_journal_warns_and_records_the_cut(tiny_checkpoint, runner, tmp_path):
    out = tmp_path / "g"
    r = runner.invoke(
        cli, ["gqa", "-m", str(tiny_checkpoint), *COMMON, "--group-sizes", "2,4", "--grouping", "adjacent", "--resume", "--out", str(out)]
    )
    assert r.exit_code == 0, r.stderr
    warn = [line for line in r.stderr.splitlines() if "--resume" in line]
    assert len(warn) == 1 and "nothing to resume" in warn[0] and "starting afresh" in warn[0]
    assert "gqa: gqa:" not in r.stderr and "gqa: " in r.stderr  # progress lines, prefix once
    basis = "2 windows x 24 tokens (BOS + 23 text tokens; 46 predictions) of the built-in evaluation text"
    assert basis in r.stdout and basis in (out / "summary.md").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    _cut_ok(manifest, "gqa")
    assert manifest["gqa"]["data"]["basis"].startswith(basis)


def test_projections_resume_without_journal_warns_and_records_the_cut(tiny_checkpoint, runner, tmp_path):
    out = tmp_path / "p"
    r = runner.invoke(
        cli,
        [
            "projections",
            "-m",
            str(tiny_checkpoint),
            *COMMON,
            "--no-roles",
            "--layers",
            "1",
            "--kinds",
            "q=k",
            "--resume",
            "-q",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert "nothing to resume" in r.stderr
    assert "46 predictions" in r.stdout and "46 predictions" in (out / "summary.md").read_text()
    _cut_ok(json.loads((out / "manifest.json").read_text()), "projections")
