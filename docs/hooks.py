"""mkdocs hooks (``hooks:`` in mkdocs.yml): pages generated at build time from the code itself.

- ``<!-- cli-reference -->`` on a page becomes the reference of every ``headlens`` command, read from
  the click commands named in :data:`headlens.reports.cli.main.COMMANDS` (usage, help text, and each
  option as ``headlens CMD -h`` prints it, defaults and ranges included): nothing is copied by hand.
- ``<!-- columns: Result.table -->`` becomes the table of that result table's columns (name, dtype)
  as a run on the demo model produces them (:func:`column_rows`).
- A Python fence's own options (```` ```python skip="why" ````) are for the docs' tests
  (``tests/meta/test_docs_blocks.py``); they are dropped from the fence before Markdown sees it.
"""

from __future__ import annotations

import html
import inspect
import json
import re
from pathlib import Path
from typing import Any

import click

#: ```` ```python skip="..." ```` (any key="value" options after the language): the options are removed here.
FENCE_OPTIONS = re.compile(r'^([ \t]*```(?:python3?|py))((?:[ \t]+[\w-]+="[^"]*")+)[ \t]*$', re.MULTILINE)
CLI_MARKER = re.compile(r"^<!-- cli-reference -->[ \t]*$", re.MULTILINE)
COLUMNS_MARKER = re.compile(r"^<!-- columns: ([\w.]+) -->[ \t]*$", re.MULTILINE)
COLUMNS_FILE = Path(__file__).resolve().parent / "columns.json"


def cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped, HTML shown as written."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def help_paragraphs(text: str | None) -> str:
    """A click help text as Markdown paragraphs (click's ``\\b`` no-rewrap marker keeps its lines)."""
    if not text:
        return ""
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):
            lines = para.split("\n")[1:]
            out.append("```text\n" + "\n".join(lines) + "\n```")
        else:
            out.append(cell(para))
    return "\n\n".join(out)


def command_reference(command: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    """The Markdown of one command (and, for a group, of each of its subcommands)."""
    name = " ".join(path)
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines = [f"{'#' * min(len(path) + 1, 4)} `{name}`", "", f"```text\n{name} {usage}\n```", ""]
    if command.help:
        lines += [help_paragraphs(command.help), ""]
    records = [(p, p.get_help_record(ctx)) for p in command.get_params(ctx) if isinstance(p, click.Option)]
    records = [(p, r) for p, r in records if r is not None]
    if records:
        lines += ["| option | meaning |", "|---|---|"]
        lines += [f"| `{r[0]}` | {cell(r[1]) or ' '} |" for _, r in records]
        lines.append("")
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            subcommand = command.get_command(ctx, sub)
            if subcommand is not None and not subcommand.hidden:
                lines += command_reference(subcommand, [*path, sub], ctx)
    return lines


def cli_reference() -> str:
    """Every command of ``headlens``, in the order of :data:`COMMANDS`."""
    from headlens.reports.cli.main import COMMANDS, cli

    root = click.Context(cli, info_name="headlens")
    lines = ["## `headlens`", "", "```text\nheadlens " + " ".join(cli.collect_usage_pieces(root)) + "\n```", ""]
    lines += [help_paragraphs(cli.help), ""]
    lines += ["| option | meaning |", "|---|---|"]
    for param in cli.get_params(root):
        record = param.get_help_record(root) if isinstance(param, click.Option) else None
        if record is not None:
            lines.append(f"| `{record[0]}` | {cell(record[1])} |")
    lines.append("")
    for name in COMMANDS:
        command = cli.get_command(root, name)
        if command is None:
            raise LookupError(f"COMMANDS names {name!r}, which the headlens group cannot resolve")
        lines += command_reference(command, ["headlens", name], root)
    return "\n".join(lines)


def column_rows(spec: str) -> str:
    """The column table of ``Result.table`` (e.g. ``CensusResult.scores``) from ``docs/columns.json``,
    the columns and dtypes a run on the demo model produces (``docs/gen_columns.py`` writes it;
    ``tests/meta/test_docs_blocks.py`` checks it against the pages' own runs)."""
    columns = json.loads(COLUMNS_FILE.read_text(encoding="utf-8"))
    if spec not in columns:
        raise KeyError(f"{spec} is not in {COLUMNS_FILE.name}: run `python docs/gen_columns.py`")
    rows = [f"| `{name}` | {dtype} |" for name, dtype in columns[spec]]
    return "\n".join(["| column | dtype |", "|---|---|", *rows])


def strip_fence_options(markdown: str) -> str:
    return FENCE_OPTIONS.sub(lambda m: m.group(1), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = strip_fence_options(markdown)
    if CLI_MARKER.search(markdown):
        markdown = CLI_MARKER.sub(lambda _: cli_reference(), markdown)
    if COLUMNS_MARKER.search(markdown):
        markdown = COLUMNS_MARKER.sub(lambda m: column_rows(m.group(1)), markdown)
    return markdown
