"""The planted checkpoint: each hand-set head shows its role, and only that head does.

Checked on two loaders: Hugging Face ``GPT2LMHeadModel`` (eager attention, ``output_attentions``)
and TransformerLens ``TransformerBridge`` (``hook_pattern``), each with and without a BOS token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from headlens.analyses.synthetic.planted import (
    BOS_ID,
    N_HEAD,
    N_LAYER,
    PLANTED_ROLES,
    PlantedSpec,
    build_planted_checkpoint,
)
from headlens.analyses.synthetic.planted_weights import planted_weights

T = 100  # length of the random block that is repeated
BATCH = 4
NO_ROLE = ["0.3", "1.2", "1.3"]
ALL_HEADS = [f"{layer}.{head}" for layer in range(N_LAYER) for head in range(N_HEAD)]

Patterns = dict[str, torch.Tensor]  # head name -> [batch, query, key]
Runner = Callable[[torch.Tensor], Patterns]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def folder(planted_checkpoint):
    """The session's planted checkpoint (built once, conftest.py)."""
    return planted_checkpoint


@pytest.fixture(scope="module")
def tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def hf_model(folder):
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(str(folder), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def bridge(folder):
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(str(folder), device="cpu")


def _split(per_layer: list[torch.Tensor]) -> Patterns:
    """``[batch, head, q, k]`` per layer -> head name -> ``[batch, q, k]`` (float32, detached)."""
    return {f"{layer}.{head}": p[:, head].detach().float() for layer, p in enumerate(per_layer) for head in range(p.shape[1])}


@pytest.fixture(scope="module")
def runners(hf_model, bridge) -> dict[str, Runner]:
    """Backend name -> function from token ids to attention patterns."""

    def run_hf(tokens: torch.Tensor) -> Patterns:
        with torch.no_grad():
            out = hf_model(tokens, output_attentions=True)
        return _split(list(out.attentions))

    def run_bridge(tokens: torch.Tensor) -> Patterns:
        store: dict[int, torch.Tensor] = {}

        def keep(pattern: torch.Tensor, hook) -> None:
            store[int(hook.name.split(".")[1])] = pattern.detach().clone()

        hooks = [(f"blocks.{layer}.attn.hook_pattern", keep) for layer in range(N_LAYER)]
        with torch.no_grad():
            bridge.run_with_hooks(tokens, fwd_hooks=hooks)
        return _split([store[layer] for layer in range(N_LAYER)])

    return {"hf": run_hf, "bridge": run_bridge}


def repeated_random_tokens(bos: bool, seed: int = 0, batch: int = BATCH, length: int = T) -> torch.Tensor:
    """``x1..xT x1..xT`` with distinct random ids from 0..50255 per row, BOS-prefixed if asked."""
    torch.manual_seed(seed)
    block = torch.stack([torch.randperm(BOS_ID)[:length] for _ in range(batch)])
    tokens = torch.cat([block, block], dim=1)
    if bos:
        tokens = torch.cat([torch.full((batch, 1), BOS_ID), tokens], dim=1)
    return tokens


@pytest.fixture(
    scope="module",
    params=[("hf", False), ("hf", True), ("bridge", False), ("bridge", True)],
    ids=lambda p: f"{p[0]}-{'bos' if p[1] else 'nobos'}",
)
def repeated(request, runners):
    """(tokens, patterns, offset of the first random token) for repeated random tokens."""
    backend, bos = request.param
    tokens = repeated_random_tokens(bos)
    return tokens, runners[backend](tokens), int(bos)


# --------------------------------------------------------------------------- scores


def previous_token_attention(a: torch.Tensor) -> torch.Tensor:
    """``[batch, q - 1]``: attention of each query ``i >= 1`` on ``i - 1``."""
    i = torch.arange(1, a.shape[1])
    return a[:, i, i - 1]


def first_position_attention(a: torch.Tensor) -> torch.Tensor:
    """``[batch, q - 1]``: attention of each query ``i >= 1`` on position 0."""
    return a[:, 1:, 0]


def second_copy(offset: int) -> torch.Tensor:
    return torch.arange(offset + T, offset + 2 * T)


def duplicate_attention(a: torch.Tensor, offset: int) -> torch.Tensor:
    """``[batch, T]``: attention of each second-copy query on the earlier copy of its token."""
    i = second_copy(offset)
    return a[:, i, i - T]


def induction_attention(a: torch.Tensor, offset: int) -> torch.Tensor:
    """``[batch, T]``: attention of each second-copy query on the token after its earlier copy."""
    i = second_copy(offset)
    return a[:, i, i - T + 1]


def uniform_causal(n: int) -> torch.Tensor:
    return torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]


# --------------------------------------------------------------------------- checkpoint


def test_checkpoint_folder(folder, hf_model):
    meta = json.loads((folder / "planted.json").read_text())
    assert meta["roles"] == PLANTED_ROLES
    assert PlantedSpec(**meta["spec"]) == PlantedSpec()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    cfg = hf_model.config
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.n_positions, cfg.vocab_size) == (2, 4, 256, 256, 50257)
    assert hf_model.lm_head.weight.data_ptr() == hf_model.transformer.wte.weight.data_ptr()
    for block in hf_model.transformer.h:
        for p in block.mlp.parameters():
            assert torch.count_nonzero(p) == 0


def test_names_and_pronouns_are_single_tokens(tokenizer, folder):
    spec = PlantedSpec()
    ids = json.loads((folder / "planted.json").read_text())["design"]["token_ids"]
    assert 10 <= len(spec.male_names) and 10 <= len(spec.female_names)
    for group in ("male_names", "female_names", "male_pronouns", "female_pronouns"):
        for word, token_id in zip(getattr(spec, group), ids[group], strict=True):
            assert word.startswith(" ")
            assert tokenizer.encode(word) == [token_id], word


def test_weights_are_deterministic_in_the_seed(folder, hf_model):
    ids = json.loads((folder / "planted.json").read_text())["design"]["token_ids"]
    again = planted_weights(PlantedSpec(), ids)
    for name, param in hf_model.named_parameters():
        if name in again:
            assert torch.equal(param.detach(), again[name].float()), name
    other_seed = planted_weights(PlantedSpec(seed=1), ids)
    assert not torch.equal(other_seed["transformer.wte.weight"].float(), hf_model.transformer.wte.weight.detach())


def test_embeddings_are_mean_free_with_fixed_norms(hf_model):
    """What keeps LayerNorm from disturbing the construction."""
    wte, wpe = hf_model.transformer.wte.weight.detach(), hf_model.transformer.wpe.weight.detach()
    for table in (wte, wpe):
        assert table.mean(dim=1).abs().max() < 1e-6
        assert torch.allclose(table.norm(dim=1), torch.ones(table.shape[0]), atol=1e-5)
    assert (wte @ wpe.T).abs().max() < 1e-5  # token and position slots are orthogonal


@pytest.mark.parametrize(
    "change, error",
    [
        ({"d_model": 250}, ValueError),
        ({"d_model": 128}, ValueError),
        ({"n_ctx": 4}, ValueError),
        ({"n_ctx": 256.0}, TypeError),
        ({"seed": -1}, ValueError),
        ({"male_names": (" John", " Mary")}, ValueError),  # overlaps female_names
        ({"female_pronouns": ()}, ValueError),
        ({"male_names": " John"}, TypeError),
    ],
)
def test_spec_rejects_bad_input(change, error):
    with pytest.raises(error):
        PlantedSpec(**change)


def test_build_rejects_multi_token_names(tmp_path):
    with pytest.raises(ValueError, match="one GPT-2 token"):
        build_planted_checkpoint(tmp_path, PlantedSpec(male_names=(" John", " Bartholomew")))
    with pytest.raises(TypeError):
        build_planted_checkpoint(tmp_path, {"n_ctx": 256})  # pyright: ignore[reportArgumentType] - the wrong type is the test


# --------------------------------------------------------------------------- planted heads


def test_backends_agree(runners):
    tokens = repeated_random_tokens(bos=True, seed=5, batch=2, length=40)
    hf, tl = runners["hf"](tokens), runners["bridge"](tokens)
    for head in ALL_HEADS:
        assert torch.allclose(hf[head], tl[head], atol=1e-4), head


def test_previous_token_head(repeated):
    _, patterns, _ = repeated
    assert previous_token_attention(patterns["0.0"]).min() >= 0.9
    for head in ALL_HEADS:
        if head != "0.0":
            assert previous_token_attention(patterns[head]).mean() < 0.1, head


def test_sink_head(repeated):
    _, patterns, _ = repeated
    assert first_position_attention(patterns["0.1"]).min() >= 0.9
    for head in ALL_HEADS:
        if head != "0.1":
            assert first_position_attention(patterns[head]).mean() < 0.1, head


def test_duplicate_token_head(repeated):
    _, patterns, offset = repeated
    a = patterns["0.2"]
    assert duplicate_attention(a, offset).min() >= 0.8
    i = second_copy(offset)
    assert a[:, i, i].max() < 0.1  # own position suppressed
    for head in ALL_HEADS:
        if head != "0.2":
            assert duplicate_attention(patterns[head], offset).mean() < 0.1, head


def test_induction_head(repeated):
    _, patterns, offset = repeated
    assert induction_attention(patterns["1.0"], offset).min() >= 0.8
    for head in ALL_HEADS:
        if head != "1.0":
            assert induction_attention(patterns[head], offset).mean() < 0.1, head


def test_no_role_heads_are_uniform(repeated):
    tokens, patterns, _ = repeated
    uniform = uniform_causal(tokens.shape[1]).expand(tokens.shape[0], -1, -1)
    for head in [*NO_ROLE, "1.1"]:  # 1.1 has no pronouns to react to here
        assert torch.allclose(patterns[head], uniform, atol=1e-5), head


REFERENT_TEXTS = [
    (" John met Mary because she was late.", " she", " Mary"),
    (" Mary met John because he was late.", " he", " John"),
    (" Sarah called David and told him the news.", " him", " David"),
    (" Robert thanked Lisa for her help.", " her", " Lisa"),
    (" After Emma saw Thomas at the station, his train left.", " his", " Thomas"),
    (" George and Alice walked home, and she sang while he listened.", " she", " Alice"),
    (" George and Alice walked home, and she sang while he listened.", " he", " George"),
]


@pytest.mark.parametrize("backend", ["hf", "bridge"])
@pytest.mark.parametrize("bos", [False, True], ids=["nobos", "bos"])
def test_referent_head(runners, tokenizer, backend, bos):
    spec = PlantedSpec()
    male = {tokenizer.encode(w)[0] for w in spec.male_names}
    female = {tokenizer.encode(w)[0] for w in spec.female_names}
    pronouns = {tokenizer.encode(w)[0] for w in spec.male_pronouns + spec.female_pronouns}
    on_names: dict[str, list[float]] = {head: [] for head in ALL_HEADS}  # per pronoun query
    for text, pronoun, name in REFERENT_TEXTS:
        ids = ([BOS_ID] if bos else []) + tokenizer.encode(text)
        patterns = runners[backend](torch.tensor([ids]))
        q = ids.index(tokenizer.encode(pronoun)[0])
        same, other = (male, female) if tokenizer.encode(name)[0] in male else (female, male)
        is_same = torch.tensor([t in same for t in ids[: q + 1]])
        is_other = torch.tensor([t in other for t in ids[: q + 1]])
        a = patterns["1.1"][0]
        assert a[q, : q + 1][is_other].sum() < 0.05, (text, pronoun)
        assert a[q, ids.index(tokenizer.encode(name)[0])] >= 0.6, (text, pronoun)
        for head in ALL_HEADS:
            on_names[head].append(patterns[head][0, q, : q + 1][is_same].sum().item())
        # Other queries behave like a no-role head.
        rows = [i for i, t in enumerate(ids) if t not in pronouns]
        assert torch.allclose(a[rows], uniform_causal(len(ids))[rows], atol=1e-5)
    assert min(on_names["1.1"]) >= 0.6
    # No other head plays the referent.  Single queries can land on a name by chance (the sink
    # head when a name opens the text, or 1.0's sharp but arbitrary pattern on non-repeated text),
    # so this is judged over all the pronoun queries.
    for head in ALL_HEADS:
        if head != "1.1":
            assert sum(on_names[head]) / len(on_names[head]) < 0.3, (head, on_names[head])


def test_referent_head_without_names_is_uniform(runners, tokenizer):
    ids = tokenizer.encode(" The dog barked and she ran home.")
    a = runners["hf"](torch.tensor([ids]))["1.1"][0]
    assert torch.allclose(a, uniform_causal(len(ids)), atol=1e-5)


# --------------------------------------------------------------------------- ablation


def _second_half_loss(logits: torch.Tensor, tokens: torch.Tensor, length: int = T) -> float:
    """Mean next-token cross-entropy over the second copy of a ``length``-token block.

    Uses the last ``length`` positions' logits: position ``n - length`` holds the second copy's
    first token; it and the ones after it predict the second copy's other tokens, which an
    induction head can copy from the first copy.
    """
    logprobs = torch.log_softmax(logits[:, -length:-1].float(), dim=-1)
    return -logprobs.gather(-1, tokens[:, -length + 1 :, None]).mean().item()


@pytest.mark.parametrize("bos", [False, True], ids=["nobos", "bos"])
def test_ablating_induction_head_raises_loss_hf(hf_model, bos):
    tokens = repeated_random_tokens(bos, seed=1, batch=2)
    d_head = hf_model.config.n_embd // hf_model.config.n_head

    def loss_with(head: str | None) -> float:
        """Second-copy loss with ``head``'s z zeroed (the input slice of ``c_proj``)."""
        handle = None
        if head is not None:
            layer, index = (int(x) for x in head.split("."))

            def zero_head(module, args):
                z = args[0].clone()
                z[..., index * d_head : (index + 1) * d_head] = 0
                return (z,)

            handle = hf_model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(zero_head)
        try:
            with torch.no_grad():
                return _second_half_loss(hf_model(tokens, logits_to_keep=T).logits, tokens)
        finally:
            if handle is not None:
                handle.remove()

    clean = loss_with(None)
    induction_delta = loss_with("1.0") - clean
    no_role_deltas = {head: loss_with(head) - clean for head in NO_ROLE}
    assert clean < 1.0
    assert induction_delta > 5.0
    assert all(induction_delta > 10 * abs(d) + 1.0 for d in no_role_deltas.values()), no_role_deltas


def test_ablating_induction_head_raises_loss_bridge(bridge):
    length = 50
    tokens = repeated_random_tokens(bos=False, seed=2, batch=2, length=length)

    def loss_with(head: str | None) -> float:
        """Second-copy loss with ``head``'s ``hook_z`` zeroed."""
        hooks = []
        if head is not None:
            layer, index = (int(x) for x in head.split("."))

            def zero_head(z: torch.Tensor, hook) -> torch.Tensor:
                z = z.clone()
                z[:, :, index] = 0  # [batch, pos, head, d_head]
                return z

            hooks = [(f"blocks.{layer}.attn.hook_z", zero_head)]
        with torch.no_grad():
            return _second_half_loss(bridge.run_with_hooks(tokens, fwd_hooks=hooks), tokens, length)

    clean = loss_with(None)
    induction_delta = loss_with("1.0") - clean
    assert induction_delta > 5.0
    assert all(induction_delta > 10 * abs(loss_with(head) - clean) + 1.0 for head in NO_ROLE)
