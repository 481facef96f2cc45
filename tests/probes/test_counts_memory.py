"""Every count bounded by the memory it needs on this model, before any work, in one line (issue 46
item 10): ``circuit --steps 99999999999`` grew to 12 GB in 66 s (no bound; IG's alphas a list of
that length), ``circuit --n-bootstrap`` had no edges x resamples check, ``classify --evidence-n``
no upper bound."""

from __future__ import annotations

import pytest

import headlens
from headlens.probes import counts
from headlens.probes.counts import memory_budget
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli


def _error_line(result) -> str:
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("headlens: error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_the_budget_is_at_most_what_the_machine_has_available():
    with open("/proc/meminfo", encoding="ascii") as fh:
        available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    assert 0 < memory_budget() <= available * 1.25  # what is available moves a little between the two reads


def test_circuit_steps_past_the_count_bound_is_one_line_exit_2(tiny_checkpoint, tmp_path, runner):
    out = tmp_path / "never"
    args = ["circuit", "--model", str(tiny_checkpoint), "--builtin", "induction", "--steps", "99999999999", "--out", str(out), "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--steps 99999999999: at most 1,000,000" in _error_line(result)
    assert not out.exists()


def test_circuit_n_bootstrap_is_bounded_by_edges_times_resamples(tiny_model, tmp_path, runner, tiny_checkpoint, monkeypatch):
    """With a 64 MiB budget: 1,000,000 resamples of the tiny graph's edges need GiBs; refused before a pair is built."""
    monkeypatch.setattr(counts, "memory_budget", lambda device=None: 64 * 2**20)

    def no_pairs(*args, **kwargs):
        raise AssertionError("pairs were built before the bootstrap's memory check")

    from headlens.reports.api import circuit as circuit_api

    monkeypatch.setattr(circuit_api, "builtin_task", no_pairs)
    with pytest.raises(InputError, match=r"^n_bootstrap=1000000: needs about [\d.,]+ GiB of memory, .*; at most [\d,]+$"):
        headlens.circuit(tiny_model, builtin="induction", n_bootstrap=1_000_000)
    out = tmp_path / "never"
    args = ["circuit", "--model", str(tiny_checkpoint), "--builtin", "induction", "--n-bootstrap", "1000000", "--out", str(out), "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--n-bootstrap 1000000: needs about" in _error_line(result)
    assert not out.exists()


@pytest.mark.parametrize(
    ("n", "words"),
    [
        ("2000000", "evidence items (--evidence-n 2000000): at most 1,000,000"),  # before the model loads
        ("100000", "evidence items (--evidence-n 100000): needs about"),  # 41 positions x 50,257 logits each: TiBs
    ],
)
def test_classify_evidence_n_is_bounded_before_the_census(tmp_path, runner, n, words):
    out = tmp_path / "never"
    args = ["classify", "--model", "demo", "--n-prompts", "4", "--evidence", "--evidence-n", n, "--out", str(out), "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert words in _error_line(result)
    assert not out.exists()


def test_on_a_gpu_the_budget_is_its_free_memory(monkeypatch):
    """``torch.cuda.mem_get_info`` of the device (a stand-in torch here: no GPU on the test machine)."""
    import sys
    from types import SimpleNamespace

    fake = SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda device: (3 * 2**30, 80 * 2**30)), device=lambda name: name)
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert memory_budget("cuda:0") == 3 * 2**30
    with pytest.raises(InputError, match=r"needs about 4\.0 GiB of memory, more than the 3\.0 GiB \(free on the GPU\)"):
        counts.check_count("n", 4, bytes_each=2**30, device="cuda:0")
    assert memory_budget("cpu") != 3 * 2**30


def test_patch_n_resamples_is_bounded_by_heads_times_positions_times_resamples(tiny_model, monkeypatch):
    """per_position: 8 heads x ~20 positions x 1,000,000 resamples x 24 bytes: GiBs, refused (64 MiB budget) before any forward."""
    monkeypatch.setattr(counts, "memory_budget", lambda device=None: 64 * 2**20)
    from headlens.reports.api import patch as patch_api

    def no_forward(*args, **kwargs):
        raise AssertionError("patching ran before the bootstrap's memory check")

    monkeypatch.setattr(patch_api, "run_patching", no_forward)
    with pytest.raises(InputError, match=r"^n_resamples=1000000: needs about [\d.,]+ GiB of memory"):
        headlens.patch(tiny_model, builtin="induction", n_pairs=8, per_position=True, n_resamples=1_000_000)
