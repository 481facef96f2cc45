"""Roles as a long table (one row per (head, role)), its one rendering, and the page's escaping
of hostile strings in roles and names (Jinja2 autoescape)."""

from __future__ import annotations

import json
import shutil

import pandas as pd

from headlens.analyses.heads.classify import classify_heads, heads_with_role, roles_from_wide, roles_of
from headlens.reports.render.tables import roles_joined
from tests.reports.runs.test_report import quick_report  # noqa: F401  (the session's report)

EVIL = "<script>alert(2)</script>"


def _scores(rows):
    nan = float("nan")
    return pd.DataFrame(
        [
            {
                "layer": l,
                "head": h,
                "detector": d,
                "score": s,
                "baseline": 0.05,
                "ci_low": s - 0.05,
                "ci_high": s + 0.05,
                "n": 10,
                "accuracy": nan,
            }
            for l, h, d, s in rows
        ]
    )


def test_long_table_has_one_row_per_head_and_role():
    scores = _scores(
        [
            (0, 0, "sink", 0.9),
            (0, 0, "previous_token", 0.8),
            (0, 1, "sink", 0.01),
            (0, 1, "previous_token", 0.02),
            (1, 0, "induction", 0.7),
            (1, 0, "sink", 0.02),
        ]
    )
    got = classify_heads(scores)
    assert list(got.roles.columns) == ["layer", "head", "name", "role"]
    assert list(zip(got.roles["name"], got.roles["role"], strict=True)) == [
        ("0.0", "previous_token"),
        ("0.0", "sink"),
        ("1.0", "induction"),
    ]
    assert list(got.heads["name"]) == ["0.0", "0.1", "1.0"]  # every head, with or without a role
    # named after its role other than sink, though its sink score is higher (issue 45 item 3: most heads of a
    # Llama-family model sink, so "sink" would name nearly every head)
    assert got.heads.set_index("name").loc["0.0", "strongest_detector"] == "previous_token"
    assert roles_of(got.roles) == {(0, 0): frozenset({"previous_token", "sink"}), (1, 0): frozenset({"induction"})}
    assert heads_with_role(got.roles, "sink") == {"0.0"} and heads_with_role(got.roles, "referent") == set()
    assert roles_joined(got.roles, got.heads) == ["previous_token;sink", "", "induction"]
    assert roles_joined(got.roles, got.heads, sep=", ")[0] == "previous_token, sink"


def test_old_wide_role_table_converts_to_the_long_one():
    wide = pd.DataFrame(
        {"layer": [0, 0, 1], "head": [0, 1, 0], "name": ["0.0", "0.1", "1.0"], "roles": ["sink;previous_token", "", "induction"]}
    )
    long = roles_from_wide(wide)
    assert roles_of(long) == {(0, 0): frozenset({"previous_token", "sink"}), (1, 0): frozenset({"induction"})}
    assert roles_joined(long, wide) == ["previous_token;sink", "", "induction"]


def test_hostile_role_and_model_name_are_escaped(quick_report):  # noqa: F811
    from headlens.reports import load_report

    r = load_report(quick_report[0])
    r.model = f"model {EVIL}"
    r.roles = pd.DataFrame({"layer": [0, 1], "head": [0, 2], "name": ["0.0", "1.2"], "role": [EVIL, "induction"]})
    r.heads["roles"] = roles_joined(r.roles, r.heads)
    page = r.html()
    assert EVIL not in page and "alert(2)</script>" not in page
    assert page.count("&lt;script&gt;alert(2)&lt;/script&gt;") >= 3  # title, header, the role badge
    assert '<span class="badge">&lt;script&gt;alert(2)&lt;/script&gt;</span>' in page
    data = page.split('<script type="application/json" id="hl-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)["heads"]["0.0"]["roles"] == [EVIL]
    assert page.count("<script") == 2
    md = r.markdown()
    assert EVIL not in md and "&lt;script&gt;alert(2)&lt;/script&gt;" in md


def test_report_reads_a_census_folder_from_before_the_long_table(quick_report, tmp_path):  # noqa: F811
    from headlens.reports import load_report

    out = tmp_path / "old"
    shutil.copytree(quick_report[0], out)
    new = load_report(out)
    census = out / "census"
    heads = pd.read_csv(census / "heads.csv", keep_default_na=False, dtype={"name": str})
    heads.loc[heads["name"] == "1.2", "roles"] = "sink;induction"  # a head with two roles, as the old format wrote it
    heads.to_csv(census / "roles.csv", index=False)
    (census / "heads.csv").unlink()
    old = load_report(out)
    assert old.roles is not None and new.roles is not None
    assert list(old.roles.columns) == ["layer", "head", "name", "role"]
    assert roles_of(old.roles) == {**roles_of(new.roles), (1, 2): frozenset({"induction", "sink"})}
    assert old.heads.set_index("name").loc["1.2", "roles"] == "induction;sink"
    assert old.strongest is not None and len(old.strongest) == 8


def test_report_reads_a_head_named_after_no_detector(quick_report, tmp_path):  # noqa: F811
    """heads.csv's empty cells for a head whose no score beats its uniform baseline: "" and NaN, the score column numeric."""
    from headlens.reports import load_report

    out = tmp_path / "none"
    shutil.copytree(quick_report[0], out)
    path = out / "census" / "heads.csv"
    heads = pd.read_csv(path, keep_default_na=False, dtype={"name": str})
    heads["strongest_score"] = heads["strongest_score"].astype(object)
    heads.loc[heads["name"] == "0.1", ["strongest_detector", "strongest_score"]] = ["", ""]
    heads.to_csv(path, index=False)
    got = load_report(out).strongest
    assert got is not None and pd.api.types.is_float_dtype(got["strongest_score"])
    row = got.set_index("name").loc["0.1"]
    assert row["strongest_detector"] == "" and pd.isna(row["strongest_score"])


def test_pruning_svg_is_cleaned_before_it_is_inlined(tmp_path):
    from headlens.reports.render.page.figure import inline_svg

    evil = tmp_path / "evil.svg"
    evil.write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="alert(1)" width="10" height="10">'
        "<style>*{fill:red}</style><script>alert(2)</script><foreignObject><div>x</div></foreignObject>"
        '<a xlink:href="javascript:alert(3)"><rect width="1" height="1"/></a>'
        '<use xlink:href="#p" onclick="alert(4)"/><image href="http://example.com/x.png"/><path id="p" d="M0 0"/></svg>'
    )
    out = inline_svg(evil, element_id="fig", label="a figure")
    assert out is not None and out.startswith('<svg xmlns="http://www.w3.org/2000/svg" id="fig" role="img" aria-label="a figure"')
    for bad in ("alert", "<script", "foreignObject", "onload", "onclick", "example.com", "javascript", "xlink"):
        assert bad not in out, bad
    assert '<use href="#p"' in out and "#fig *{fill:red}" in out  # local links kept; the figure's style scoped to it
    (tmp_path / "broken.svg").write_text("<svg")
    assert inline_svg(tmp_path / "broken.svg", element_id="x", label="y") is None
    assert inline_svg(tmp_path / "missing.svg", element_id="x", label="y") is None


def test_page_templates_and_static_files_ship_with_the_package():
    from importlib import resources

    from headlens.reports.render.page.html import environment
    from headlens.reports.render.page.inline import static_text

    page = resources.files("headlens.reports.render.page")
    for name in ("templates/report.html.j2", "templates/macros.html.j2", "static/report.css", "static/report.js"):
        assert page.joinpath(name).is_file(), name
    assert environment().autoescape is True
    assert "JSON.parse" in static_text("report.js") and "</script" not in static_text("report.js").lower()
    assert "table.roles" in static_text("report.css") and "</style" not in static_text("report.css").lower()
