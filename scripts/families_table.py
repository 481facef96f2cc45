"""Write docs/families.md's family table from the test matrix (tests/families/matrix.py) and the refusal list
(headlens.probes.architectures).

Usage: ``.venv/bin/python scripts/families_table.py`` rewrites the part of docs/families.md between
:data:`BEGIN` and :data:`END`; ``--check`` exits 1 when the page differs from what it would write.
tests/families/test_families_table.py checks the page is this script's output.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: tests/ is imported from the checkout
    sys.path.insert(0, str(REPO))

PAGE = REPO / "docs" / "families.md"
BEGIN = "<!-- families-table: written by scripts/families_table.py from tests/families/matrix.py; do not edit by hand -->"
END = "<!-- /families-table -->"


def _cell(family: str, study: str) -> str | None:
    """The refused or failing cell of ``study`` on ``family``, in words; None when it runs."""
    from headlens.probes.attention import RECONSTRUCTED_FAMILIES
    from tests.families.matrix import FAILURES, REFUSALS, expected

    state = expected(family, study)
    if state == "ok":
        return None
    if state == "fails":
        return f"{study} fails ({FAILURES[(family, study)][0]}): {FAILURES[(family, study)][1]}"
    if (family, study) in REFUSALS:
        return f"{study} refused: {REFUSALS[(family, study)][1]}"
    assert study == "verify" and family not in RECONSTRUCTED_FAMILIES
    return "verify refused: its attention is not redone from q and k yet"


def matrix_table() -> list[str]:
    from headlens.analyses.synthetic.families import model_class_name
    from headlens.analyses.synthetic.family_shapes import FEATURES
    from tests.families.matrix import ENCODERS, FAMILIES, STUDIES, expected

    lines = [
        "| family (`model_type`) | tested as | attention in the tiny checkpoint | studies that run | refused or failing, and why |",
        "|---|---|---|---|---|",
    ]
    for family in FAMILIES:
        runs = [s for s in STUDIES if expected(family, s) == "ok"]
        other = [c for s in STUDIES if (c := _cell(family, s))]
        lines.append(f"| `{family}` | {model_class_name(family)} | {FEATURES[family]} | {', '.join(runs)} | {'; '.join(other) or '-'} |")
    for family, (tested, where) in ENCODERS.items():
        lines.append(
            f"| `{family}` (encoder) | {tested} | bidirectional, padding masked | capture, verify: {where} | circuits refused: encoders |"
        )
    lines += ["", "What each study checks, against plain Hugging Face (`tests/families/test_matrix.py`):", ""]
    lines += [f"- **{study}**: {what}" for study, what in STUDIES.items()]
    lines += [
        "",
        "Real weights: SmolLM2-135M-Instruct (`llama`, the named model `smollm2`) has its captured patterns "
        "checked against Hugging Face eager on all 30 layers and `verify` passing on every layer in the same module.",
    ]
    return lines


def refused_table() -> list[str]:
    from headlens.probes.architectures import CATEGORIES, NOT_IN_TRANSFORMERS, REASONS, REFUSED, WHY

    by_reason: dict[str, list[str]] = defaultdict(list)
    for model_type in sorted(REFUSED.keys() - WHY.keys()):
        by_reason[CATEGORIES[model_type]].append(model_type)
    lines = [
        "Every other architecture TransformerLens's bridge has an adapter for and transformers can build is refused, "
        "with this reason (`headlens.probes.architectures.refusal_reason`):",
        "",
        "| kind | why headlens refuses it | `model_type` |",
        "|---|---|---|",
    ]
    lines += [f"| {CATEGORIES[t]} | {why} | `{t}` |" for t, why in sorted(WHY.items())]
    for category in REASONS:
        if by_reason.get(category):
            names = ", ".join(f"`{t}`" for t in by_reason[category])
            lines.append(f"| {category} | {REASONS[category]} | {names} |")
    lines += [
        "",
        "Adapters for architectures transformers has no class for (remote code, TransformerLens's own models, aliases): "
        + ", ".join(f"`{a}`" for a in sorted(NOT_IN_TRANSFORMERS))
        + ".",
    ]
    return lines


def generated() -> str:
    """The text between :data:`BEGIN` and :data:`END`, markers included."""
    return "\n".join([BEGIN, "", *matrix_table(), "", *refused_table(), "", END])


def page_text(current: str) -> str:
    """``current`` with its generated part replaced."""
    start, end = current.index(BEGIN), current.index(END) + len(END)
    return current[:start] + generated() + current[end:]


def main(argv: list[str]) -> int:
    current = PAGE.read_text(encoding="utf-8")
    new = page_text(current)
    if "--check" in argv:
        return int(new != current)
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
