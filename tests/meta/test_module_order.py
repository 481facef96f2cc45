"""The suite's module order (tests/conftest.py): every module it names first exists, and
scripts/test.sh keeps xdist from reordering them."""

from __future__ import annotations

from tests.conftest import FIRST_MODULES
from tests.paths import REPO_ROOT


def test_every_module_named_first_exists_once():
    missing = [name for name in FIRST_MODULES if not (REPO_ROOT / name).is_file()]
    assert not missing, f"tests/conftest.py FIRST_MODULES names modules that do not exist: {missing}"
    assert len(set(FIRST_MODULES)) == len(FIRST_MODULES)


def test_the_test_command_keeps_the_order():
    assert "--no-loadscope-reorder" in (REPO_ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")


def test_the_named_modules_are_collected_first(request):
    """In this session's own collection, the named modules that were collected come first, in the named order."""
    order: list[str] = []
    for item in request.session.items:
        module = item.nodeid.split("::", 1)[0]
        if not order or order[-1] != module:
            order.append(module)
    named = [m for m in order if m in FIRST_MODULES]
    assert order[: len(named)] == named == sorted(named, key=FIRST_MODULES.index)
