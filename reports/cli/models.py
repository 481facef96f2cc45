"""``headlens models``: the models ``--model`` knows by name, what each is and where its files are."""

from __future__ import annotations

import click


@click.command("models")
def models_cmd() -> None:
    """List the named models (--model demo, --model minilm): what each is, and where its files are
    here or why it cannot be loaded.  Any Hugging Face id or local checkpoint folder works too."""
    from headlens.reports.api.named_models import named_model_list

    for m in named_model_list():
        click.echo(f"{m.name}: {m.what}")
        if m.available:
            click.echo(f"  {m.shape or 'config.json unreadable'}")
            click.echo(f"  files: {m.folder}")
        else:
            click.echo(f"  not available: {m.problem}")


COMMANDS = [models_cmd]
