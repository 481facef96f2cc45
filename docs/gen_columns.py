"""Writes docs/columns.json: the columns (name and dtype) of every table the study pages describe, as
a run on the demo model produces them.  The mkdocs hook (docs/hooks.py) renders each page's
``<!-- columns: Result.table -->`` marker from that file, and tests/meta/test_docs_blocks.py checks
it against the results the pages' own examples produce (a column renamed or retyped fails there).

    .venv/bin/python docs/gen_columns.py        # about a minute on 2 CPU cores
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

DOCS = Path(__file__).resolve().parent
OUT = DOCS / "columns.json"
MARKER = re.compile(r"^<!-- columns: (\w+)\.(\w+) -->[ \t]*$", re.MULTILINE)


def wanted() -> set[tuple[str, str]]:
    """Every (Result class, table) a page's marker names."""
    return {(m.group(1), m.group(2)) for page in DOCS.rglob("*.md") for m in MARKER.finditer(page.read_text(encoding="utf-8"))}


def results() -> list[Any]:
    """One small run of each study whose tables the pages describe (the first run of a class that has a
    table gives its columns: the census tested by the evidence comes first, its ``heads`` has the
    ``evidence`` column)."""
    import headlens

    model = headlens.load_model("demo")
    census = headlens.census(model, n_prompts=8)
    return [
        headlens.evidence(model, census, n=10, T=12),
        headlens.sinks(model, n_prompts=4, bos=(True,), attn_windows=(8,)),
        headlens.sinks(model, lengths=(32,), n_long=1),
        headlens.ablate(model, n_windows=2, window=32),
        headlens.prune(model, n_windows=2, window=32, step=0.5, random_seeds=1),
        headlens.patch(model, builtin="induction", n_pairs=10, n_resamples=50, dla=True, receivers=((1, 0),), receiver_input="k"),
        headlens.gqa(model, group_sizes=(2,), n_windows=2, window=32),
        headlens.projections(model, n_windows=2, window=32, n_prompts=4),
        headlens.kv(model, context=64),
        headlens.verify(model),
    ]


def columns_of(table) -> list[list[str]]:
    return [[str(name), str(dtype)] for name, dtype in table.dtypes.items()]


def main() -> None:
    need = wanted()
    found: dict[str, list[list[str]]] = {}
    for result in results():
        kind = type(result).__name__
        for cls, table in need:
            if cls == kind and f"{cls}.{table}" not in found and getattr(result, table, None) is not None:
                found[f"{cls}.{table}"] = columns_of(getattr(result, table))
    missing = sorted(f"{c}.{t}" for c, t in need if f"{c}.{t}" not in found)
    if missing:
        raise SystemExit(f"gen_columns: no run produced {', '.join(missing)}")
    lines = [f"  {json.dumps(key)}: {json.dumps(found[key])}" for key in sorted(found)]
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"gen_columns: {len(found)} tables -> {OUT}")


if __name__ == "__main__":
    main()
