"""``build_tracr_model``: compile a tracr program, write it as a GPT-2 checkpoint, its ground truth, and check it.

The folder holds the checkpoint (``config.json``, ``model.safetensors``, the word-level tokenizer),
``program.py`` (the builder and the source of the tracr library functions it calls), ``ground_truth.json``
(:func:`headlens.analyses.tracr.ground_truth.ground_truth`), ``agreement.json`` (the check of
:mod:`headlens.analyses.tracr.agreement` on every input of the stated set), ``residual_labels.json`` and
``tracr_manifest.json`` (program, versions, layout, norm tolerance) and ``pairs.jsonl`` (clean/corrupt pairs from
the program's input space, :func:`headlens.analyses.tracr.scoring.tracr_pairs`: a task file for
``patch --task``).  Everything is written into a
temporary sibling folder and moved into place only after the check passes, so a refused program leaves
nothing behind and an existing folder is replaced only with ``overwrite=True``.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from headlens.analyses.tracr.agreement import Agreement, check_agreement
from headlens.analyses.tracr.compile import compile_program
from headlens.analyses.tracr.convert import LN_EPS, LN_WEIGHT, word_of, write_checkpoint
from headlens.analyses.tracr.ground_truth import GROUND_TRUTH_FORMAT, ground_truth, mark_input_dependence, sender_writes
from headlens.analyses.tracr.programs import ProgramSpec, all_inputs, program_spec, require_tracr
from headlens.analyses.tracr.scoring import tracr_pairs
from headlens.probes.errors import InputError
from headlens.probes.loading import load_model
from headlens.probes.manifest import package_versions
from headlens.probes.outputs import atomic_dir, check_out_dir

__all__ = ["TracrModel", "build_if_stale", "build_tracr_model", "read_ground_truth"]

#: Clean/corrupt pairs written to pairs.jsonl (seed 0) for `headlens patch --task` and `headlens circuit`.
PAIRS = 32


@dataclass(kw_only=True)
class TracrModel:
    """A converted tracr program: where it was written, its ground truth and the agreement check."""

    program: str
    folder: Path
    truth: dict[str, Any]
    agreement: Agreement

    def summary(self) -> str:
        a = self.agreement
        return (f"{self.program}: {len(self.truth['edges'])} true edges; agrees with RASP on "
                f"{a.n_positions - a.n_disagree}/{a.n_positions} "
                f"positions of {a.n_inputs} inputs ({a.n_undefined} undefined) -> {self.folder}")  # fmt: skip


def read_ground_truth(folder: str | Path) -> dict[str, Any]:
    """The ``ground_truth.json`` of a folder written by :func:`build_tracr_model`."""
    path = Path(folder) / "ground_truth.json"
    if not path.is_file():
        raise InputError(f"{folder} has no ground_truth.json: not a folder written by build_tracr_model")
    return json.loads(path.read_text())


def build_if_stale(program: str, folder: str | Path) -> None:
    """Build ``program`` into ``folder`` (overwriting) unless it holds a ground truth of this code's format (a cache)."""
    path = Path(folder) / "ground_truth.json"
    if not path.is_file() or json.loads(path.read_text()).get("format") != GROUND_TRUTH_FORMAT:
        build_tracr_model(program, folder, overwrite=True)


def _source(spec: ProgramSpec) -> str:
    from tracr.compiler import lib

    parts = [f"# tracr program {spec.name!r}: {spec.about}", f"# vocab={list(spec.vocab)!r} max_seq_len={spec.max_seq_len} "
             f"causal=True semantics={spec.semantics!r}", "", "# The builder (headlens.analyses.tracr.programs):",
             inspect.getsource(spec.build)]  # fmt: skip
    for name in spec.library:
        parts += [f"# tracr.compiler.lib.{name} (tracr-pypi, Apache-2.0):", inspect.getsource(getattr(lib, name))]
    return "\n".join(parts)


def _tracr_own(compiled: Any, agreement: Agreement) -> int:
    """How many of the disagreeing positions tracr's own compiled (jax) model also gets wrong."""
    wrong = 0
    for ex in agreement.examples:
        values = [type(compiled.spec.vocab[0])(v) for v in ex["input"]]
        got = compiled.assembled.apply([compiled.bos, *values]).decoded[1:][ex["position"]]
        if not compiled.categorical:  # tracr's number, named by the nearest output value (as the checkpoint does)
            got = min(compiled.output_values, key=lambda v: abs(float(v) - float(got)))
        if word_of(got, numerical=not compiled.categorical) != ex["rasp"]:
            wrong += 1
    return wrong


def build_tracr_model(
    program: str, out: str | Path, *, overwrite: bool = False, max_seq_len: int | None = None, mlp_exactness: int = 100
) -> TracrModel:
    """Compile ``program`` (a name of :data:`~headlens.analyses.tracr.programs.PROGRAMS`) and write it into ``out``.

    ``max_seq_len`` replaces the program's default length (the model's context is one more, for BOS; every
    input up to it is checked, 3**n of each length n).
    Raises :class:`InputError` for an unknown program, for a program whose causal compilation does not
    compute it (tracr's own model disagrees with RASP as the checkpoint does), and :class:`OutputExistsError`
    when ``out`` holds files (or is a file) and ``overwrite`` is False; an empty folder is written into."""
    spec = program_spec(program)
    if max_seq_len is not None:
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or not 1 <= max_seq_len <= 8:
            raise InputError(f"max_seq_len must be a whole number from 1 to 8 (every input is checked), got {max_seq_len!r}")
        spec = replace(spec, max_seq_len=max_seq_len)
    dest = check_out_dir(out, overwrite=overwrite)  # an empty folder is written into, as every command's --out is
    require_tracr()
    compiled = compile_program(spec, mlp_exactness=mlp_exactness)
    with atomic_dir(dest) as tmp:  # appears whole; a symlink's or a mount point's folder is written into
        lay = write_checkpoint(compiled, tmp)
        truth = ground_truth(compiled)
        model = load_model(model=str(tmp), device="cpu", dtype="float32")
        agreement = check_agreement(model, compiled.program, spec, numerical=not compiled.categorical)
        if not agreement.agrees:
            own = _tracr_own(compiled, agreement)
            ex = agreement.examples[0] if agreement.examples else {}
            if own == len(agreement.examples):
                raise InputError(
                    f"tracr program {program!r} cannot be compiled causally: tracr's causal model disagrees with the RASP program "
                    f"({'on prefixes' if spec.semantics == 'prefix' else 'exactly'}) on {agreement.n_disagree} of {agreement.n_positions} "
                    f"positions, e.g. {' '.join(ex.get('input', []))} at {ex.get('position')}: "
                    f"RASP {ex.get('rasp')}, model {ex.get('model')}"
                )
            raise RuntimeError(f"conversion of {program!r} disagrees with tracr's own model on {agreement.n_disagree} positions: {ex}")
        full = [[str(v) for v in x] for x in all_inputs(spec) if len(x) == spec.max_seq_len]
        mark_input_dependence(truth, sender_writes(str(tmp), full), lay.labels(compiled.residual))
        pairs = tracr_pairs(spec, compiled.program, numerical=not compiled.categorical, n_pairs=PAIRS, seed=0)
        lines = [
            json.dumps({"clean": p.clean, "corrupt": p.corrupt, "correct": p.correct, "incorrect": p.incorrect, "where": p.where})
            for p in pairs
        ]
        (tmp / "pairs.jsonl").write_text("\n".join(lines) + "\n")
        (tmp / "ground_truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        (tmp / "agreement.json").write_text(json.dumps(agreement.describe(), indent=1) + "\n")
        (tmp / "program.py").write_text(_source(spec))
        manifest = {
            "program": spec.describe(), "family": "gpt2", "causal": True, "mlp_exactness": mlp_exactness,
            "layout": {"tracr_residual": lay.D, "d_model": lay.d_model, "n_heads": lay.n_heads, "d_head": lay.d_head,
                       "tracr_key_size": compiled.key_size, "one": lay.one, "sink": lay.sink},
            "norm": {"layer_norm_epsilon": LN_EPS, "weight": LN_WEIGHT, "tolerance": "scale exactly 1 in float32 while var < 2**23 "
                     "(1 - var/2**49 if added in float64); mean removed exactly by zero-sum reader rows"},
            "versions": package_versions() | {"tracr-pypi": _dist_version("tracr-pypi"), "jax": _dist_version("jax")},
        }  # fmt: skip
        (tmp / "tracr_manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return TracrModel(program=program, folder=dest, truth=truth, agreement=agreement)


def _dist_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None
