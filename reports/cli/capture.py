"""``headlens capture``, ``headlens verify`` and ``headlens tiny-model``."""

from __future__ import annotations

from pathlib import Path

import click

from headlens.analyses.heads.verify_config import DEFAULT_VERIFY_PROMPTS, VerifyConfig
from headlens.analyses.synthetic.tiny_spec import TinySpec
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import CheckFailed, InputError
from headlens.probes.outputs import check_out_dir, normal_modes
from headlens.probes.settings import SEED_MAX
from headlens.reports.cli.common import command_line, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.cli.shared import load
from headlens.reports.render.progress import progress_bars


def _prompts(text: str | None, prompts_file: str | None, *, default: str | tuple[str, ...] | None = None) -> list[str]:
    from headlens.probes.prompts import read_prompts

    if text is not None and prompts_file is not None:
        raise click.UsageError("give either --text or --prompts, not both")
    if prompts_file is not None:
        return read_prompts(prompts_file)
    if text is not None:
        if not text.strip():
            raise InputError("--text is empty")
        return [text]
    if default is not None:
        return [default] if isinstance(default, str) else list(default)
    raise click.UsageError("give --text TEXT or --prompts FILE")


@click.command("capture")
@model_options
@click.option("--text", "-t", default=None, help="One prompt.")
@click.option("--prompts", "prompts_file", default=None, help="Prompt file: one prompt a line, or JSONL with a 'text' field (.jsonl).")
@config_options(CaptureConfig, ("layers", "heads", "what", "kv_per_query_head", "prepend_bos", "batch_size", "truncate"))
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, SEED_MAX), help="Torch seed (recorded in the manifest).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def capture_cmd(model, device, dtype, revision, allow_new_weights, text, prompts_file, seed, out_dir, overwrite, quiet, **settings):
    """Capture per-head Q, K, V and attention patterns into OUT/activations.safetensors.

    Writes OUT/activations.safetensors (keys are TransformerLens hook names, plus
    'lengths'), OUT/tokens.json and OUT/manifest.json.
    """
    from headlens.probes.capture_io import saved_keys
    from headlens.reports.api.capture import ACTIVATIONS_FILE, capture

    out = check_out_dir(out_dir, overwrite=overwrite)
    texts = _prompts(text, prompts_file)
    config = config_from(CaptureConfig, settings)
    loaded = load(model, device, dtype, revision, allow_new_weights, seed=seed)
    with progress_bars("capture", quiet=quiet) as progress:
        result = capture(loaded, config, prompts=texts, seed=seed, progress=progress, command=command_line())
    result.save(out, overwrite=overwrite)
    written = saved_keys(out / ACTIVATIONS_FILE)  # counted in the file: the captured tensors plus 'lengths'
    cap = result.capture
    extra = [k for k in written if k not in cap.tensors]
    detail = f"{len(written) - len(extra)} captured" + "".join(f" + {k}" for k in extra)
    click.echo(f"wrote {len(written)} tensors ({detail}) for {len(cap.batch)} prompt(s) -> {out / ACTIVATIONS_FILE}")
    if loaded.is_encoder:
        click.echo(f"{framing_note(loaded, config.prepend_bos)}; attention is bidirectional (padding masked)")
    for line in describe_kv(cap):
        click.echo(line)


def framing_note(loaded, prepend_bos: bool) -> str:
    """``BOS on``/``BOS off`` on decoders; the special tokens around each prompt on encoders (``[CLS] ... [SEP]``)."""
    if not loaded.is_encoder:
        return f"BOS {'on' if prepend_bos else 'off'}"
    if not prepend_bos:
        return "no special tokens (--no-bos)"
    framing = loaded.framing(prepend_bos)
    return "each prompt as " + " ".join([*framing["prefix"], "...", *framing["suffix"]])


def describe_kv(cap) -> list[str]:
    """Lines that say which KV heads the k/v columns hold, when that is not simply the query heads."""
    info = cap.info
    kv_whats = [w for w in cap.what if w in ("k", "v", "rot_k")]
    if not kv_whats or info.get("n_kv_heads") == info.get("n_heads"):
        return []
    lines = [
        f"{info['family']}: {info['n_heads']} query heads share {info['n_kv_heads']} KV heads (query head h reads "
        f"KV head h // {info['n_heads'] // info['n_kv_heads']})"
    ]
    for layer, hs in cap.heads.items():
        reads = ", ".join(f"{layer}.{h}->kv{int(info['kv_map'][str(h)])}" for h in hs)
        cols = cap.kv_heads[layer]
        kind = "one column per query head" if info.get("kv_per_query_head") else "KV heads"
        lines.append(f"  layer {layer}: {','.join(kv_whats)} hold {kind} {cols} ({reads})")
    return lines


@click.command("verify")
@model_options
@click.option(
    "--text", "-t", default=None, help="Text to check on (default: two built-in prompts of different lengths, so padding is checked too)."
)
@click.option("--prompts", "prompts_file", default=None, help="Prompt file, as for capture.")
@config_options(VerifyConfig)
def verify_cmd(model, device, dtype, revision, allow_new_weights, text, prompts_file, prepend_bos, tolerance):
    """Check captured patterns against the family's own attention redone from rotated q and k, and z against pattern @ V.

    The recomputation applies what each layer does (rotary embedding, KV heads shared
    under grouped-query attention, the family's score scale, sliding window, logit
    softcap; causal or bidirectional, with the batch's padding mask); the 'applied'
    column says which.  Exits 1 when any layer is above tolerance, when attention falls
    on a masked key (padding included), or when a pattern row does not sum to 1; exits 2
    for a family whose attention headlens cannot redo.
    """
    from headlens.reports.api.verify import verify

    texts = _prompts(text, prompts_file, default=DEFAULT_VERIFY_PROMPTS)
    loaded = load(model, device, dtype, revision, allow_new_weights)
    result = verify(loaded, prompts=tuple(texts), prepend_bos=prepend_bos, tolerance=tolerance, command=command_line())
    table = result.table
    attention = ", bidirectional attention" if loaded.is_encoder else ""
    click.echo(
        f"model {model} on {loaded.device} in {str(loaded.dtype).removeprefix('torch.')}, {framing_note(loaded, prepend_bos)}{attention}"
    )
    click.echo(table.to_string(index=False, float_format=lambda x: f"{x:.2e}"))
    bad = table[~table["ok"]]
    if len(bad):
        raise CheckFailed(
            f"verify failed on layer(s) {', '.join(str(v) for v in bad['layer'])}: error above tolerance {table['tolerance'].iloc[0]:.1e}"
        )
    click.echo(
        f"verify: ok ({len(table)} layers, worst error {table[['max_err_pattern', 'max_err_z', 'max_row_sum_err']].to_numpy().max():.2e})"
    )


@click.command("tiny-model")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder for the checkpoint.")
@click.option("--layers", "n_layer", default=TinySpec.n_layer, show_default=True, type=click.IntRange(1, 48))
@click.option("--heads", "n_head", default=TinySpec.n_head, show_default=True, type=click.IntRange(1, 64))
@click.option("--d-model", default=TinySpec.d_model, show_default=True, type=click.IntRange(1, 8192))
@click.option("--n-ctx", default=TinySpec.n_ctx, show_default=True, type=click.IntRange(2, 8192))
@click.option("--seed", default=TinySpec.seed, show_default=True, type=click.IntRange(0, SEED_MAX))
@click.option(
    "--planted",
    is_flag=True,
    help="Build the planted-head checkpoint instead (2 layers x 4 heads whose roles are set by hand; see 'headlens selftest').",
)
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty folder.")
def tiny_model_cmd(out_dir, n_layer, n_head, d_model, n_ctx, seed, planted, overwrite):
    """Build a small GPT-2-shaped checkpoint (random weights, real GPT-2 tokenizer) offline."""
    from headlens.reports.api.capture import PLANTED_ROLES, planted_checkpoint, tiny_checkpoint

    if planted:
        check_out_dir(out_dir, overwrite=overwrite)
        path = normal_modes(planted_checkpoint(out_dir))
        click.echo(f"wrote the planted-head checkpoint to {Path(path)}: " + ", ".join(f"{k} {v}" for k, v in PLANTED_ROLES.items()))
        return
    if d_model % n_head:
        raise click.BadParameter(f"--d-model {d_model} must be a multiple of --heads {n_head}", param_hint="--d-model")
    check_out_dir(out_dir, overwrite=overwrite)
    path = normal_modes(tiny_checkpoint(out_dir, n_layer=n_layer, n_head=n_head, d_model=d_model, n_ctx=n_ctx, seed=seed))
    click.echo(f"wrote a {n_layer}-layer, {n_head}-head GPT-2-shaped checkpoint to {Path(path)}")


COMMANDS = [capture_cmd, verify_cmd, tiny_model_cmd]
