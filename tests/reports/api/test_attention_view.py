"""The attention view (``headlens.reports.api.attention_view``) and its Figures.

The weights the view embeds are checked against a plain transformers forward
(``output_attentions=True``, eager attention) on a tiny GPT-2 and a tiny BERT, framed as the
commands frame prompts (``[BOS] text``, ``[CLS] text [SEP]``), decoded from the HTML by this file's
own reader.  The HTML loads nothing from anywhere, survives hostile prompts, and two views in one
document have distinct ids.  The browser side is tests/e2e/test_attention_view_browser.py.
"""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from transformers import AutoModel, AutoModelForCausalLM

from headlens.probes.errors import InputError, OutputExistsError
from headlens.reports.api.attention_view import AttentionView, attention_view
from headlens.reports.render.attention_view_plots import MAX_PANELS, plot_heads, plot_pattern
from headlens.reports.render.page import attention_component
from headlens.reports.render.page.attention_component import embedded_bytes, is_causal, view_data
from tests.helpers import assert_close

PROMPT = "When Mary and John went to the store, John gave a drink to"
HOSTILE = "</script><script>alert(1)</script><!-- & \u2028 'q' \"qq\""


def embedded(html: str) -> tuple[dict, np.ndarray]:
    """``(data, patterns [layer, head, q, k])`` read back from a view's HTML (one view)."""
    found = re.findall(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', html, flags=re.S)
    assert len(found) == 1, found
    data = json.loads(found[0][1])
    n, L, H = len(data["tokens"]), len(data["layers"]), len(data["heads"])
    assert data["enc"] == "f32"
    raw = np.frombuffer(base64.b64decode(data["att"]), dtype="<f4")
    full = np.zeros((L, H, n, n), dtype=np.float32)
    if data["tri"]:
        rows, cols = np.tril_indices(n)
        full[:, :, rows, cols] = raw.reshape(L, H, -1)
    else:
        full[:] = raw.reshape(L, H, n, n)
    return data, full


@pytest.fixture(scope="module")
def gpt2(family_model):
    return family_model("gpt2")


@pytest.fixture(scope="module")
def bert(family_model):
    return family_model("bert")


def test_gpt2_view_embeds_plain_transformers_attention(gpt2, family_checkpoint):
    view = attention_view(gpt2, PROMPT)  # every layer and head
    tok = gpt2.tokenizer
    ids = [tok.bos_token_id] + tok(PROMPT, add_special_tokens=False)["input_ids"]
    assert view.tokens[0] == "<|endoftext|>" and len(view.tokens) == len(ids)  # the framing is shown
    hf = AutoModelForCausalLM.from_pretrained(str(family_checkpoint("gpt2")), attn_implementation="eager").eval()
    with torch.inference_mode():
        ref = torch.stack(hf(torch.tensor([ids]), output_attentions=True).attentions)[:, 0]  # [layer, head, q, k]
    data, shown = embedded(view._repr_html_())
    assert data["tokens"] == view.tokens and data["causal"] is True
    assert (data["layers"], data["heads"]) == ([0, 1], [0, 1, 2, 3])
    assert_close(shown, ref, "float32", "embedded")
    assert_close(view.patterns, ref, "float32", "patterns")


def test_bert_view_embeds_plain_transformers_attention(bert, family_checkpoint):
    view = attention_view(bert, PROMPT, layer=1)
    ids = bert.tokenizer(PROMPT)["input_ids"]  # the tokenizer's own [CLS] ... [SEP]
    assert view.tokens[0] == "[CLS]" and view.tokens[-1] == "[SEP]" and len(view.tokens) == len(ids)
    hf = AutoModel.from_pretrained(str(family_checkpoint("bert")), attn_implementation="eager").eval()
    with torch.inference_mode():
        ref = hf(input_ids=torch.tensor([ids]), output_attentions=True).attentions[1][0]  # [head, q, k]
    data, shown = embedded(view._repr_html_())
    assert data["causal"] is False and data["tri"] is False  # an encoder attends both ways: every key is sent
    assert float(np.triu(shown, k=1).sum()) > 0
    assert data["query"] == len(ids) - 2  # first shown: the last token of the text, not [SEP]
    assert_close(shown[0], ref, "float32", "embedded")
    unframed = attention_view(bert, PROMPT, layer=1, head=0, prepend_bos=False)
    assert unframed.tokens == bert.tokenizer.convert_ids_to_tokens(ids[1:-1])


def test_one_head_a_layer_or_several_layers(gpt2):
    one = attention_view(gpt2, PROMPT, layer=1, head=2)
    assert (one.layers, one.heads, tuple(one.patterns.shape[:2])) == ((1,), (2,), (1, 1))
    whole = attention_view(gpt2, PROMPT, layer=[0, 1], head=3)
    assert (whole.layers, whole.heads) == ((0, 1), (3,))
    every = attention_view(gpt2, PROMPT)
    assert_close(one.pattern(1, 2), every.pattern(1, 2), "exact")
    assert_close(whole.pattern(0, 3), every.pattern(0, 3), "exact")
    for row in every.patterns.flatten(0, 2):
        assert abs(float(row.sum()) - 1.0) < 1e-5
    assert "layer 1 x head 2, causal" in repr(one) and "layers 0-1 x head 3" in repr(whole)
    with pytest.raises(InputError, match="not in this view"):
        one.pattern(0, 2)


def test_html_is_self_contained_and_escaped(gpt2):
    view = attention_view(gpt2, HOSTILE, layer=0, head=1)
    html = view._repr_html_()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, flags=re.I)
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"<script[^>]*\bsrc\b", html) and "<link" not in html and "@import" not in html
    assert html.count("<script") == 2 and html.count("</script>") == 2  # the data and the component, nothing from the prompt
    block = html.split('-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and ">" not in block and "&" not in block and "\u2028" not in block
    data, _ = embedded(html)
    assert data["manifest"]["prompt"] == HOSTILE and "alert(1)" in "".join(data["tokens"])


def test_two_views_in_one_document_have_distinct_ids(gpt2):
    view = attention_view(gpt2, PROMPT, layer=0)
    doc = view._repr_html_() + view._repr_html_()
    ids = re.findall(r'\bid="([^"]+)"', doc)
    assert len(ids) == 4 and len(set(ids)) == 4, ids


def test_save_writes_a_standalone_page_and_refuses_to_overwrite(gpt2, tmp_path):
    view = attention_view(gpt2, PROMPT, layer=1)
    path = view.save(tmp_path / "view.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    data, shown = embedded(page)
    assert_close(shown, view.patterns, "exact")
    assert data["manifest"]["model"] == gpt2.name and data["manifest"]["framing"] == {"n_prefix": 1, "n_suffix": 0}
    with pytest.raises(OutputExistsError):
        view.save(path)
    assert path.read_text(encoding="utf-8") == page  # nothing lost
    view.save(path, overwrite=True)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"prompt": ""}, "prompt"),
        ({"layer": 7}, "layer 7"),
        ({"layer": 0, "head": 9}, "head 9"),
        ({"head": True}, "head must be an int"),
        ({"layer": "0"}, "layer must be"),
    ],
)
def test_bad_arguments_are_one_line_errors_naming_the_parameter(gpt2, kwargs, needle):
    args = {"prompt": PROMPT, **kwargs}
    with pytest.raises(InputError, match=needle) as err:
        attention_view(gpt2, args.pop("prompt"), **args)
    assert "\n" not in str(err.value) and "--" not in str(err.value)


def test_model_must_be_a_model_or_a_name():
    with pytest.raises(InputError, match="model must be"):
        attention_view(3.5, PROMPT)  # type: ignore[arg-type]  # the wrong type on purpose


def test_a_model_by_name_loads_it(tmp_path):
    """``model`` may be a name: the shipped demo model (the README's notebook snippet)."""
    view = attention_view("demo", "The cat sat on the mat.", layer=1, head=0)
    assert view.info["model"] == "demo" and view.tokens[0] == "<|endoftext|>" and view.patterns.shape[:2] == (1, 1)


def test_plot_pattern_has_the_pattern_and_the_token_labels(gpt2):
    view = attention_view(gpt2, PROMPT, layer=1, head=2)
    fig = view.plot()
    assert isinstance(fig, Figure)
    image = fig.axes[0].images[0].get_array()
    assert image is not None
    n = len(view.tokens)
    assert image.shape == (n, n)
    assert np.ma.getmaskarray(image)[np.triu_indices(n, k=1)].all()  # later keys left blank, not drawn as 0
    assert_close(np.ma.getdata(image)[np.tril_indices(n)], view.pattern(1, 2).numpy()[np.tril_indices(n)], "exact")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [t or "\u2205" for t in view.tokens]
    with pytest.raises(InputError, match="pattern has shape"):
        plot_pattern(np.zeros((3, 4)), ["a", "b", "c"])


def test_plot_grid_has_one_panel_per_head(gpt2):
    view = attention_view(gpt2, PROMPT)
    fig = view.plot()
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == len(view.layers) * len(view.heads) <= MAX_PANELS
    assert [ax.get_title() for ax in panels][:2] == ["0.0", "0.1"]
    assert len([ax for ax in view.plot(layer=1).axes if ax.images]) == len(view.heads)
    with pytest.raises(InputError, match="layer 5 is not in this view"):
        view.plot(layer=5)


def test_plot_heads_draws_the_table_as_a_layer_by_head_grid():
    table = pd.DataFrame({"layer": [0, 0, 1, 2], "head": [0, 2, 1, 2], "score": [0.1, 0.5, 0.9, 0.3], "other": ["a", "b", "c", "d"]})
    fig = plot_heads(table, "score")
    assert isinstance(fig, Figure)
    mesh = fig.axes[0].collections[0].get_array()
    assert mesh is not None
    grid = np.ma.getdata(mesh).reshape(3, 3)
    blank = np.ma.getmaskarray(mesh).reshape(3, 3) | np.isnan(grid)
    assert blank.sum() == 5 and not blank[0, 0] and blank[0, 1]
    assert grid[0, 0] == pytest.approx(0.1) and grid[1, 1] == pytest.approx(0.9) and grid[2, 2] == pytest.approx(0.3)
    assert fig.axes[0].get_xlabel() == "head" and fig.axes[0].get_ylabel() == "layer"
    wide = plot_heads(table, "score", n_layers=4, n_heads=5)
    wide_mesh = wide.axes[0].collections[0].get_array()
    assert wide_mesh is not None and wide_mesh.size == 20


@pytest.mark.parametrize(
    ("table", "column", "needle"),
    [
        (pd.DataFrame({"layer": [0], "head": [0]}), "score", "no column 'score'"),
        (
            pd.DataFrame({"layer": [0, 0], "head": [1, 1], "score": [0.1, 0.2], "detector": ["a", "b"]}),
            "score",
            "several rows for head 0.1",
        ),
        (pd.DataFrame({"layer": [-1], "head": [0], "score": [0.1]}), "score", "non-negative whole numbers"),
        (pd.DataFrame({"layer": [0], "head": [0], "score": ["x"]}), "score", "holds no number"),
        ([1, 2], "score", "pandas DataFrame"),
    ],
)
def test_plot_heads_refuses_tables_it_cannot_draw(table, column, needle):
    with pytest.raises(InputError, match=needle):
        plot_heads(table, column)


def test_attention_view_is_a_frozen_result(gpt2):
    view = attention_view(gpt2, PROMPT, layer=0, head=0)
    assert isinstance(view, AttentionView)
    with pytest.raises(AttributeError):
        view.prompt = "other"  # type: ignore[misc]  # frozen on purpose


def test_a_view_too_large_for_a_browser_is_refused_before_the_forward(gpt2, monkeypatch):
    n = len(gpt2.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]) + 1
    one_layer = embedded_bytes(1, 4, n, causal=True)
    monkeypatch.setattr(attention_component, "MAX_VIEW_BYTES", one_layer)
    assert attention_view(gpt2, PROMPT, layer=1).patterns.shape[:2] == (1, 4)  # at the limit: shown
    with pytest.raises(InputError, match=r"2 layers x 4 heads on \d+ tokens .* pick layer= \(and head=\)"):
        attention_view(gpt2, PROMPT)


def test_view_data_reads_causality_from_the_weights_and_keeps_an_encoder_s_upper_triangle():
    """The report page passes causal=None: an encoder's pattern keeps every key (the page's own
    copy before the component sent the lower triangle only, for encoders too)."""
    rng = np.random.default_rng(0)
    full = rng.random((1, 2, 5, 5)).astype(np.float32)
    full /= full.sum(-1, keepdims=True)
    causal = np.tril(full)
    causal /= causal.sum(-1, keepdims=True)
    assert not is_causal(full) and is_causal(causal)
    tokens = list("abcde")
    for pattern, tri in ((full, False), (causal, True)):
        for encoding, tol in (("f32", 0.0), ("u8", 0.5 / 255)):
            data = view_data(tokens, pattern, layers=[3], heads=[0, 1], encoding=encoding)
            assert data["causal"] is tri and data["tri"] is tri
            raw = base64.b64decode(data["att"])
            values = np.frombuffer(raw, dtype="<f4") if encoding == "f32" else np.frombuffer(raw, dtype=np.uint8) / 255.0
            sent = pattern[:, :, np.tril_indices(5)[0], np.tril_indices(5)[1]] if tri else pattern.reshape(1, 2, 25)
            assert np.abs(values.reshape(sent.shape) - sent).max() <= tol + 1e-7
    with pytest.raises(InputError, match="patterns has shape"):
        view_data(tokens, full[:, :, :4], layers=[3], heads=[0, 1])
    with pytest.raises(InputError, match="NaN"):
        view_data(tokens, np.full((1, 2, 5, 5), np.nan), layers=[3], heads=[0, 1])


#: A prompt whose tokens include whitespace alone (a line break, an indentation run).
CODE_PROMPT = "def f(a):\n    return a\n\nx = 1"


def test_token_label_shows_whitespace_as_glyphs():
    from headlens.reports.render.page.attention_component import token_label

    assert [token_label(t) for t in ["\n", " ", "    ", "\t", "", "\n\n  ", "\r\n"]] == [
        "\u21b5",
        "\u2423",
        "\u2423" * 4,
        "\u21e5",
        "\u2205",
        "\u21b5\u21b5\u2423\u2423",
        "\u240d\u21b5",
    ]
    assert token_label(" b") == " b" and token_label("a\n") == "a\u21b5" and token_label("x") == "x"


def test_whitespace_tokens_are_visible_in_the_view_data_and_the_figure(gpt2):
    """No blank box in the view, no blank tick label in view.plot(): whitespace-only tokens carry
    glyphs, given to the script as data (``labels``) by the one Python rule."""
    view = attention_view(gpt2, CODE_PROMPT, layer=1, head=2)
    blank = [t for t in view.tokens if t.isspace()]
    assert blank, f"the prompt has whitespace-only tokens: {view.tokens}"
    found = re.search(r'<script type="application/json" id="[^"]+">(.*?)</script>', view._repr_html_(), re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["tokens"] == view.tokens
    assert len(data["labels"]) == len(view.tokens)
    assert all(label.strip() for label in data["labels"]), data["labels"]
    assert "\u21b5" in data["labels"] and any(set(x) == {"\u2423"} for x in data["labels"])
    fig = view.plot()
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert all(t.strip() for t in ticks), ticks
    assert ticks == data["labels"]


def test_whitespace_glyphs_are_in_the_figure_font():
    """The glyphs draw (matplotlib warns 'Glyph ... missing from font' otherwise)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plot_pattern(np.tril(np.full((4, 4), 0.25)), ["\n", "    ", "\t", " b"])
        fig.savefig(io.BytesIO(), format="png")


def test_the_script_has_no_token_rule_of_its_own():
    """One rule (attention_component.token_label): the script shows the labels it is given."""
    script = attention_component.static_text("attention_view.js")
    assert "d.labels" in script
    assert "\\u21b5" not in script and "\u21b5" not in script and "\\u2423" not in script
