"""``report.html`` in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, which needs no browser download (``playwright install`` is never run).

Skipped, with how to get one, only where no Chromium binary exists (``scripts/bootstrap.sh test`` installs it: scripts/chromium.sh).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.reports.runs.test_report import XSS, quick_report  # noqa: F401  (the session's report)

#: One byte per weight on the page: a shown weight is within half a step of 1/255 of the saved one.
U8_STEP = 0.5 / 255 + 1e-7

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--mute-audio",
]


#: The skip reason where no browser is found: how to get one (``scripts/bootstrap.sh test`` runs
#: scripts/chromium.sh, which installs it where it can and otherwise prints the same instructions).
CHROMIUM_MISSING = (
    "no Chromium binary found ($HEADLENS_CHROMIUM, /usr/bin/chromium, or chromium, chromium-browser or google-chrome on PATH); "
    "`bash scripts/chromium.sh` (run by `bash scripts/bootstrap.sh test`) installs Debian's chromium as root or with "
    "password-less sudo; else install Debian's chromium (as root: apt-get install chromium), or point $HEADLENS_CHROMIUM "
    "at a Chromium or Chrome binary"
)


def chromium_binary() -> str | None:
    for candidate in (
        os.environ.get("HEADLENS_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser_page(request):
    binary = chromium_binary()
    if binary is None:
        pytest.skip(CHROMIUM_MISSING)
    report = request.getfixturevalue("quick_report")  # built only where a browser will read it
    from playwright.sync_api import sync_playwright

    events: dict[str, list] = {"console": [], "pageerror": [], "dialog": [], "requests": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: events["console"].append((m.type, m.text)))
            page.on("pageerror", lambda e: events["pageerror"].append(str(e)))

            def dismiss(dialog) -> None:
                events["dialog"].append(dialog.message)
                dialog.dismiss()

            page.on("dialog", dismiss)
            page.on("request", lambda r: events["requests"].append(r.url))
            url = (report[0] / "report.html").resolve().as_uri()
            page.goto(url)
            page.wait_for_selector("#detail-body table")
            yield page, events, url
        finally:
            browser.close()


def test_page_loads_without_errors_or_network(browser_page):
    page, events, url = browser_page
    assert events["pageerror"] == []
    assert [m for m in events["console"] if m[0] in ("error", "warning")] == []
    assert all(r == url or r.startswith("data:") for r in events["requests"]), events["requests"]
    assert page.title().startswith("headlens report: ")


def test_role_table_has_one_row_per_head(browser_page):
    page, _, _ = browser_page
    assert page.locator("#role-table tbody tr:visible").count() == 8
    assert page.locator("#row-count").inner_text() == "8 of 8 heads"


def test_clicking_a_head_shows_its_detail(browser_page):
    page, events, _ = browser_page
    page.click('#role-table tbody tr[data-head="1.2"]')
    assert page.locator("#detail-title").inner_text() == "Head 1.2"
    assert page.locator("#role-table tbody tr.selected").get_attribute("data-head") == "1.2"
    assert page.locator("td.cell.sel").count() >= 5  # the head is marked in every heatmap
    body = page.locator("#detail-body").inner_text()
    for needle in ("induction", "previous_token", "95% CI", "zero", "mean", "with BOS"):
        assert needle in body, needle
    assert page.locator("#detail-body .example").count() == 2
    tok = page.locator("#detail-body .example >> nth=0").locator(".hl-av-tok >> nth=4")
    tok.hover()
    info = page.locator("#detail-body .hl-av-info >> nth=0").inner_text()
    assert info.startswith("head 1.2, query ") and "(4)" in info and "attends most to" in info
    colours = page.eval_on_selector_all("#detail-body .example:first-child .hl-av-tok", "els => els.map(e => e.style.backgroundColor)")
    assert sum(c.startswith("rgba(230, 85, 13") for c in colours) == 5  # keys 0..4 are shaded, the rest are later tokens
    page.click('td.cell[data-head="0.3"] >> nth=0')
    assert page.locator("#detail-title").inner_text() == "Head 0.3"
    assert events["pageerror"] == []


def test_example_view_shows_the_saved_pattern_row(browser_page, request):
    """The page's example prompts are the attention view component: hovering a token shades each
    key by the weight the examples stage saved (one byte per weight: within 1/510)."""
    page, events, _ = browser_page
    report = request.getfixturevalue("quick_report")  # after browser_page: its skip comes first (a session fixture would not wait)
    with np.load(report[0] / "examples" / "patterns.npz") as z:
        pattern = z["p0"]  # [layer, head, q, k] of the first prompt
    page.click('#role-table tbody tr[data-head="1.2"]')
    example = page.locator("#detail-body .example >> nth=0")
    assert example.locator(".hl-av").count() == 1 and example.locator("select").count() == 0  # the page's table picks the head
    example.locator(".hl-av-tok >> nth=3").hover()
    shown = example.locator(".hl-av-tok").evaluate_all("els => els.map(e => e.dataset.w)")
    row = pattern[1, 2, 3]
    assert [float(w) for w in shown[:4]] == pytest.approx(row[:4].tolist(), abs=U8_STEP)
    assert shown[4:] == [""] * (len(shown) - 4)  # later tokens: not attended under causal attention
    top = int(np.argmax(row[:4]))
    info = example.locator(".hl-av-info").inner_text()
    assert f"({top}) {100 * np.rint(255 * row[top]) / 255:.0f}%" in info.split("attends most to: ", 1)[1].split(",")[0]
    assert events["pageerror"] == []


def test_sorting_and_filtering(browser_page):
    page, _, _ = browser_page
    heads = lambda: page.eval_on_selector_all("#role-table tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.head)")  # noqa: E731
    page.click('#role-table thead th[data-col="0"]')
    assert heads() == ["1.3", "1.2", "1.1", "1.0", "0.3", "0.2", "0.1", "0.0"]
    page.click('#role-table thead th[data-col="0"]')
    assert heads() == ["0.0", "0.1", "0.2", "0.3", "1.0", "1.1", "1.2", "1.3"]
    page.click('#role-table thead th[data-col="2"]')  # a score column: largest first
    values = page.eval_on_selector_all("#role-table tbody tr", "rows => rows.map(r => parseFloat(r.cells[2].dataset.v))")
    assert values == sorted(values, reverse=True)
    page.select_option("#role-filter", "-")
    assert len(heads()) == 8
    page.select_option("#role-filter", "induction")
    assert heads() == [] and page.locator("#row-count").inner_text() == "0 of 8 heads"
    page.select_option("#role-filter", "")
    page.fill("#head-search", "1.")
    assert sorted(heads()) == ["1.0", "1.1", "1.2", "1.3"]
    page.fill("#head-search", "")
    assert len(heads()) == 8


def test_script_in_a_prompt_is_shown_as_text_and_runs_nothing(browser_page):
    page, events, _ = browser_page
    page.click('#role-table tbody tr[data-head="0.0"]')
    for i in range(3):
        page.locator("#detail-body .example >> nth=1").locator(f".hl-av-tok >> nth={i}").click()
    assert events["dialog"] == []
    assert XSS in page.locator(".prompts").inner_text()
    assert XSS in page.locator("#detail-body .example >> nth=1").locator(".ex-prompt").inner_text()
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    assert page.evaluate("document.querySelectorAll('img, iframe, object, embed').length") == 0


def test_screenshot_is_not_blank(browser_page, tmp_path):
    from PIL import Image

    page, _, _ = browser_page
    page.click('#role-table tbody tr[data-head="1.0"]')
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    img = Image.open(shot).convert("RGB")
    assert img.width >= 1000 and img.height > 1500
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200, len(colours or [])
    assert max(n for n, _ in colours) < 0.9 * img.width * img.height  # not one flat colour


def test_heads_table_needs_no_horizontal_scrolling_at_1400_px(browser_page):
    """At the test's 1400 x 1000 viewport the role table fits its box (issue 20: it scrolled)."""
    page, _, _ = browser_page
    wrap = page.evaluate("() => { const w = document.querySelector('.table-wrap'); return [w.scrollWidth, w.clientWidth]; }")
    assert wrap[0] <= wrap[1], wrap
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    assert not page.locator("#manifest-json").is_visible()  # collapsed until asked for
    page.click("#manifest summary")
    assert page.locator("#manifest-json").is_visible()
