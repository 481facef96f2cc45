"""``headlens.sinks``' two overloads (the full study, or with ``lengths=`` the long-context one) take
its keywords as ``**settings: Unpack[SinkKeywords]``: the TypedDict names the implementation's keyword
parameters, ``lengths`` aside, with their types (so that a keyword added to one is added to the other)."""

from __future__ import annotations

import inspect
import typing

from headlens.reports.api.sinks import SinkKeywords, sinks


def test_sink_keywords_are_the_implementations_keywords():
    params = inspect.signature(sinks).parameters
    hints = typing.get_type_hints(sinks)
    keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "lengths"]
    assert list(SinkKeywords.__annotations__) == keywords
    assert typing.get_type_hints(SinkKeywords) == {n: hints[n] for n in keywords}
