"""docs/families.md's family table is scripts/families_table.py's output (the test matrix and the refusal list)."""

from __future__ import annotations

import importlib.util

from tests.paths import REPO_ROOT


def _script():
    spec = importlib.util.spec_from_file_location("families_table", REPO_ROOT / "scripts" / "families_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_scripts_output():
    script = _script()
    page = (REPO_ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    assert page == script.page_text(page), "docs/families.md is stale: run .venv/bin/python scripts/families_table.py"
    assert page.count(script.BEGIN) == 1 and page.count(script.END) == 1


def test_every_family_and_refused_type_is_on_the_page():
    from headlens.probes.architectures import REFUSED
    from tests.families.matrix import ENCODERS, FAMILIES

    table = _script().generated()
    for name in (*FAMILIES, *ENCODERS, *REFUSED):
        assert f"`{name}`" in table, name
