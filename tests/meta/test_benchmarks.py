"""The benchmark plumbing (benchmarks/_common.py, scaling.py's figure): the table, the ratios, the
floors' availability checks.  The benchmark scripts themselves are not run here (each loads
models in several subprocesses); ``SMOKE=1 bash benchmarks/gpu.sh`` runs them all with tiny settings."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def common():
    return _load("_common")


def test_round_ratio_is_the_median_of_per_round_ratios(common):
    timing = {"times_s": {"a": [2.0, 10.0, 3.0], "floor": [1.0, 4.0, 3.0]}}
    # per round 2.0, 2.5, 1.0 -> median 2.0 (the ratio of medians would be 3.0 / 3.0 = 1.0)
    assert common.round_ratio(timing, "a", "floor") == 2.0
    r = common.ratios(timing, {"a": "floor"})
    assert r == {"a": 2.0, "floor": 1.0}


def test_table_says_whether_each_target_is_met(common):
    rows = [
        {"mode": "hf_eager", "median_s": 1.0, "ratio": 1.0, "floor": "hf_eager"},
        {"mode": "census", "median_s": 1.1, "ratio": 1.10, "floor": "hf_eager", "target": 1.15, "peak_MiB": 900.0, "extra_MiB": 12.0},
        {"mode": "census_streaming", "median_s": 2.0, "ratio": 1.60, "floor": "hf_sdpa", "target": 1.5},
        {"mode": "census_x4", "median_s": None, "peak_MiB": 950.0, "extra_MiB": 40.0},
    ]
    lines = common.table(rows)
    by_mode = {line.split()[0]: line.split() for line in lines[1:]}
    assert by_mode["census"][-3:] == ["yes", "900", "+12"]
    assert by_mode["census_streaming"][-3] == "NO"
    assert by_mode["hf_eager"][-3] == "-"
    assert by_mode["census_x4"][1:3] == ["-", "-"] and by_mode["census_x4"][-1] == "+40"


def test_census_config_refuses_a_missing_attention_mode(common, monkeypatch):
    import dataclasses

    from headlens.analyses.heads import census

    names = {f.name for f in dataclasses.fields(census.CensusConfig)}
    cfg = common.census_config(n_prompts=3, attention="eager")
    assert cfg.n_prompts == 3
    if "attention" in names:
        assert cfg.attention == "eager"
        assert common.census_config(n_prompts=3, attention="streaming").attention == "streaming"

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Old:  # a CensusConfig from before attention= existed
        n_prompts: int = 1

    monkeypatch.setattr(census, "CensusConfig", Old)
    assert common.census_config(n_prompts=2, attention="eager") == Old(n_prompts=2)
    assert common.census_config(n_prompts=2, attention="streaming") is None


def test_scaling_figure_and_memory_estimate(tmp_path):
    scaling = _load("scaling")
    rows = []
    for n in (512, 1024, 2048):
        rows.append(
            {
                "mode": "census_eager",
                "n_tokens": n,
                "seconds": n / 1000,
                "extra_MiB": n * n / 2**14,
                "memory": "cpu_peak_rss_MiB",
                "status": "ok",
            }
        )
        rows.append(
            {
                "mode": "census_streaming",
                "n_tokens": n,
                "seconds": n / 900,
                "extra_MiB": n / 64,
                "memory": "cpu_peak_rss_MiB",
                "status": "ok",
            }
        )
    rows.append({"mode": "hf_eager", "n_tokens": 4096, "status": "skipped: too big"})
    path = tmp_path / "scaling.png"
    scaling.figure(rows, path, "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shape = scaling.LLAMA
    eager = scaling._estimate_bytes("census_eager", 8192, shape, "float32")
    assert eager == 4 * shape["n_heads"] * 8192 * 8192 * 4
    assert scaling._estimate_bytes("census_streaming", 8192, shape, "float32") == 0
    assert scaling._estimate_bytes("hf_eager", 8192, shape, "bfloat16") == (shape["n_layers"] + 2) * shape["n_heads"] * 8192 * 8192 * 2


def test_report_floor_counts_the_runs_the_pruning_study_makes(tiny_model):
    """The floor's counts (ranking passes, random-order runs by first layer) are those of a real
    pruning run with the same settings (its own bookkeeping in ``info``)."""
    from collections import Counter

    from headlens.analyses.ablation.pruning import PruneConfig, run_pruning
    from headlens.analyses.measure.evalset import text_eval_set
    from headlens.analyses.stimuli.natural import eval_text

    floor = _load("report_floor")
    config = PruneConfig(step=0.3, random_seeds=2, seed=3)
    data = text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=True, n_ctx=tiny_model.n_ctx)
    result = run_pruning(tiny_model, data, config)
    passes, starts = floor.pruning_counts(tiny_model.n_layers, tiny_model.n_heads, config)
    assert passes == result.info["steps"]
    assert {str(k): v for k, v in Counter(starts).items()} == result.info["random_runs_from_layer"]
    assert len(starts) == config.random_seeds * result.info["steps"]


def test_real_model_rows_carry_the_item_7_targets(common):
    """benchmarks/real_model.py (issue 45 item 7): each ratio against its floor and target, memory and system share."""
    real = _load("real_model")
    paired = {
        "medians_s": {"hf_eager": 1.0, "census": 1.05, "hf_fwd": 0.5, "hf_fwd_bwd": 1.5, "eap_ig": 12.0, "exact_top": 30.0},
        "ratios": {"census": 1.05, "hf_fwd_bwd": 3.0, "eap_ig": 8.0, "exact_top": 60.0},
    }
    mem = {
        "hf_fwd_bwd": {"peak_MiB": 1500.0, "extra_MiB": 1000.0},
        "circuit": {"peak_MiB": 4000.0, "extra_MiB": 3500.0, "system_share": 0.02},
    }
    rows = {r["mode"]: r for r in real._rows(mem, paired)}
    assert rows["census"]["target"] == 1.1 and rows["eap_ig"]["target"] == 10.0 and rows["exact_top"]["target"] == 100.0
    assert rows["circuit_memory"]["ratio"] == 3.5 and rows["circuit_memory"]["target"] == 3.0
    assert rows["circuit_system"]["ratio"] == 0.02
    met = {line.split()[0]: line.split()[-3] for line in common.table(list(rows.values()))[1:]}
    assert met["census"] == "yes" and met["circuit_memory"] == "NO"
