"""`headlens patch --dla` on a model DLA refuses is refused before any patching runs (issue 22 review, F11)."""

from __future__ import annotations


def test_dla_refusal_comes_before_patching(runner, tmp_path, tiny_checkpoint, monkeypatch):
    from headlens.probes.errors import UnsupportedModelError
    from headlens.reports.api import patch as study
    from headlens.reports.cli.main import cli

    patched = []

    def refuse(*a, **k):
        raise UnsupportedModelError(
            "direct logit attribution: the components do not sum to the model's logit difference (a logit softcap?)"
        )

    monkeypatch.setattr(study, "run_dla", refuse)
    monkeypatch.setattr(study, "run_patching", lambda *a, **k: patched.append(1))
    res = runner.invoke(
        cli,
        [
            "patch",
            "--model",
            str(tiny_checkpoint),
            "--device",
            "cpu",
            "--builtin",
            "induction",
            "--n-pairs",
            "4",
            "--dla",
            "--out",
            str(tmp_path / "o"),
            "-q",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "logit softcap" in res.output and len(res.output.strip().splitlines()) == 1
    assert not patched  # refused before the first patch
