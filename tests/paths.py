"""Paths the tests share, importing nothing heavy."""

from __future__ import annotations

from pathlib import Path

#: The repository root (tests/ is directly below it).
REPO_ROOT = Path(__file__).resolve().parent.parent
