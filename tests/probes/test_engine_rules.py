"""One rule in one place, for the reduction engine (issue 21 item 1), by a scan of the package's source.

* one "stop the forward by raising from a hook": :class:`headlens.probes.engine_forward.StopForward`
  is the only exception class about stopping, and only ``engine_forward`` catches one;
* one visibility rule: :func:`headlens.probes.attention.visible` is the only comparison of a key
  against ``query - window``, and every other ``*visible*``/``*allowed*`` function calls it;
* one ``repeat_kv``: no ``repeat_interleave`` outside ``probes/attention.py`` (where the only other
  one builds GPT-J's sinusoids), and one function of that name.

Each scan is also run on a small bad snippet, so that it is seen to fail.
"""

from __future__ import annotations

import ast
import functools

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
LAYERS = ("probes", "analyses", "reports", "src/headlens")


def _modules() -> dict[str, ast.Module]:
    """The package's modules, parsed once per session (every scan reads them; none changes a tree): a new dict each call."""
    return dict(_parsed())


@functools.cache
def _parsed() -> dict[str, ast.Module]:
    out = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            out[rel] = ast.parse(path.read_text(), filename=rel)
    return out


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def stop_violations(modules: dict[str, ast.Module]) -> list[str]:
    """Exception classes about stopping other than StopForward; handlers of one outside engine_forward."""
    bad = []
    for rel, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and "stop" in node.name.lower():
                bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
                if bases & {"Exception", "BaseException", "RuntimeError"} and not (
                    rel == "probes/engine_forward.py" and node.name == "StopForward"
                ):
                    bad.append(f"{rel}: class {node.name}")
            if isinstance(node, ast.ExceptHandler) and node.type is not None and "stop" in ast.unparse(node.type).lower():
                if rel != "probes/engine_forward.py":
                    bad.append(f"{rel}:{node.lineno}: except {ast.unparse(node.type)}")
    return bad


def _window_compare(node: ast.AST) -> bool:
    """``a <op> b - window`` (the sliding-window rule written out)."""
    if not isinstance(node, ast.Compare):
        return False
    parts = [node.left, *node.comparators]
    return any(isinstance(p, ast.BinOp) and isinstance(p.op, ast.Sub) and "window" in ast.unparse(p.right) for p in parts)


def _calls(fn: ast.AST) -> set[str]:
    return {ast.unparse(c.func).split(".")[-1] for c in ast.walk(fn) if isinstance(c, ast.Call)}


def visibility_violations(modules: dict[str, ast.Module]) -> list[str]:
    fns = [(rel, fn, _calls(fn)) for rel, tree in modules.items() for fn in _functions(tree)]  # each function's calls, found once
    # the functions that reach probes.attention.visible, directly or through one that does
    reach = {"visible"}
    while True:
        more = {fn.name for _, fn, calls in fns if calls & reach} - reach
        if not more:
            break
        reach |= more
    bad = []
    for rel, fn, calls in fns:
        one = rel == "probes/attention.py" and fn.name == "visible"
        if not one and any(_window_compare(n) for n in ast.walk(fn)):
            bad.append(f"{rel}: {fn.name} writes the window rule itself")
        if not one and ("visible" in fn.name.lower() or "allowed" in fn.name.lower()) and not calls & reach:
            bad.append(f"{rel}: {fn.name} decides visibility without probes.attention.visible")
    return bad


def repeat_violations(modules: dict[str, ast.Module]) -> list[str]:
    bad = []
    defs = []
    for rel, tree in modules.items():
        for fn in _functions(tree):
            if "repeat_kv" in fn.name:
                defs.append(f"{rel}: {fn.name}")
            for c in ast.walk(fn):
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "repeat_interleave":
                    if not (rel == "probes/attention.py" and fn.name in ("repeat_kv", "_gptj_sin_cos")):
                        bad.append(f"{rel}: repeat_interleave in {fn.name}")
    if len(defs) != 1:
        bad.append(f"{len(defs)} repeat_kv functions: {defs}")
    return bad


def test_one_stop_exception():
    assert stop_violations(_modules()) == []


def test_one_visibility_rule():
    assert visibility_violations(_modules()) == []


def test_one_repeat_kv():
    assert repeat_violations(_modules()) == []


def test_the_scans_fail_on_a_copy():
    """A second stop exception, a window rule written out and a second repeat_kv are each found."""
    bad = ast.parse(
        "class _Stop(Exception):\n    pass\n"
        "def run():\n    try:\n        f()\n    except _Stop:\n        pass\n"
        "def window_allowed(i, j, window):\n    return (j <= i) & (j > i - window)\n"
        "def _repeat_kv(x, g):\n    return x.repeat_interleave(g, dim=1)\n"
    )
    mods = {**_modules(), "analyses/copy.py": bad}
    assert any("class _Stop" in v for v in stop_violations(mods)) and any("except _Stop" in v for v in stop_violations(mods))
    assert any("window_allowed" in v for v in visibility_violations(mods))
    assert any("_repeat_kv" in v for v in repeat_violations(mods)) and any("2 repeat_kv" in v for v in repeat_violations(mods))
