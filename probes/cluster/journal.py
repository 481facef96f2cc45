"""A journal of finished jobs: a JSONL file that a rerun reads to run only the jobs it does not hold.

The first line is ``{"settings": ...}``, what the results depend on; a journal written with other settings
is refused (one line naming the settings that differ).  Each later line is ``{"key": ..., "result": ...}``,
appended and flushed to disk as each job finishes.  A last line cut short (the run killed while writing it)
is dropped when the journal is opened again.  Arrays go in as their bytes (:func:`encode_array`), so a
result read back is bit for bit the one written.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from headlens.probes.errors import InputError
from headlens.probes.jsonl import read_text
from headlens.probes.outputs import write_text

log = logging.getLogger(__name__)

__all__ = ["Journal", "encode_array", "decode_array"]


def encode_array(a: np.ndarray) -> dict[str, Any]:
    """An array as JSON: dtype, shape and its bytes (base64, little-endian)."""
    a = np.ascontiguousarray(a)
    little = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return {"dtype": a.dtype.str.lstrip("<>|="), "shape": list(a.shape), "bytes": base64.b64encode(little.tobytes()).decode("ascii")}


def decode_array(d: dict[str, Any]) -> np.ndarray:
    """The array :func:`encode_array` wrote."""
    return np.frombuffer(base64.b64decode(d["bytes"]), dtype=np.dtype(d["dtype"]).newbyteorder("<")).reshape(d["shape"]).copy()


class Journal:
    """The finished jobs of one run (:attr:`done`: key -> result), appended to as jobs finish (:meth:`record`)."""

    def __init__(self, path: str | os.PathLike[str], settings: dict[str, Any]) -> None:
        self.path = Path(path)
        self.settings = json.loads(json.dumps(settings))  # the form it reads back as
        self.done: dict[str, Any] = {}
        if self.path.is_file() and self.path.stat().st_size:
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text(self.path, json.dumps({"settings": self.settings}) + "\n")

    def _read(self) -> None:
        lines = read_text(self.path, what="journal").splitlines()
        objs = []
        cut = False
        for i, line in enumerate(lines):
            try:
                objs.append(json.loads(line))
            except json.JSONDecodeError:
                if i != len(lines) - 1:
                    raise InputError(
                        f"{self.path}:{i + 1}: not a journal line; remove the journal to start afresh", path=str(self.path)
                    ) from None
                cut = True
        if not objs or not isinstance(objs[0], dict) or "settings" not in objs[0]:
            raise InputError(f"{self.path} is not a journal (no settings line); pass another journal file", path=str(self.path))
        old = objs[0]["settings"]
        if old != self.settings:
            changed = sorted(k for k in set(old) | set(self.settings) if old.get(k) != self.settings.get(k))
            raise InputError(
                f"journal {self.path} was written with other settings ({', '.join(changed)}); pass another journal file, or remove it",
                path=str(self.path),
            )
        if cut:  # only a journal's own last line is dropped: a file refused above stays as it was
            log.info("%s: its last line was cut short (an interrupted write); dropped", self.path)
            write_text(self.path, "".join(ln + "\n" for ln in lines[:-1]))
        for obj in objs[1:]:
            self.done[obj["key"]] = obj["result"]
        log.info("journal %s: %d finished job%s", self.path, len(self.done), "" if len(self.done) == 1 else "s")

    def record(self, key: str, result: Any) -> None:
        """Append one finished job, on disk before this returns."""
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "result": result}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done[key] = result
