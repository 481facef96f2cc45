"""The manual (``mkdocs.yml``, ``docs/``) builds with ``mkdocs build --strict``: a docstring, page or
link that mkdocs or mkdocstrings warns about fails the suite.

The build runs into a temporary folder (nothing in the repository is written); a planted broken
page proves that ``--strict`` turns a warning into a failure. The public names of ``headlens`` (its
``__all__``) must each have an entry in the API reference; no page loads anything from the network
(scripts, styles, images, fonts: the site works offline); code is highlighted at build time; the
CLI reference holds every command and option that click defines; the README's links lead to pages
that exist.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import logging
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mkdocstrings  # noqa: F401 - the build's plugin (the test extra): missing, this file fails here, not in a subprocess
import pytest

import headlens
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
MKDOCS_YML = ROOT / "mkdocs.yml"
DOCS = ROOT / "docs"
#: ``headlens`` names that are not API objects: the three layers and the version string.
NOT_DOCUMENTED = {"probes", "analyses", "reports", "__version__"}
DIRECTIVE = re.compile(r"^:::\s*(\S+)", re.MULTILINE)
#: A resource a page would load from elsewhere: src= of any element, href= of a <link> (styles, icons), url() in CSS.
REMOTE_LOAD = re.compile(r"""(?:\bsrc=["']|<link\b[^>]*\bhref=["']|url\(["']?)(?:https?:)?//""", re.IGNORECASE)
#: A relative Markdown link target in the README: [text](path) or [text](path#anchor).
README_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")


@dataclass(frozen=True)
class Built:
    """One ``mkdocs build --strict``: whether it passed, and what it logged (warnings and errors)."""

    ok: bool
    log: str


class _Lines(logging.Handler):
    """Keeps the text of every record mkdocs (and its plugins, under ``mkdocs.*``) logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


@contextlib.contextmanager
def _in_folder(folder: Path) -> Iterator[None]:
    """The working folder is ``folder`` within the block (``contextlib.chdir`` is Python 3.11+; 3.10 is supported)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def build(config: Path, site: Path) -> Built:
    """``mkdocs build --strict --config-file config --site-dir site``, run in-process through mkdocs'
    own API (what its CLI calls: ``load_config(strict=True)``, the plugins' startup, ``build``), from
    the config's folder as the CLI would be. In-process saves the interpreter start and the second
    import of headlens, mkdocs and griffe that a subprocess pays (about 4 s CPU a build). Strict mode
    is mkdocs' own: ``build`` counts every warning logged under ``mkdocs`` and raises ``Abort``; the
    logger is set to INFO as the CLI sets it, so no warning is filtered out before it is counted."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    logger = logging.getLogger("mkdocs")
    lines = _Lines()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(lines)
    try:
        with _in_folder(config.parent):
            cfg = load_config(config_file=str(config), site_dir=str(site), strict=True)
            cfg.plugins.on_startup(command="build", dirty=False)
            try:
                mkdocs_build(cfg)
            finally:
                cfg.plugins.on_shutdown()
    except MkDocsException as e:  # Abort (strict mode's count, a BuildError) and config errors, as the CLI reports them
        return Built(ok=False, log="\n".join([*lines.lines, f"{type(e).__name__}: {e}"]))
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return Built(ok=True, log="\n".join(lines.lines))


def documented_paths(docs: Path = DOCS) -> list[str]:
    """Every object a ``::: path`` directive of the reference names."""
    return [m.group(1) for page in sorted(docs.rglob("*.md")) for m in DIRECTIVE.finditer(page.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = build(MKDOCS_YML, out)
    assert done.ok, f"mkdocs build --strict failed:\n{done.log}"
    return out


def test_reference_builds_strict_and_renders_every_page(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md"))
    assert pages, "docs/ holds no page"
    for page in pages:
        # mkdocs' directory URLs: docs/index.md -> index.html, docs/api/x.md -> api/x/index.html
        html_file = site / (page.parent if page.name == "index" else page) / "index.html"
        assert html_file.is_file(), f"docs/{page}.md was not rendered"
    # each directive rendered its object (mkdocstrings gives every object an anchor with its path)
    rendered = "\n".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    for path in documented_paths():
        assert f'id="{path}"' in rendered, f"::: {path} rendered no anchor"
    # the Sphinx roles of the docstrings were turned into code, never shown raw
    # (Markdown renders an unconverted role as ":class:<code>...</code>")
    raw_role = re.search(r":(?:class|func|mod|meth|data|attr|obj|exc):(?:`|<code>)", rendered)
    assert raw_role is None, f"a Sphinx role shown raw: {rendered[raw_role.start() : raw_role.start() + 80]}"


def resolve(path: str) -> object:
    """The object a dotted ``::: path`` names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_every_public_name_has_an_entry() -> None:
    """Each name of ``headlens.__all__`` is documented: some ``::: path`` is that very object."""
    public = sorted(set(getattr(headlens, "__all__", ())) - NOT_DOCUMENTED)
    documented = [resolve(path) for path in documented_paths()]
    missing = [name for name in public if not any(obj is getattr(headlens, name) for obj in documented)]
    assert not missing, f"public names of headlens without an entry in docs/api/*.md: {', '.join(missing)}"


def test_strict_build_fails_on_a_warning(tmp_path: Path) -> None:
    """A page naming an object that does not exist must fail the build (proves --strict bites)."""
    shutil.copy(MKDOCS_YML, tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    (tmp_path / "docs" / "api" / "broken.md").write_text("# Broken\n\n::: headlens.reports.api.result.NoSuchThing\n", encoding="utf-8")
    (tmp_path / ".pyright").symlink_to(ROOT / ".pyright", target_is_directory=True)  # the link tree griffe reads
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert not done.ok
    assert "NoSuchThing" in done.log


def _roles_module():
    spec = importlib.util.spec_from_file_location("griffe_roles", DOCS / "griffe_roles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_roles_become_markdown_code() -> None:
    roles = _roles_module()
    text = "See :class:`~headlens.reports.api.result.Result`, :func:`headlens.load` and :mod:`x`; ``literal``."
    assert roles.markdown_roles(text) == "See `Result`, `headlens.load` and `x`; ``literal``."


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    loads = []
    for path in sorted([*site.rglob("*.html"), *site.rglob("*.css"), *site.rglob("*.js")]):
        for m in REMOTE_LOAD.finditer(path.read_text(encoding="utf-8", errors="replace")):
            loads.append(f"{path.relative_to(site)}: {m.group(0)}...")
    assert not loads, "the site loads resources from the network:\n" + "\n".join(loads[:20])
    assert REMOTE_LOAD.search('<script src="https://cdnjs.cloudflare.com/x.js">')  # the pattern bites
    assert REMOTE_LOAD.search('<link rel="stylesheet" href="//fonts.example/x.css">')
    assert not REMOTE_LOAD.search('<a href="https://www.mkdocs.org/">')  # a link to follow is not a load


def test_code_is_highlighted_at_build_time(site: Path) -> None:
    page = (site / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert '<span class="kn">import</span>' in page, "Python blocks were not highlighted by Pygments"
    assert (site / "css" / "pygments.css").is_file()


def test_the_cli_reference_holds_every_command_and_option(site: Path) -> None:
    import click

    from headlens.reports.cli.main import COMMANDS, cli

    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    root = click.Context(cli, info_name="headlens", **cli.context_settings)  # -h as well as --help, as the command has

    def check(command: click.Command, path: list[str], parent: click.Context) -> list[str]:
        ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
        missing = [] if f"<code>{' '.join(path)}</code>" in page else [" ".join(path)]
        help_option = command.get_help_option(ctx)
        # click's own -h/--help (not one of ours) is left out here: click caches it per command on first
        # use, under the help names of whichever context used the command first in this process
        for param in [p for p in command.get_params(ctx) if p is not help_option]:
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None and f"<code>{html.escape(record[0], quote=False)}</code>" not in page:
                missing.append(f"{' '.join(path)} {record[0]}")
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                subcommand = command.get_command(ctx, sub)
                if subcommand is not None and not subcommand.hidden:
                    missing += check(subcommand, [*path, sub], ctx)
        return missing

    missing = [m for name in COMMANDS for m in check(cli.get_command(root, name), ["headlens", name], root)]  # type: ignore[arg-type]
    assert "<code>-h, --help</code>" in page, "the CLI reference does not show the help flag"
    assert not missing, f"the CLI reference lacks: {', '.join(missing)}"


def test_readme_links_lead_to_files() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = README_LINK.findall(text)
    assert targets, "the README links to no page of the manual"
    missing = sorted({t for t in targets if not (ROOT / t).exists()})
    assert not missing, f"README.md links to files that do not exist: {', '.join(missing)}"
