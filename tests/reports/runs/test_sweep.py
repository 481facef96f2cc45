"""``headlens sweep`` on local Ray: three tiny checkpoints, equality with ``headlens detect``,
resume after an interruption, one-line failures that leave the other tasks alone.

One local Ray instance (no dashboard, no usage reporting) serves the whole module, with one CPU: the
tasks run one after another in one worker process, so the module starts one worker where two CPUs
started two (each worker imports the library and its torch: ~5 s of CPU), and the resume after an
interruption starts one again, not two.  Tasks running side by side into one OUT are the cluster test's
(test_sweep_cluster.py: the head and the worker node) and the Ctrl-C test's (``--num-cpus 2``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from tests.helpers import assert_close

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

#: Census settings small enough for CI; the same for the sweep and for ``headlens detect``.
CENSUS = ["--detectors", "previous_token,induction", "--n-prompts", "6", "--seq-len", "20", "--window", "32"]
SWEEP = [*CENSUS, "--loss-windows", "2", "--loss-window", "32", "-q"]
STEPS = (0, 100, 200)


@pytest.fixture(scope="module")
def local_ray():
    saved = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = saved


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 'training run': three tiny GPT-2 checkpoints (different seeds) in run/step-0, step-100, step-200."""
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    root = tmp_path_factory.mktemp("sweep") / "run"
    for i, step in enumerate(STEPS):
        build_tiny_checkpoint(root / f"step-{step}", TinySpec(n_layer=2, n_head=4, d_model=64, n_ctx=128, seed=i))
    return root


@pytest.fixture(scope="module")
def swept(local_ray, run_dir, tmp_path_factory):
    from click.testing import CliRunner

    from headlens.reports.cli.main import cli
    from headlens.reports.runs.sweep.gather import read_dataset

    out = tmp_path_factory.mktemp("swept") / "out"
    res = CliRunner().invoke(cli, ["sweep", "-m", str(run_dir), *SWEEP, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, read_dataset(out)


def test_sweep_writes_one_dataset_with_every_checkpoint(swept):
    out, data = swept
    assert len(data) == len(STEPS) * 8 * 2
    assert sorted(data["step"].unique().tolist()) == list(STEPS)
    assert set(data["model"]) == {"run"} and set(data["detector"]) == {"previous_token", "induction"}
    assert (out / "dataset" / "model=run").is_dir()
    checkpoints = pd.read_csv(out / "checkpoints.csv")
    assert checkpoints["step"].tolist() == list(STEPS)
    assert bool((checkpoints["heldout_loss"] > 5).all()), checkpoints  # random weights: near log(50257) = 10.8
    assert (out / "figures" / "over_training-run.png").stat().st_size > 10_000
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tasks"] == 3 and manifest["failed"] == 0


def test_sweep_results_equal_single_detect_runs(swept, run_dir, tmp_path, runner):
    from headlens.reports.cli.main import cli

    _, data = swept
    for step in STEPS:
        table = tmp_path / f"detect-{step}.csv"
        res = runner.invoke(cli, ["detect", "-m", str(run_dir / f"step-{step}"), *CENSUS, "--device", "cpu", "--out", str(table), "-q"])
        assert res.exit_code == 0, res.output
        single = pd.read_csv(table).sort_values(["detector", "layer", "head"]).reset_index(drop=True)
        mine = data[data["step"] == step].sort_values(["detector", "layer", "head"]).reset_index(drop=True)
        assert mine[["layer", "head", "detector"]].equals(single[["layer", "head", "detector"]])
        assert (mine["n"].to_numpy() == single["n"].to_numpy()).all()
        for col in ("score", "baseline", "ci_low", "ci_high"):
            assert_close(mine[col].to_numpy().copy(), single[col].to_numpy().copy(), tol="float32", msg=f"step {step} {col}")
    # the three checkpoints are different models: a sweep that loaded one of them thrice would fail here
    s = data.pivot_table(index=["layer", "head", "detector"], columns="step", values="score")
    assert not np.allclose(s[0], s[100]) and not np.allclose(s[100], s[200])


class _Killed(Exception):
    pass


def test_interrupted_sweep_resumes_with_only_the_missing_tasks(swept, run_dir, tmp_path, runner):
    from headlens.reports.cli.main import cli
    from headlens.reports.runs.sweep.engine import check_settings, run_sweep
    from headlens.reports.runs.sweep.gather import read_dataset
    from headlens.reports.runs.sweep.plan import plan_tasks
    from headlens.reports.runs.sweep.task import is_done

    first, expected = swept
    config_json = json.loads((first / "sweep.json").read_text())
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps(config_json))  # the same settings as the finished sweep
    tasks = plan_tasks([str(run_dir)])
    from headlens.reports.cli.census_options import census_config as _census_config
    from headlens.reports.runs.sweep.plan import SweepConfig

    census = _census_config("previous_token,induction", 6, 0, 20, 32, False, 16, None)
    config = SweepConfig(census=census, loss_windows=2, loss_window=32)
    assert config.to_dict() == config_json, "the test's settings must be the CLI's"
    check_settings(out, config, overwrite=False)

    def kill(record, finished, total):
        raise _Killed  # the driver dies after the first task comes back

    with pytest.raises(_Killed):
        run_sweep(tasks, config, out, command=["test"], on_record=kill)
    done_before = {t.key for t in tasks if is_done(out, t)}
    assert 1 <= len(done_before) < len(tasks)
    res = runner.invoke(cli, ["sweep", "-m", str(run_dir), *SWEEP, "--no-figures", "--out", str(out)])
    assert res.exit_code == 0, res.output
    status = pd.read_csv(out / "tasks.csv")
    assert set(status.loc[status["status"] == "skipped", "key"]) == done_before
    assert set(status.loc[status["status"] == "done", "key"]) == {t.key for t in tasks} - done_before
    again = read_dataset(out)
    pd.testing.assert_frame_equal(again, expected, check_exact=False, rtol=1e-5, atol=1e-6)


def test_bad_tasks_fail_in_one_line_and_the_others_finish(local_ray, run_dir, tmp_path, runner):
    from headlens.reports.cli.main import cli
    from headlens.reports.runs.sweep.gather import read_dataset

    junk = tmp_path / "not-a-checkpoint"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    out = tmp_path / "out"
    res = runner.invoke(
        cli, ["sweep", "-m", str(run_dir / "step-0"), "-m", str(junk), *SWEEP, "--ablate", "--no-figures", "--out", str(out)]
    )
    assert res.exit_code == 1, res.output
    assert "1 checkpoint, 16 scores" in res.stdout and "1 of 2 tasks failed" in res.stderr, (
        res.output
    )  # one checkpoint, not "1 checkpoints"
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("headlens: error:")]
    assert any("not-a-checkpoint" in ln and "checkpoint" in ln for ln in errors), res.stderr
    assert "Traceback" not in res.output + res.stderr
    assert set(read_dataset(out)["label"]) == {"run/step-0"}
    status = pd.read_csv(out / "tasks.csv")
    assert sorted(status["status"]) == ["done", "failed"]
    # --ablate: each head zeroed alone on the held-out windows; unablated, that is the held-out loss
    ablation = pd.read_parquet(out / "ablation.parquet")
    assert len(ablation) == 8 and set(ablation["method"]) == {"zero"} and ablation["delta"].abs().max() > 0
    loss = pd.read_csv(out / "checkpoints.csv")["heldout_loss"].item()
    assert_close(ablation["unablated_value"].to_numpy().copy(), np.full(8, loss), tol="float32")


def test_unreachable_cluster_is_one_line(run_dir, tmp_path, runner):
    from headlens.reports.cli.main import cli

    res = runner.invoke(cli, ["sweep", "-m", str(run_dir), *SWEEP, "--address", "127.0.0.1:1", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_other_settings_in_the_same_folder_are_refused(swept, run_dir, runner):
    from headlens.reports.cli.main import cli

    out, _ = swept
    res = runner.invoke(cli, ["sweep", "-m", str(run_dir), *SWEEP, "--n-prompts", "7", "--out", str(out)])
    assert res.exit_code == 4 and "other settings (census)" in res.stderr, res.output + res.stderr
    # the census's attention path is a setting too (it reaches the tasks' CensusConfig)
    res = runner.invoke(cli, ["sweep", "-m", str(run_dir), *SWEEP, "--attention", "streaming", "--out", str(out)])
    assert res.exit_code == 4 and "other settings (census)" in res.stderr, res.output + res.stderr


def test_the_manifest_says_how_the_loss_windows_were_cut_and_the_loss_follows_by_hand(swept, run_dir):
    """From OUT/manifest.json alone (source text, offsets, framing ids, window) and plain transformers, the held-out loss."""
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from headlens.analyses.stimuli import eval_text

    out, _ = swept
    (windows,) = json.loads((out / "manifest.json").read_text())["heldout_loss_windows"]  # one tokenizer: one set of windows
    assert sorted(windows["labels"]) == sorted(f"run/step-{s}" for s in STEPS)
    cut = windows["cut"]
    assert windows["text"] == "built-in evaluation text" and windows["window"] == 32 and cut["window_includes_bos"] is True
    assert len(cut["offsets"]) == windows["n_windows"] == 2 and "32 tokens" in windows["basis"]
    checkpoints = pd.read_csv(out / "checkpoints.csv").set_index("step")
    for step in (0, STEPS[-1]):
        folder = run_dir / f"step-{step}"
        tok = AutoTokenizer.from_pretrained(folder)
        ids = tok(eval_text(), add_special_tokens=False)["input_ids"]
        prefix, suffix = windows["frame_ids"]
        rows = [prefix + ids[o : o + cut["text_tokens_per_window"]] + suffix for o in cut["offsets"]]
        assert all(len(r) == windows["window"] for r in rows)
        model = GPT2LMHeadModel.from_pretrained(folder).eval()
        with torch.no_grad():
            x = torch.tensor(rows)
            logits = model(x).logits[:, :-1].double()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        assert nll.numel() == 1 and windows["n_predictions"] == x[:, 1:].numel()
        assert_close(nll / x[:, 1:].numel(), torch.tensor(checkpoints.loc[step, "heldout_loss"]), tol="float32", msg=f"step {step}")
