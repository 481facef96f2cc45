"""``headlens capture`` says how many tensors it wrote: the number in its file, ``lengths`` included."""

from __future__ import annotations

import re

import pytest
from safetensors.torch import load_file


@pytest.mark.parametrize("what", ["q,k,v,pattern", "pattern"])
def test_capture_counts_what_it_writes(runner, tiny_checkpoint, tmp_path, what):
    from headlens.reports.cli.main import cli

    out = tmp_path / "cap"
    res = runner.invoke(
        cli,
        ["capture", "--model", str(tiny_checkpoint), "--text", "Apple raised its price target", "--what", what, "--out", str(out), "-q"],
    )
    assert res.exit_code == 0, res.output
    written = load_file(str(out / "activations.safetensors"))
    said = re.search(r"wrote (\d+) tensors \((\d+) captured \+ lengths\) for 1 prompt", res.output)
    assert said, res.output
    assert int(said.group(1)) == len(written)
    assert int(said.group(2)) == len([k for k in written if k != "lengths"])
