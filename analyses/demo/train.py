"""The demo model's training recipe: a small GPT-2 trained on CPU until its heads are learned.

``headlens demo train --out DIR`` runs :func:`train` with :data:`RECIPE` and
writes a Hugging Face checkpoint folder (``config.json``, ``model.safetensors``, the
GPT-2 tokenizer), ``training_log.jsonl``, ``training_summary.json`` and, unless told not
to, ``MODEL_CARD.md`` with the head census of the result.

Everything that decides the numbers is fixed: the seed (model initialisation, data
order and the sampled softmax's negatives each use their own seeded generator), the
thread count (``RecipeConfig.threads``), no dropout, and a learning-rate schedule
defined by ``RecipeConfig.schedule_steps`` -- not by ``--steps``, which only stops the
run early. A short run therefore repeats the first steps of the full run exactly, and
its losses can be checked against the shipped ``training_log.jsonl``
(:mod:`headlens.analyses.demo.replay`).

Speed. With GPT-2's 50,257-token vocabulary the output layer dominates a small model's
cost on CPU (about 1,100 tokens/s with the full softmax), so text rows use a *sampled
softmax* (Jean et al. 2015): their targets are scored against every token that is a
text target somewhere in the batch plus ``neg_samples`` tokens drawn uniformly without
replacement, whose logits get ``log(V / neg_samples)`` added (the estimate of the rest
of the partition function). Rows of repeated random tokens are scored against the
distinct targets of those rows only. The logged ``train_loss`` is the mean over all
scored targets; every held-out loss is computed with the full softmax.

Order of learning. The first ``warm_steps`` steps see only repeated random tokens drawn
from a small, growing pool of ids: previous-token and induction heads form there within
a few hundred steps, while with text from the start (or with a third layer) they had not
formed after 1,000 to 1,500 steps in this project's pilots.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from headlens.analyses.demo.checkpoints import config_dict
from headlens.analyses.demo.data import BOS_ID, VOCAB_SIZE, BatchSampler, Corpus, build_corpus, eval_windows, gpt2_tokenizer
from headlens.analyses.demo.losses import full_loss, sampled_softmax_loss, unigram_loss
from headlens.analyses.demo.monitor import head_monitor, monitor_stimuli
from headlens.analyses.demo.recipe import RECIPE, RecipeConfig, TrainRun
from headlens.analyses.stimuli import eval_text
from headlens.probes.outputs import atomic_write
from headlens.probes.scoped import keeps_torch_rng, keeps_torch_threads

__all__ = ["build_model", "train", "lr_at"]


@keeps_torch_rng
def build_model(config: RecipeConfig) -> Any:
    """A freshly initialised GPT-2 with the recipe's shape, seeded."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.default_generator.manual_seed(config.seed)  # the caller's generator state comes back (keeps_torch_rng)
    cfg = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=config.n_ctx,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=BOS_ID,
        eos_token_id=BOS_ID,
        tie_word_embeddings=True,
        initializer_range=config.init_std,
    )
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        model.transformer.wte.weight.normal_(0.0, config.wte_std)
        if config.pos_init == "sinusoidal":
            model.transformer.wpe.weight.copy_(_sinusoids(config.n_ctx, config.d_model) * (config.wpe_std / math.sqrt(0.5)))
        elif config.pos_init == "normal":
            model.transformer.wpe.weight.normal_(0.0, config.wpe_std)
        else:
            raise ValueError(f"unknown pos_init {config.pos_init!r}")
    model.set_attn_implementation("eager")  # the monitor reads attention patterns; at this size eager costs nothing
    return model


def _sinusoids(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
    out = torch.zeros(n, d, dtype=torch.float64)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq)
    return out.float()


def lr_at(step: int, config: RecipeConfig) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``min_lr_frac * lr`` at ``schedule_steps`` (step counts from 1)."""
    if step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    span = max(1, config.schedule_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.min_lr_frac
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def _param_groups(model: Any, weight_decay: float, embed_lr_scale: float = 1.0) -> list[dict[str, Any]]:
    """Matrices (decayed), embeddings (the tied unembedding included; not decayed, own
    learning-rate scale), biases and layer norms (not decayed)."""
    decay, embed, rest = [], [], []
    for name, p in model.named_parameters():
        if "wte" in name or "wpe" in name:
            embed.append(p)
        elif p.ndim == 2:
            decay.append(p)
        else:
            rest.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay, "lr_scale": 1.0},
        {"params": embed, "weight_decay": 0.0, "lr_scale": embed_lr_scale},
        {"params": rest, "weight_decay": 0.0, "lr_scale": 1.0},
    ]


def _versions() -> dict[str, str]:
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


@dataclass(kw_only=True)
class _Run:
    """What one training run carries from step to step: the model, its optimizer, the data
    sampler and the negatives' generator, the evaluation sets, the log and the token count."""

    config: RecipeConfig
    model: Any
    opt: torch.optim.Optimizer
    sampler: BatchSampler
    neg_gen: torch.Generator
    held: torch.Tensor
    train_probe: torch.Tensor
    tokenizer: Any
    stim: Any
    on_log: Callable[[dict[str, Any]], None] | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    t_start: float = field(default_factory=time.perf_counter)

    def evaluate(self, row: dict[str, Any]) -> None:
        self.model.eval()
        row["heldout_loss"] = round(full_loss(self.model, self.held), 6)
        row["train_eval_loss"] = round(full_loss(self.model, self.train_probe), 6)
        row.update(head_monitor(self.model, self.stim))
        self.model.train()

    def emit(self, row: dict[str, Any]) -> None:
        row["elapsed_s"] = round(time.perf_counter() - self.t_start, 2)
        self.rows.append(row)
        if self.on_log is not None:
            self.on_log(row)

    def resume(self, state_path: Path) -> int:
        """Load the state a run of the same recipe wrote; the first step still to run."""
        state = torch.load(state_path, weights_only=False)
        if state["recipe"] != config_dict(self.config):
            raise ValueError(f"{state_path} was written by another recipe; delete it to start afresh")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sampler.gen.set_state(state["sampler_gen"])
        self.sampler.step = state["sampler_step"]
        self.neg_gen.set_state(state["neg_gen"])
        self.rows.extend(state["log"])
        self.tokens = state["tokens"]
        self.t_start -= state["elapsed_s"]
        return state["step"] + 1

    def save_state(self, state_path: Path, step: int) -> None:
        state = {
            "recipe": config_dict(self.config),
            "step": step,
            "tokens": self.tokens,
            "elapsed_s": time.perf_counter() - self.t_start,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "sampler_gen": self.sampler.gen.get_state(),
            "sampler_step": self.sampler.step,
            "neg_gen": self.neg_gen.get_state(),
            "log": self.rows,
        }
        atomic_write(state_path, lambda tmp: torch.save(state, tmp))

    def step(self, step: int) -> dict[str, Any]:
        """One optimizer step; its log row (before any evaluation)."""
        config, model, opt = self.config, self.model, self.opt
        lr = lr_at(step, config)
        for group in opt.param_groups:
            group["lr"] = lr * group["lr_scale"]
        warm = step <= config.warm_steps
        batch = self.sampler.next(config.warm_kinds if warm else config.kinds, score_first_copy=config.score_first_copy and not warm)
        target_row = torch.arange(batch.tokens.shape[0])[:, None].expand_as(batch.loss_mask)[batch.loss_mask]
        kind_rows = {
            k: torch.isin(target_row, torch.tensor([i for i, kk in enumerate(batch.kinds) if kk == k])) for k in sorted(set(batch.kinds))
        }
        hidden = model.transformer(input_ids=batch.tokens).last_hidden_state[:, :-1]
        synthetic = torch.tensor([k == "random" for k in batch.kinds])[target_row]
        h, y = hidden[batch.loss_mask], batch.tokens[:, 1:][batch.loss_mask]
        wte = model.transformer.wte.weight
        per_target = torch.empty(y.shape[0], dtype=h.dtype)
        if bool((~synthetic).any()):
            per_target[~synthetic] = sampled_softmax_loss(
                h[~synthetic], wte, y[~synthetic], config.neg_samples, self.neg_gen, reduction="none"
            )
        if bool(synthetic.any()):
            per_target[synthetic] = sampled_softmax_loss(h[synthetic], wte, y[synthetic], 0, None, reduction="none")
        loss = per_target.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        self.tokens += batch.tokens.numel()
        row = {"step": step, "tokens": self.tokens, "train_loss": round(loss.item(), 6)}
        per_kind = per_target.detach()
        for kind, rows_of_kind in kind_rows.items():
            row[f"train_loss_{kind}"] = round(float(per_kind[rows_of_kind].mean()), 6)
        row.update({"lr": round(lr, 8), "grad_norm": round(float(grad_norm), 4)})
        return row


def _start(config: RecipeConfig, corpus: Corpus, on_log: Callable[[dict[str, Any]], None] | None) -> _Run:
    """A fresh run of the recipe: the model, its optimizer, the seeded sampler and negatives, the evaluation sets."""
    tokenizer = gpt2_tokenizer()
    model = build_model(config)
    model.train()
    sampler = BatchSampler(
        corpus.train,
        config.kinds,
        config.seq_len,
        seed=config.seed,
        random_span=config.random_span,
        random_len=config.random_len,
        vocab_schedule=config.vocab_schedule,
    )
    neg_gen = torch.Generator().manual_seed(config.seed + 1)
    opt = torch.optim.AdamW(
        _param_groups(model, config.weight_decay, config.embed_lr_scale), lr=config.lr, betas=config.betas, eps=1e-8, fused=True
    )
    return _Run(
        config=config,
        model=model,
        opt=opt,
        sampler=sampler,
        neg_gen=neg_gen,
        held=eval_windows(corpus.heldout, config.seq_len, config.eval_windows),
        train_probe=eval_windows(corpus.train, config.seq_len, config.eval_windows),
        tokenizer=tokenizer,
        stim=monitor_stimuli(tokenizer),
        on_log=on_log,
    )


@keeps_torch_threads
def train(
    config: RecipeConfig = RECIPE,
    *,
    steps: int | None = None,
    eval_every: int | None = None,
    on_log: Callable[[dict[str, Any]], None] | None = None,
    state_file: str | Path | None = None,
    state_every: int = 250,
    checkpoint_every: int = 0,
    on_checkpoint: Callable[[int, Any, dict[str, Any]], None] | None = None,
) -> TrainRun:
    """Train the demo model; returns the model (eval mode), the log rows and a summary.

    ``steps`` stops after that many steps (default ``config.schedule_steps``) without
    changing the schedule. ``eval_every=0`` skips every evaluation (the final one too).
    ``on_log`` is called with each log row as it is made.

    ``state_file``: every ``state_every`` steps the whole training state (weights,
    optimizer, both generators, the log so far) is written there atomically, and a run
    given an existing ``state_file`` of the same recipe goes on from it; the resumed run
    computes exactly what an uninterrupted one would.

    ``on_checkpoint(step, model, row)`` is called at step 0 (unless resuming) and every
    ``checkpoint_every`` steps (0: never) after the step's log row is made, to keep the
    weights of that step (``headlens demo train --save-every``); the model must not be changed.
    """
    steps = config.schedule_steps if steps is None else steps
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    eval_every = config.eval_every if eval_every is None else eval_every
    torch.set_num_threads(config.threads)  # the recipe's count; the caller's comes back (keeps_torch_threads)
    t0 = time.perf_counter()
    corpus = build_corpus()
    data_s = time.perf_counter() - t0
    run = _start(config, corpus, on_log)
    state_path = Path(state_file) if state_file is not None else None
    if state_path is not None and state_path.is_file():
        first = run.resume(state_path)
    else:
        first = 1
        row0: dict[str, Any] = {"step": 0, "tokens": 0, "train_loss": None, "lr": 0.0}
        if eval_every:
            run.evaluate(row0)
        run.emit(row0)
        if checkpoint_every and on_checkpoint is not None:
            on_checkpoint(0, run.model, row0)
    for step in range(first, steps + 1):
        row = run.step(step)
        if eval_every and (step % eval_every == 0 or step == steps):
            run.evaluate(row)
        run.emit(row)
        if checkpoint_every and on_checkpoint is not None and step % checkpoint_every == 0:
            on_checkpoint(step, run.model, row)
        if state_path is not None and step % state_every == 0 and step < steps:
            run.save_state(state_path, step)
    train_s = time.perf_counter() - run.t_start
    run.model.eval()
    final = _final_losses(run.model, corpus, run.tokenizer, config) if eval_every else {}
    summary = {
        "recipe": config_dict(config),
        "steps": steps,
        "tokens": run.tokens,
        "n_params": sum(p.numel() for p in run.model.parameters()),
        "train_wall_s": round(train_s, 1),
        "data_build_s": round(data_s, 1),
        "data": corpus.describe(),
        "final": final,
        "versions": _versions(),
        "platform": platform.platform(),
    }
    return TrainRun(model=run.model, log=run.rows, summary=summary, corpus=corpus)


def _final_losses(model: Any, corpus: Corpus, tokenizer: Any, config: RecipeConfig) -> dict[str, Any]:
    """Full-softmax losses on the whole held-out split and on the evaluation text, with the unigram model's."""
    held = eval_windows(corpus.heldout, config.seq_len)
    text_ids = torch.tensor(tokenizer(eval_text(), add_special_tokens=False, verbose=False)["input_ids"], dtype=torch.long)
    text = eval_windows(text_ids, config.seq_len)
    return {
        "heldout_windows": int(held.shape[0]),
        "heldout_targets": int(held[:, 1:].numel()),
        "heldout_loss": round(full_loss(model, held), 4),
        "heldout_unigram_loss": round(unigram_loss(corpus.train, held), 4),
        "eval_text_windows": int(text.shape[0]),
        "eval_text_targets": int(text[:, 1:].numel()),
        "eval_text_loss": round(full_loss(model, text), 4),
        "eval_text_unigram_loss": round(unigram_loss(corpus.train, text), 4),
    }
