"""The documents read from the Python installation that runs headlens: the standard library's
docstrings and the Python reference topics, and which of them are held out.

The demo model trains on them (:mod:`headlens.analyses.demo.data` tokenizes and samples them) and
its held-out split is one of the texts a model is measured on (:mod:`headlens.analyses.measure.texts`),
so they live on the measuring floor, under both.  Nothing here imports torch or a tokenizer, so
``headlens demo heldout`` (and anything that only needs the held-out text) stays cheap.  A document
is held out when ``sha1("<source>:<name>") % 10 == 0`` (about a tenth): the split depends on the
document's name only, so the held-out split reads (parses) only the files of held-out modules.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
import sysconfig
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_PYDOC_TOPICS: dict[str, str]
try:
    from pydoc_data import topics as _pydoc_topics

    _PYDOC_TOPICS = dict(_pydoc_topics.topics)
except ImportError:  # pragma: no cover - stripped-down Python
    _PYDOC_TOPICS = {}

__all__ = [
    "MIN_DOCSTRING_CHARS",
    "STDLIB_DOCSTRINGS",
    "PYDOC_TOPICS",
    "Document",
    "stdlib_docstring_documents",
    "pydoc_topic_documents",
    "is_heldout",
    "heldout_documents",
    "heldout_text",
]

log = logging.getLogger(__name__)

MIN_DOCSTRING_CHARS = 80
#: The two sources, as :attr:`Document.source` names them.
STDLIB_DOCSTRINGS = "stdlib-docstrings"
PYDOC_TOPICS = "pydoc-topics"
_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "__pycache__"}


@dataclass(frozen=True)
class Document:
    source: str  # "stdlib-docstrings" or "pydoc-topics"
    name: str  # module name or topic key
    text: str


def stdlib_docstring_documents(
    stdlib: str | Path | None = None, min_chars: int = MIN_DOCSTRING_CHARS, *, keep: Callable[[Document], bool] | None = None
) -> list[Document]:
    """One document per standard-library module: its docstrings, in source order.

    ``keep``: only the modules it accepts, asked before their file is read with the document's
    source and name (its text empty), so a split reads only its own files."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    files = _python_files(root)
    docs = []
    for path in files:
        rel = path.relative_to(root).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        if keep is not None and not keep(Document(STDLIB_DOCSTRINGS, name, "")):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError) as exc:
            log.debug("skipping %s: cannot parse it (%s)", path, exc)
            continue
        parts = []
        for node in _statements(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc and len(doc) >= min_chars:
                    parts.append(doc.strip())
        if parts:
            docs.append(Document(STDLIB_DOCSTRINGS, name, "\n\n".join(parts)))
    return docs


def _python_files(root: Path) -> list[Path]:
    """The ``*.py`` entries under ``root`` outside the skipped folders, sorted: the files
    ``sorted(root.rglob("*.py"))`` lists (Python 3.11: every entry whose name matches, symlinked
    folders not entered) less those under a skipped folder, without walking into the skipped
    folders at all (site-packages alone holds most of an installation's files, and walking it was
    most of the held-out split's reading).  A folder that cannot be listed is passed over."""
    found: list[Path] = []
    todo = [root]
    while todo:
        folder = todo.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as exc:
            log.debug("skipping %s: cannot list it (%s)", folder, exc)
            continue
        for entry in entries:
            path = folder / entry.name
            if entry.name.endswith(".py"):
                found.append(path)
            if entry.name not in _SKIP_DIRS and _is_real_dir(entry):
                todo.append(path)
    return sorted(found)


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    """A folder that is not a symlink (``rglob`` enters those only)."""
    try:
        return entry.is_dir() and not entry.is_symlink()
    except OSError:
        return False


#: The nodes whose fields hold statements: a docstring's owner (a module, class or function) is a
#: statement, so it lies under these alone, never under an expression.
_BLOCKS = (ast.mod, ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk``'s nodes (breadth first, the same order) less every expression and the like:
    those hold no statement, and walking them was most of the reading."""
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, _BLOCKS))
        yield node


def pydoc_topic_documents() -> list[Document]:
    """One document per topic of ``pydoc_data.topics`` (empty when Python ships without it)."""
    return [Document(PYDOC_TOPICS, key, _PYDOC_TOPICS[key].strip()) for key in sorted(_PYDOC_TOPICS)]


def is_heldout(doc: Document) -> bool:
    """Whether ``doc`` is in the held-out split (by its source and name only)."""
    digest = hashlib.sha1(f"{doc.source}:{doc.name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10 == 0


@lru_cache(maxsize=1)
def _heldout_documents() -> tuple[Document, ...]:
    return tuple(stdlib_docstring_documents(keep=is_heldout) + [d for d in pydoc_topic_documents() if is_heldout(d)])


def heldout_documents() -> list[Document]:
    """The held-out split's documents, in the order of the training data's held-out stream
    (:func:`headlens.analyses.demo.data.build_corpus`); read once per process."""
    return list(_heldout_documents())


def heldout_text() -> str:
    """The held-out documents as one text, joined by ``<|endoftext|>``: what ``headlens demo
    heldout`` writes (its tokens are the held-out stream less the ``<|endoftext|>`` opening it)."""
    return "<|endoftext|>".join(d.text for d in _heldout_documents())
