"""Griffe extension: the docstrings' Sphinx roles as Markdown code for the API reference.

headlens' docstrings name other objects the Sphinx way (``:class:`~headlens.x.Y```,
``:func:`load```); mkdocstrings renders Markdown, where such a role would show as raw text.
This extension turns each role into inline code: ``~`` keeps only the last name (as Sphinx
shows it), otherwise the name as written.  Double-backquoted literals are already Markdown code.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|obj|exc|const|ref):`(~?)([^`]+)`")


def markdown_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by inline code."""

    def code(match: re.Match[str]) -> str:
        tilde, target = match.groups()
        name = target.rsplit(".", 1)[-1] if tilde else target
        return f"`{name}`"

    return ROLE.sub(code, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every docstring griffe reads."""

    def on_instance(
        self, *, node: ast.AST | griffe.ObjectNode, obj: griffe.Object, agent: griffe.Visitor | griffe.Inspector, **kwargs: Any
    ) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_roles(obj.docstring.value)
