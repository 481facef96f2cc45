"""MkDocs hook: lets mkdocstrings read ``headlens`` from the repository as it installs.

``setup.py`` maps the repository's ``probes/``, ``analyses/`` and ``reports/`` folders to
``headlens.probes``, ``headlens.analyses`` and ``headlens.reports``; ``src/headlens`` holds only
the top package.  mkdocstrings (griffe) reads source files and cannot follow that mapping, so
before each build this hook lays out a link tree in a temporary folder, ``headlens/`` with
``src/headlens``'s files and the three layer folders as symbolic links, and points the
``python`` handler's ``paths`` at it.  Nothing in the repository is written.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

LAYERS = ("probes", "analyses", "reports")

_made: list[Path] = []


def link_tree(root: Path, into: Path) -> Path:
    """Lay out ``into/headlens`` as the installed package reads, as links into ``root``; return ``into``."""
    package = into / "headlens"
    package.mkdir(parents=True)
    for entry in sorted((root / "src" / "headlens").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for layer in LAYERS:
        (package / layer).symlink_to(root / layer, target_is_directory=True)
    return into


@event_priority(100)  # before mkdocstrings' own on_config
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    root = Path(config.config_file_path).resolve().parent
    into = link_tree(root, Path(tempfile.mkdtemp(prefix="headlens-docs-")))
    _made.append(into)
    handlers = config.plugins["mkdocstrings"].config["handlers"]
    handlers.setdefault("python", {})["paths"] = [str(into)]
    return config


def on_shutdown() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
