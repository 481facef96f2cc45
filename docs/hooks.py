"""mkdocs hooks (``hooks:`` in mkdocs.yml): pages generated at build time from the code itself.

- ``<!-- cli-reference -->`` on a page becomes the reference of every ``headlens`` command, read from
  the click commands named in :data:`headlens.reports.cli.main.COMMANDS` (usage, help text, and each
  option as ``headlens CMD -h`` prints it, defaults and ranges included): nothing is copied by hand.
- ``<!-- columns: Result -->`` (or ``Result.table``) becomes the tables of that result's columns
  (name, dtype, meaning, when present) from the schema the result declares (:func:`column_tables`).
- A Python fence's own options (```` ```python skip="why" ````) are for the docs' tests
  (``tests/meta/test_docs_blocks.py``); they are dropped from the fence before Markdown sees it.
"""

from __future__ import annotations

import html
import inspect
import re
from typing import Any

import click

#: ```` ```python skip="..." ```` (any key="value" options after the language): the options are removed here.
FENCE_OPTIONS = re.compile(r'^([ \t]*```(?:python3?|py))((?:[ \t]+[\w-]+="[^"]*")+)[ \t]*$', re.MULTILINE)
CLI_MARKER = re.compile(r"^<!-- cli-reference -->[ \t]*$", re.MULTILINE)
COLUMNS_MARKER = re.compile(r"^<!-- columns: ([\w.]+) -->[ \t]*$", re.MULTILINE)


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
    ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
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

    root = click.Context(cli, info_name="headlens", **cli.context_settings)  # -h as well as --help, as the command has
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


def column_tables(spec: str) -> str:
    """The column tables of ``Result`` (every table it has) or of ``Result.table`` (one), e.g.
    ``CensusResult`` or ``CensusResult.evidence``: from the schema the result declares
    (``headlens.X.schema()``, ``headlens.reports.api.schema``), which also gives every saved table
    its dtypes and is checked against real runs by ``tests/reports/api/test_schema.py``."""
    import headlens

    cls_name, _, only = spec.partition(".")
    result_cls = getattr(headlens, cls_name, None)
    if result_cls is None or not hasattr(result_cls, "schema"):
        raise LookupError(f"<!-- columns: {spec} -->: headlens.{cls_name} is not a result with a schema")
    tables = result_cls.schema()
    if only and only not in tables:
        raise LookupError(f"<!-- columns: {spec} -->: {cls_name} has no table {only!r} (it has {', '.join(tables)})")
    out = []
    for name, table in tables.items():
        if only and name != only:
            continue
        if not only:
            out += [f"### `{table.file}`", ""]
        out += [f"One row per {cell(table.row)}." + (f" Present {cell(table.when)}." if table.when else ""), ""]
        optional = any(c.when for c in table.columns)
        out += ["| column | dtype | meaning |" + (" present |" if optional else ""), "|---|---|---|" + ("---|" if optional else "")]
        for c in table.columns:
            out.append(f"| `{c.name}` | {c.dtype} | {cell(c.meaning)} |" + (f" {cell(c.when) or 'always'} |" if optional else ""))
        out.append("")
    return "\n".join(out)


def strip_fence_options(markdown: str) -> str:
    return FENCE_OPTIONS.sub(lambda m: m.group(1), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = strip_fence_options(markdown)
    if CLI_MARKER.search(markdown):
        markdown = CLI_MARKER.sub(lambda _: cli_reference(), markdown)
    if COLUMNS_MARKER.search(markdown):
        markdown = COLUMNS_MARKER.sub(lambda m: column_tables(m.group(1)), markdown)
    return markdown
