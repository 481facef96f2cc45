"""The census's hot path made cheaper gives the same numbers (issue 23 item 1).

* The repeated random tokens are drawn from numpy's Mersenne Twister in torch's state
  (``_randperm_prefixes``) instead of one ``torch.randperm`` of the whole vocabulary per prompt:
  compared with the torch loop, kept here as the reference.
* The census bootstraps every detector of a stimulus set in one call (one draw of resamples),
  and ``bootstrap_mean_ci`` sums resamples with one matrix product per block of columns:
  compared with the per-column implementation kept here (to 1e-12: summation order), and a
  column's interval is bit-identical whichever other columns are computed with it.
* The pass keeps results on the device and moves them once; its batches carry no decoded strings:
  every census table compared with tables stored from the code before these changes
  (``tests/data/census_reference``: planted eager and streaming, demo, a sliding-window family,
  an encoder).  Regenerate them, when a change is *meant* to move the numbers, with
  ``python tests/analyses/heads/test_census_overhead.py --regenerate`` and say so in the commit.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.stimuli.random_tokens import _randperm_prefixes, random_repeated_tokens
from tests.paths import REPO_ROOT

REFERENCE = REPO_ROOT / "tests" / "data" / "census_reference"
#: Largest difference allowed from the stored tables (summation order may change).
TABLE_ATOL = 1e-6
CASES = {
    "planted_eager": ("planted", {"n_prompts": 24, "attention": "eager"}),
    "planted_streaming": ("planted", {"n_prompts": 24, "attention": "streaming", "query_block": 16}),
    "demo": ("demo", {"n_prompts": 24}),
    "gemma2": ("gemma2", {"n_prompts": 20, "seq_len": 20, "window": 40}),
    "bert": ("bert", {"n_prompts": 20, "seq_len": 20, "window": 40}),
}


def _torch_prefixes(n: int, size: int, T: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(size, generator=g)[:T] for _ in range(n)])


@pytest.mark.parametrize(
    "n,size,T,seed",
    [(130, 50255, 63, 0), (70, 100, 50, 3), (10, 64, 64, 7), (5, 2, 2, 1), (200, 1000, 3, 99), (3, 5, 1, 2**32 - 1)],
)
def test_randperm_prefixes_equal_torch_randperm(n, size, T, seed):
    got = _randperm_prefixes(n, size, T, seed)
    assert got is not None and torch.equal(got, _torch_prefixes(n, size, T, seed))


def test_repeated_tokens_equal_the_torch_draw_and_fall_back_outside_its_range():
    allowed = torch.tensor([i for i in range(300) if i not in {0, 7}])
    for seed in (0, 5):
        got = random_repeated_tokens(40, 12, seed, 300, exclude={0, 7}, distinct=True)
        first = allowed[_torch_prefixes(40, len(allowed), 12, seed)]
        assert torch.equal(got, torch.cat([first, first], dim=1))
    assert _randperm_prefixes(3, 300, 12, -1) is None and _randperm_prefixes(3, 300, 12, 2**32) is None
    got = random_repeated_tokens(3, 12, 2**32, 300, distinct=True)  # torch's own draw
    first = _torch_prefixes(3, 300, 12, 2**32)
    assert torch.equal(got, torch.cat([first, first], dim=1))


def _bootstrap_per_column(values, *, n_resamples=1000, level=0.95, seed=0, chunk=200):
    """bootstrap_mean_ci as it was written before issue 23 (one matrix-vector product per column)."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    shape = values.shape[1:]
    flat = values.reshape(n, -1)
    finite = np.isfinite(flat)
    low = np.full(flat.shape[1], np.nan)
    high = np.full(flat.shape[1], np.nan)
    cols = np.flatnonzero(finite.sum(0) >= 2)
    if n_resamples <= 0 or n < 2 or not len(cols):
        return low.reshape(shape), high.reshape(shape)
    filled = np.where(finite, flat, 0.0)
    present = finite.astype(np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty((len(cols), n_resamples))
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=stop - start).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            for k, c in enumerate(cols):
                means[k, start:stop] = (counts @ np.ascontiguousarray(filled[:, c])) / (counts @ np.ascontiguousarray(present[:, c]))
    alpha = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(means, [alpha, 1 - alpha], axis=1)
    low[cols], high[cols] = lo, hi
    return low.reshape(shape), high.reshape(shape)


#: The block products sum in another order than one matrix-vector product per column.
BOOTSTRAP_RTOL = 1e-12


def test_bootstrap_of_a_stimulus_set_in_one_call_equals_one_call_per_detector():
    rng = np.random.default_rng(1)
    per_det = [rng.random((300, 10, 12)) for _ in range(3)]  # 360 columns: several blocks
    per_det[1][rng.random((300, 10, 12)) < 0.1] = np.nan  # NaN prompts: skipped per cell
    per_det[2][:, 1, 2] = np.nan  # an all-NaN cell: NaN interval
    per_det[2][:299, 0, 0] = np.nan  # one measured prompt: NaN interval
    lows, highs = bootstrap_mean_ci(np.stack(per_det, axis=1), n_resamples=300, seed=4)
    for i, values in enumerate(per_det):
        low, high = bootstrap_mean_ci(values, n_resamples=300, seed=4)
        np.testing.assert_array_equal(lows[i], low)  # bit-identical whatever else is computed
        np.testing.assert_array_equal(highs[i], high)
        ref_low, ref_high = _bootstrap_per_column(values, n_resamples=300, seed=4)
        np.testing.assert_allclose(low, ref_low, rtol=BOOTSTRAP_RTOL, atol=0)
        np.testing.assert_allclose(high, ref_high, rtol=BOOTSTRAP_RTOL, atol=0)
    for cell in [(0, 0), (3, 7), (9, 11)]:  # one column alone
        alone = bootstrap_mean_ci(per_det[1][:, cell[0], cell[1]][:, None], n_resamples=300, seed=4)
        assert alone[0][0] == lows[1][cell] and alone[1][0] == highs[1][cell]
    assert np.isnan(lows[2][1, 2]) and np.isnan(lows[2][0, 0]) and np.isfinite(lows[1]).all()


def _model(name: str, tmp: Path):
    from headlens.probes.loading import load_model

    if name == "demo":
        from headlens.analyses.demo import MODEL_DIR

        if not (MODEL_DIR / "model.safetensors").is_file():
            pytest.skip("the demo checkpoint is not shipped in this tree")
        return load_model(model=str(MODEL_DIR), device="cpu")
    folder = tmp / name
    if not (folder / "config.json").exists():
        if name == "planted":
            from headlens.analyses.synthetic.planted import build_planted_checkpoint

            build_planted_checkpoint(folder)
        else:
            from headlens.analyses.synthetic.families import build_family_checkpoint

            build_family_checkpoint(folder, name)
    return load_model(model=str(folder), device="cpu")


def _census_tables(case: str, tmp: Path) -> dict[str, pd.DataFrame]:
    from headlens.analyses.heads.census import CensusConfig, run_census

    name, kwargs = CASES[case]
    result = run_census(_model(name, tmp), CensusConfig(**kwargs, batch_size=8, n_bootstrap=200))
    tables = {case: result.scores}
    if result.referent is not None:
        tables[f"{case}_referent"] = result.referent
    return tables


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return tmp_path_factory.mktemp("overhead")


@pytest.mark.parametrize("case", list(CASES))
def test_census_tables_equal_the_stored_reference(case, checkpoints):
    for key, table in _census_tables(case, checkpoints).items():
        ref = pd.read_csv(REFERENCE / f"{key}.csv")
        assert list(table.columns) == list(ref.columns), key
        assert len(table) == len(ref), key
        for col in ref.columns:
            got, want = table[col], ref[col]
            if not (pd.api.types.is_numeric_dtype(want) and pd.api.types.is_numeric_dtype(got)):
                assert got.astype(str).tolist() == want.astype(str).tolist(), (key, col)
                continue
            got, want = got.to_numpy(dtype=np.float64), want.to_numpy(dtype=np.float64)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{key}.{col}: NaN cells differ")
            ok = ~np.isnan(want)
            np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=TABLE_ATOL, err_msg=f"{key}.{col}")


def _regenerate() -> None:
    import tempfile

    REFERENCE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            for key, table in _census_tables(case, Path(tmp)).items():
                table.to_csv(REFERENCE / f"{key}.csv", index=False, float_format="%.17g")


if __name__ == "__main__" and "--regenerate" in sys.argv:
    _regenerate()
