"""One framing for every prompt: the examples stage, capture, the census, the sinks study and the
ablation and design evaluation sets give the same token ids for the same text, on an encoder
(``[CLS] text [SEP]``) and on a decoder (``[BOS] text``), with and without ``prepend_bos``.

The reference is built here from the tokenizer's own special tokens (``cls_token_id``,
``sep_token_id``, ``bos_token_id``), not from :meth:`LoadedModel.frame`, so a wrong frame fails too.
TransformerLens gives BERT's tokenizer a BOS that is ``[UNK]``: a path that frames with
``bos_id`` instead of the model's framing shows ``[UNK] text`` on an encoder.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.paths import REPO_ROOT

TEXT = "Mary thanked John because she had finished the report early."
#: Window (tokens, framing included) of the window-cut paths: census, sinks, loss windows.
WINDOW = 24
ROOT = REPO_ROOT


@pytest.fixture(scope="module", params=["decoder", "encoder"])
def model(request, tiny_model, family_model):
    return tiny_model if request.param == "decoder" else family_model("bert")


def _expected_frame(model, prepend_bos: bool) -> tuple[list[int], list[int]]:
    tok = model.tokenizer
    if not prepend_bos:
        return [], []
    if model.is_encoder:
        return [int(tok.cls_token_id)], [int(tok.sep_token_id)]
    return [int(tok.bos_token_id)], []


def _framed(model, text: str, prepend_bos: bool, window: int | None = None) -> list[int]:
    """``prefix + text ids + suffix``, the text cut to fit ``window`` tokens in all."""
    prefix, suffix = _expected_frame(model, prepend_bos)
    body = [int(i) for i in model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]]
    if window is not None:
        body = body[: window - len(prefix) - len(suffix)]
    return prefix + body + suffix


def _row(tokens, length: Any = None) -> list[int]:
    row = [int(t) for t in tokens]
    return row if length is None else row[: int(length)]


def test_encoder_framing_is_not_the_tokenizer_bos(family_model):
    """The premise: an encoder's tokenizer has a BOS that is not its [CLS] (TransformerLens sets it)."""
    enc = family_model("bert")
    assert enc.is_encoder
    assert enc.frame(True) == _expected_frame(enc, True)
    assert [enc.bos_id] != enc.frame(True)[0]


@pytest.mark.parametrize("bos", [True, False])
def test_examples_stage(model, bos, tmp_path):
    from headlens.probes.prompts import token_strings
    from headlens.reports.runs.report.context import StageContext
    from headlens.reports.runs.report.stage_examples import STAGE

    settings = SimpleNamespace(example_prompts=(TEXT,), prepend_bos=bos, batch_size=2)
    ctx = StageContext(
        name="examples", dir=tmp_path, settings=settings, key={}, model=lambda: model, step=lambda *a: None, command=[], quiet=True
    )
    STAGE.run(ctx)
    shown = json.loads((tmp_path / "examples.json").read_text(encoding="utf-8"))["examples"][0]
    assert shown["tokens"] == token_strings(model.tokenizer, _framed(model, TEXT, bos))
    assert shown["truncated"] is False


@pytest.mark.parametrize("bos", [True, False])
def test_capture(model, bos):
    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig

    cap = capture(model, [TEXT], CaptureConfig(what=("pattern",), prepend_bos=bos, layers=(0,)))
    assert _row(cap.batch.tokens[0], cap.batch.lengths[0]) == _framed(model, TEXT, bos)
    prefix, suffix = _expected_frame(model, bos)
    assert (cap.batch.n_prefix, cap.batch.n_suffix) == (len(prefix), len(suffix))


@pytest.mark.parametrize("bos", [True, False])
def test_census_natural_windows(model, bos):
    from headlens.analyses.heads.census import CensusConfig, build_stimuli
    from headlens.analyses.stimuli import eval_text

    stim = build_stimuli(model, CensusConfig(n_prompts=2, window=WINDOW, prepend_bos=bos), {"natural"})["natural"]
    assert _row(stim.batch.tokens[0], stim.batch.lengths[0]) == _framed(model, eval_text(), bos, WINDOW)


@pytest.mark.parametrize("bos", [True, False])
def test_sinks_prompts_and_windows(model, bos):
    from headlens.analyses.sinks.batches import census_batch
    from headlens.analyses.sinks.config import SinkConfig
    from headlens.analyses.stimuli import eval_text

    own = census_batch(model, SinkConfig(window=WINDOW * 2, prompts=(TEXT,), bos=(bos,)), bos)
    assert _row(own.tokens[0], own.lengths[0]) == _framed(model, TEXT, bos)
    windows = census_batch(model, SinkConfig(window=WINDOW, n_prompts=2, bos=(bos,)), bos)
    assert _row(windows.tokens[0], windows.lengths[0]) == _framed(model, eval_text(), bos, WINDOW)


@pytest.mark.parametrize("bos", [True, False])
def test_ablation_eval_sets(model, bos):
    """The evaluation sets of ``headlens ablate``/``prune`` and the studies (:func:`eval_setup`, the one
    place they are chosen): loss windows, task prompts, embedding sentences."""
    from headlens.analyses.measure.evalset import TaskItem
    from headlens.analyses.measure.setup import EvalSpec, eval_setup
    from headlens.analyses.stimuli import eval_text
    from headlens.probes.errors import UnsupportedModelError

    # check=False: loss windows on any model (an encoder refuses metric='loss' otherwise)
    loss = eval_setup(model, EvalSpec(metric="loss", n_windows=1, window=WINDOW, prepend_bos=bos), check=False).data
    assert loss.metric == "loss"
    assert _row(loss.tokens[0], loss.lengths[0]) == _framed(model, eval_text(), bos, WINDOW)
    task = EvalSpec(task=[TaskItem(prompt=TEXT, correct=" the", incorrect=" a")], n_windows=1, window=WINDOW, prepend_bos=bos)
    if model.is_encoder:  # no next-token logits to read: refused before any prompt is framed
        with pytest.raises(UnsupportedModelError, match="logit-diff"):
            eval_setup(model, task)
    else:
        data = eval_setup(model, task).data
        assert data.metric == "logit-diff"
        assert _row(data.tokens[0], data.lengths[0]) == _framed(model, TEXT, bos)
    emb = eval_setup(model, EvalSpec(metric="embedding", text=TEXT, n_windows=1, window=WINDOW * 2, prepend_bos=bos, n_sentences=1)).data
    assert emb.metric == "embedding"
    assert _row(emb.tokens[0], emb.lengths[0]) == _framed(model, TEXT, bos)


@pytest.mark.parametrize("bos", [True, False])
def test_report_ablation_eval_set(model, bos, tmp_path):
    """The report's ablation stage (its data keywords through the study's :func:`eval_spec` and
    :func:`eval_setup`): loss windows on the decoder, embedding sentences on the encoder."""
    from headlens.analyses.measure.embedding import split_sentences
    from headlens.analyses.measure.setup import eval_setup
    from headlens.analyses.stimuli import eval_text
    from headlens.reports.api.ablate import eval_spec
    from headlens.reports.runs.report.context import StageContext
    from headlens.reports.runs.report.settings import ReportSettings
    from headlens.reports.runs.report.stage_ablation import _data

    settings = ReportSettings(quick=True, prepend_bos=bos)
    ctx = StageContext(
        name="ablation_zero", dir=tmp_path, settings=settings, key={}, model=lambda: model, step=lambda *a: None, command=[], quiet=True
    )
    setup = eval_setup(model, eval_spec(_data(ctx, model)))
    data = setup.data
    assert setup.metric == ("embedding" if model.is_encoder else "loss")
    if setup.metric == "loss":
        window = settings.eval_data(model.n_ctx)["window"]
        assert _row(data.tokens[0], data.lengths[0]) == _framed(model, eval_text(), bos, window)
    else:
        rows = {tuple(_row(data.tokens[i], data.lengths[i])) for i in range(len(data.lengths))}
        first = " ".join(split_sentences(eval_text(), complete_only=True)[0].split())
        assert tuple(_framed(model, first, bos)) in rows


# Every call in the package that cuts or tokenizes text for a model passes the model's framing.
_FRAMED_CALLS = {
    "tokenize_prompts": "frame",
    "text_windows": "frame",
    "text_eval_set": "frame",
    "task_eval_set": "frame",
    "locate_tokens": "wrap",
    "fit_referent_items": "wrap",
}
#: analyses/demo trains and monitors its own GPT-2 from a bare tokenizer (no LoadedModel to frame with;
#: where it does load one, the card, it frames with LoadedModel.frame).
_EXEMPT = ("analyses/demo/",)


def unframed_calls(root: Path) -> tuple[list[str], int]:
    """``(calls without their framing keyword, calls checked)`` in ``root``'s probes/, analyses/
    and reports/ (``path:line name(...) without frame=``)."""
    missing: list[str] = []
    checked = 0
    for folder in ("probes", "analyses", "reports"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(_EXEMPT):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                need = _FRAMED_CALLS.get(name) if isinstance(name, str) else None
                if not need:
                    continue
                checked += 1
                if need not in {k.arg for k in node.keywords}:
                    missing.append(f"{rel}:{node.lineno} {name}(...) without {need}=")
    return missing, checked


def test_the_framing_scan_finds_a_planted_unframed_call(tmp_path):
    """The scan below can fail: a call without its keyword (plain or through a module) is found,
    one with it is not, and analyses/demo is exempt."""
    planted = {
        "probes/a.py": "from m import text_windows\n\ntext_windows(tok, text, frame=f)\ntext_windows(tok, text)\n",
        "analyses/b.py": (
            "import stimuli\n\nstimuli.locate_tokens(items, tok, wrap=w)\nstimuli.locate_tokens(items, tok, prepend_bos=True)\n"
        ),
        "reports/c.py": "def f(tok):\n    return tokenize_prompts(tok, ['a'])\n",
        "analyses/demo/d.py": "text_windows(tok, text)\n",
    }
    for rel, text in planted.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    missing, checked = unframed_calls(tmp_path)
    assert checked == 5
    assert missing == [
        "probes/a.py:4 text_windows(...) without frame=",
        "analyses/b.py:4 locate_tokens(...) without wrap=",
        "reports/c.py:2 tokenize_prompts(...) without frame=",
    ]


def test_every_tokenizing_call_passes_the_framing():
    missing, checked = unframed_calls(ROOT)
    assert checked > 0, f"no call of {sorted(_FRAMED_CALLS)} found: renamed? update _FRAMED_CALLS"
    assert not missing, "tokenizing without the model's framing (LoadedModel.frame):\n" + "\n".join(missing)
