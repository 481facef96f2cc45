"""``classify --evidence --evidence-seq-len 128`` on the demo (1 + 2T = 257 positions past its
256-token context) was an IndexError traceback after the census files were written, and 100000 was
refused only after the census (issue 46 item 13).  Now: one line, exit 2, before the census, and
nothing in ``--out``."""

from __future__ import annotations

import pytest

from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli


@pytest.mark.parametrize("T", ["128", "100000"])
def test_an_evidence_seq_len_past_the_context_is_refused_before_the_census(tmp_path, runner, T):
    out = tmp_path / "census"
    args = ["classify", "--model", "demo", "--n-prompts", "4", "--evidence", "--evidence-seq-len", T, "--out", str(out), "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("headlens: error:")]
    assert len(errors) == 1, result.output
    assert f"(--evidence-seq-len {T}:" in errors[0] and "the model's context is 256: at most 127" in errors[0], errors[0]
    assert not out.exists()


def test_the_library_checks_the_context_before_the_census(demo_model, monkeypatch):
    import headlens
    from headlens.reports.api import census as census_api

    def no_census(*args, **kwargs):
        raise AssertionError("the census ran before the evidence's context check")

    monkeypatch.setattr(census_api, "run_census", no_census)
    words = r"\(T=128: 1 prefix token\(s\), then 128 random tokens twice\); the model's context is 256: at most 127"
    with pytest.raises(InputError, match=words):
        headlens.census(demo_model, n_prompts=4, evidence=EvidenceConfig(T=128))
    EvidenceConfig(T=127).check_fits(demo_model)  # 1 + 2 x 127 = 255 fits
