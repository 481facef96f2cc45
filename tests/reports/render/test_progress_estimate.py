"""A long pass says its estimated time once its first unit is done (issue 46 items 10 and 14:
``--steps`` past a few thousand, ``circuit --method exact`` on a GPT-2-small-shaped model: no
line for minutes); a short one says nothing more than before."""

from __future__ import annotations

import io

from headlens.reports.render import progress as progress_mod
from headlens.reports.render.progress import ProgressBars, duration_text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _bars(monkeypatch) -> tuple[ProgressBars, Clock, io.StringIO]:
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    stream = io.StringIO()
    return ProgressBars("circuit", stream=stream, tty=False), clock, stream


def test_a_long_pass_says_its_estimate_after_its_first_unit(monkeypatch):
    bars, clock, stream = _bars(monkeypatch)
    bars("exact", 0, 144)
    clock.now += 5.0
    bars("exact", 1, 144)
    clock.now += 5.0
    bars("exact", 2, 144)
    lines = [line for line in stream.getvalue().splitlines() if "about" in line]
    assert lines == ["circuit: exact: about 12 min for 144 units (5.0 s each so far)"]


def test_without_a_zero_call_the_pass_is_timed_from_the_previous_event(monkeypatch):
    bars, clock, stream = _bars(monkeypatch)
    clock.now += 40.0  # loading, before the pass: not counted
    bars("eap-ig", 0, 2)
    bars("eap-ig", 2, 2)
    clock.now += 2.0
    bars("faithfulness", 1, 100)
    assert "faithfulness: about 3 min for 100 units (2.0 s each so far)" in stream.getvalue()
    assert "eap-ig: about" not in stream.getvalue()


def test_a_short_pass_says_no_estimate(monkeypatch):
    bars, clock, stream = _bars(monkeypatch)
    for i in range(1, 11):
        clock.now += 0.1
        bars("census", i, 10)
    assert "about" not in stream.getvalue()


def test_durations_in_words():
    assert [duration_text(x) for x in (0.42, 45, 720, 3.2 * 3600, 4.1 * 86400)] == ["0.4 s", "45 s", "12 min", "3.2 h", "4.1 days"]
