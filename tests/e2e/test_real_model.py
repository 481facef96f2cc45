"""The real model, SmolLM2-135M-Instruct (``--model smollm2``, tests/conftest.py's ``smollm2_model``): what
headlens prints about it must be right and readable (issue 45).

What is checked here costs little on 2 cores (the model loads once per test process): the census leads
with the specific roles and summarises the sinks, headlens' forward equals Hugging Face's, the model
does the induction task, and the docs page's script (benchmarks/real_model_page.py) runs its cheap
sections and renders.  The interventions (evidence, circuits, IOI) are proven on planted and tiny
models in their own tests; their figures on this model are on docs/real-model.md, printed by the script.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from tests.paths import REPO_ROOT

#: The census's induction heads on SmolLM2 at 20 prompts (docs/studies/census.md); at 4 prompts most are found.
KNOWN_INDUCTION = {"17.3", "17.4", "17.5", "18.6", "18.7", "20.6", "23.2", "23.7"}
#: headlens' bridge against Hugging Face's own forward (float32, same weights), logits.
BRIDGE_ATOL = 1e-4


@pytest.fixture(scope="module")
def page():
    """benchmarks/real_model_page.py, the script that prints docs/real-model.md's figures."""
    path = REPO_ROOT / "benchmarks" / "real_model_page.py"
    spec = importlib.util.spec_from_file_location("_real_model_page", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def census(smollm2_model, page):
    """The page's small census (4 prompts per set), run once for this module."""
    return page.run_census(smollm2_model, page.SMALL)[0]


def test_the_census_leads_with_specific_roles_and_summarises_the_sinks(census):
    lines = census.findings().lines
    assert len(lines) <= 40, "\n".join(lines)
    first_sink = next(i for i, line in enumerate(lines) if line.startswith("sinks:"))
    head_lines = lines[1:first_sink]
    assert len(lines) - first_sink <= 5, "\n".join(lines[first_sink:])  # the sinks in at most five lines
    assert head_lines[0].split()[1].startswith("induction"), head_lines[0]
    listed = {line.split()[0] for line in head_lines}
    assert len(KNOWN_INDUCTION & listed) >= 6, listed
    assert not any(line.split()[1] == "sink" for line in head_lines)  # a sink-only head is not listed
    heads = census.heads.set_index("name")
    assert (heads.loc[sorted(KNOWN_INDUCTION & listed), "strongest_detector"] == "induction").all()


def test_the_bridge_equals_hugging_face_and_the_model_does_induction(smollm2_model):
    from transformers import AutoModelForCausalLM

    folder = smollm2_model.gguf.checkpoint
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(0)
    body = torch.randint(1000, 20000, (1, 12), generator=gen)
    tokens = torch.cat([torch.tensor([[smollm2_model.bos_id]]), body, body], dim=1)
    with torch.no_grad():
        ours = smollm2_model.bridge(tokens)
        theirs = hf(tokens).logits
    assert torch.allclose(ours, theirs, atol=BRIDGE_ATOL, rtol=0), float((ours - theirs).abs().max())
    second = ours[0, 13:-1].log_softmax(-1).gather(-1, body[0, 1:, None])  # predicting the repeat's next token
    first = ours[0, 1:12].log_softmax(-1).gather(-1, body[0, 1:, None])
    assert second.mean() > first.mean() + 3.0, (float(first.mean()), float(second.mean()))


def test_the_real_model_page_script_runs_its_cheap_sections(smollm2_model, page, census):
    data = page.run(page.SMALL, smollm2_model, sections=page.CHEAP_SECTIONS, census=census)
    text = page.render(data)
    assert data["model"]["verify_ok"] and data["model"]["gguf"]["sha256"].startswith("b179c952")
    assert data["census"]["counts"]["induction"] >= 6 and data["composition"]["n_pairs"] > 0
    for heading in ("## The model", "## What each head does: the census", "## Previous-token heads into induction heads"):
        assert heading in text
    assert text.count("(not in this run)") == 4  # evidence, circuit, ioi, its circuit: the page's full run has them
    assert "16.0" in {r["sender"] for r in data["composition"]["prev_to_induction"]}
