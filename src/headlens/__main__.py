"""The ``headlens`` command: ``python -m headlens`` runs it, and so does the installed script
(bin/headlens, which calls :func:`main`).

Importing any ``headlens.x`` module first runs ``headlens/__init__`` (lazy, PEP 562: its public
names load on first use, so that costs nothing) and then that layer's ``__init__``; the three
layers' ``__init__`` import their whole public namespace (torch, transformers, pandas, matplotlib:
seconds).  So that ``--help``, ``--version``, ``headlens CMD --help`` and usage errors answer at
once, and each command imports only what it runs, :func:`main` first creates the module objects of
those layer packages (:data:`PACKAGES`) from their specs *without* running their ``__init__``:
their submodules import as usual (the lazy group, the commands' options, then what a command
imports).  The first time anything asks one of those packages for a name it does not hold yet
(``from headlens.probes import load_model``, ``headlens.census``), that package's ``__init__`` runs
in the same module object and the name is looked up again: the namespace is then exactly the one
``import headlens`` gives.  A submodule asked for by name is imported without running the
``__init__``.

Nothing here is global state: the module objects in ``sys.modules`` are the packages themselves.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

__all__ = ["PACKAGES", "DeferredPackage", "defer_packages", "main"]

#: The packages whose ``__init__`` imports a public namespace (parents first).
PACKAGES = ("headlens.probes", "headlens.analyses", "headlens.reports")


class DeferredPackage(types.ModuleType):
    """A package whose ``__init__`` has not run yet: it runs on the first lookup of a name the
    package does not hold (a submodule asked for by name is imported instead)."""

    def __getattr__(self, name: str) -> Any:
        full = f"{self.__name__}.{name}"
        if not name.startswith("__") and importlib.util.find_spec(full) is not None:
            return importlib.import_module(full)  # a submodule: the namespace is not needed
        complete(self)
        return getattr(self, name)


def complete(module: types.ModuleType) -> None:
    """Run a deferred package's ``__init__`` in its module object (once; a no-op on a complete one)."""
    if not isinstance(module, DeferredPackage):
        return
    object.__setattr__(module, "__class__", types.ModuleType)  # from here on an ordinary (partly initialised) package
    spec = module.__spec__
    assert spec is not None and spec.loader is not None
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module.__name__, None)  # as a failed import leaves it
        raise


def defer_packages(names: tuple[str, ...] = PACKAGES) -> list[DeferredPackage]:
    """Put ``names`` (parents first) in ``sys.modules`` as :class:`DeferredPackage` objects; a
    package already imported is left as it is."""
    made = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # a child's spec reads its (deferred) parent's __path__
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not an importable package")
        module = importlib.util.module_from_spec(spec)
        module.__class__ = DeferredPackage
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, module)
        made.append(module)
    return made


def main() -> None:
    """The ``headlens`` command, with the layers' ``__init__`` deferred."""
    defer_packages()
    from headlens.reports.cli.main import main as cli_main  # the deferred packages' __init__ do not run

    cli_main()


if __name__ == "__main__":
    main()
