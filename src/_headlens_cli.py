"""The ``headlens`` console script's entry point (pyproject ``[project.scripts]``); not an import
name for users: ``import headlens`` is the library, ``python -m headlens`` the same command.

Importing any ``headlens.x`` module first runs ``headlens/__init__``, which imports the whole
explicit public namespace (torch, transformers, pandas, matplotlib: seconds).  So that
``headlens --help``, ``--version``, ``headlens CMD --help`` and usage errors answer at once, this
module puts the module objects of the namespace packages (:data:`PACKAGES`) in ``sys.modules``
from their specs *without* running their ``__init__``; the CLI's light modules (the lazy group,
the commands' options) then import on their own.  Once a command's arguments have parsed and it is
about to run, :meth:`DeferredInits.run` executes the deferred ``__init__`` files in those same
module objects, bottom layer first, so the command runs in a process exactly as after ``import
headlens``.  Nothing here is global: the deferred list lives in the one :class:`DeferredInits`
of this run.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["PACKAGES", "DeferredInits", "main"]

#: The packages whose ``__init__`` imports a public namespace, in the order they are completed:
#: bottom layer first (each imports only its own layer and those below, tests/test_layout.py),
#: ``headlens`` (which imports all three) last.
PACKAGES = ("headlens.probes", "headlens.analyses", "headlens.reports", "headlens")


class DeferredInits:
    """The module objects of ``names`` in ``sys.modules``, their ``__init__`` not yet run.

    A package already imported is left alone (it is complete)."""

    def __init__(self, names: tuple[str, ...] = PACKAGES) -> None:
        self._pending: dict[str, ModuleType] = {}
        for name in sorted(names, key=lambda n: n.count(".")):  # parents first: a child's spec needs its parent's __path__
            if name in sys.modules:
                continue
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                raise ImportError(f"{name} is not an importable package")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
            self._pending[name] = module
        self._order = [n for n in names if n in self._pending]

    def run(self) -> None:
        """Run the deferred ``__init__`` files (each once, in :data:`PACKAGES` order)."""
        while self._order:
            name = self._order.pop(0)
            module = self._pending.pop(name)
            spec = module.__spec__
            assert spec is not None and spec.loader is not None
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)  # as a failed import leaves it: not half a namespace
                raise


def main() -> None:
    deferred = DeferredInits()
    from headlens.reports.cli.main import main as cli_main  # light: the deferred packages' __init__ do not run

    cli_main(before_command=deferred.run)


if __name__ == "__main__":
    main()
