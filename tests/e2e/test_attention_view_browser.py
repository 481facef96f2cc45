"""The attention view in a real browser (headless Chromium driven by Playwright, as
tests/e2e/test_report_browser.py): a saved standalone view, and two notebook fragments in one page.

Hovering, focusing and clicking tokens shade each key by the weight of the view's pattern row;
the pickers switch head and layer.  Skipped, with the reason, only where no Chromium exists.
"""

from __future__ import annotations

import pytest

from headlens.reports.api.attention_view import attention_view
from tests.e2e.test_report_browser import CHROMIUM_ARGS, CHROMIUM_MISSING, chromium_binary

PROMPT = "When Mary and John went to the store, John gave a drink to"
#: The shown weights are the float32 pattern, printed by the browser from its double value.
WEIGHT_TOL = 1e-6


@pytest.fixture(scope="module")
def browser():
    binary = chromium_binary()
    if binary is None:
        pytest.skip(CHROMIUM_MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _open(browser, path):
    events: dict[str, list] = {"pageerror": [], "console": [], "requests": []}
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    page.on("pageerror", lambda e: events["pageerror"].append(str(e)))
    page.on("console", lambda m: events["console"].append((m.type, m.text)))
    page.on("request", lambda r: events["requests"].append(r.url))
    url = path.resolve().as_uri()
    page.goto(url)
    return page, events, url


def _shown(view_root):
    return view_root.locator(".hl-av-tok").evaluate_all("els => els.map(e => e.dataset.w)")


def _info(view_root) -> str:
    return view_root.locator(".hl-av-info").inner_text()


def test_hovering_a_token_in_a_saved_view_shades_its_pattern_row(browser, family_model, tmp_path):
    model = family_model("gpt2")
    view = attention_view(model, PROMPT, layer=1)  # one layer: a head picker
    path = view.save(tmp_path / "view.html")
    page, events, url = _open(browser, path)
    root = page.locator(".hl-av")
    assert root.locator("select[data-pick=head]").count() == 1 and root.locator("select[data-pick=layer]").count() == 0
    q = 6
    root.locator(f".hl-av-tok >> nth={q}").hover()
    row = view.pattern(1, 0)[q].tolist()
    shown = _shown(root)
    assert [float(w) for w in shown[: q + 1]] == pytest.approx(row[: q + 1], abs=WEIGHT_TOL)
    assert shown[q + 1 :] == [""] * (len(view.tokens) - q - 1)  # later tokens: causal, not attended
    top = max(range(q + 1), key=lambda k: (row[k], -k))
    info = _info(root)
    assert info.startswith("head 1.0, query \u201c") and f"\u201d ({q}) attends most to: " in info
    assert info.split("attends most to: ", 1)[1].split(", ")[0].endswith(f"({top}) {100 * row[top]:.1f}%")  # the largest weight first
    # the head picker: the same query, head 1.3's row
    root.locator("select[data-pick=head]").select_option(label="3")
    assert [float(w) for w in _shown(root)[: q + 1]] == pytest.approx(view.pattern(1, 3)[q, : q + 1].tolist(), abs=WEIGHT_TOL)
    assert _info(root).startswith("head 1.3, ")
    # click pins: hovering elsewhere keeps the pinned query; clicking it again unpins
    root.locator(".hl-av-tok >> nth=2").click()
    root.locator(".hl-av-tok >> nth=5").hover()
    assert "(2) [pinned]" in _info(root)
    root.locator(".hl-av-tok >> nth=2").click()
    root.locator(".hl-av-tok >> nth=5").hover()
    assert "(5) attends" in _info(root)
    # keyboard: focus reaches a token, the arrow keys move along, Enter pins
    root.locator(".hl-av-tok >> nth=1").focus()
    page.keyboard.press("ArrowRight")
    assert "(2) attends" in _info(root)
    page.keyboard.press("Enter")
    assert "(2) [pinned]" in _info(root) and root.locator(".hl-av-tok >> nth=2").get_attribute("aria-pressed") == "true"
    assert events["pageerror"] == [] and [m for m in events["console"] if m[0] in ("error", "warning")] == []
    assert all(r == url or r.startswith("data:") for r in events["requests"]), events["requests"]
    page.close()


def test_two_notebook_views_in_one_page_work_apart(browser, family_model, tmp_path):
    gpt2, bert = family_model("gpt2"), family_model("bert")
    decoder = attention_view(gpt2, PROMPT)  # every layer: a layer picker and a head picker
    encoder = attention_view(bert, PROMPT, layer=0, head=1)  # one head: no picker
    path = tmp_path / "notebook.html"
    path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>" + decoder._repr_html_() + encoder._repr_html_() + "</body></html>",
        encoding="utf-8",
    )
    page, events, _ = _open(browser, path)
    first, second = page.locator(".hl-av >> nth=0"), page.locator(".hl-av >> nth=1")
    assert first.locator(".hl-av-tok").count() == len(decoder.tokens) and second.locator(".hl-av-tok").count() == len(encoder.tokens)
    assert page.locator(".hl-av-nojs").count() == 0  # both mounted
    assert second.locator("select").count() == 0
    first.locator("select[data-pick=layer]").select_option(label="1")
    first.locator("select[data-pick=head]").select_option(label="2")
    first.locator(".hl-av-tok >> nth=4").hover()
    assert [float(w) for w in _shown(first)[:5]] == pytest.approx(decoder.pattern(1, 2)[4, :5].tolist(), abs=WEIGHT_TOL)
    q = 3
    second.locator(f".hl-av-tok >> nth={q}").hover()
    shown = [float(w) for w in _shown(second)]  # an encoder: every key is shaded, later ones too
    assert shown == pytest.approx(encoder.pattern(0, 1)[q].tolist(), abs=WEIGHT_TOL)
    assert second.locator(".hl-av-later").count() == 0
    assert _info(second).startswith("head 0.1, query ") and "(4) attends" in _info(first)  # the first view kept its query
    assert events["pageerror"] == []
    page.close()


def test_whitespace_tokens_show_as_glyphs_in_the_browser(browser, family_model, tmp_path):
    """A line break or an indentation run is a visible glyph in its token box, never a blank box."""
    from headlens.reports.render.page.attention_component import token_label

    view = attention_view(family_model("gpt2"), "def f(a):\n    return a\n\nx = 1", layer=1, head=0)
    path = view.save(tmp_path / "ws.html")
    page, events, _ = _open(browser, path)
    shown = page.locator(".hl-av .hl-av-tok").evaluate_all("els => els.map(e => e.textContent)")
    assert shown == [token_label(t) for t in view.tokens]
    assert all(s.strip() for s in shown), shown
    assert events["pageerror"] == []
    page.close()
