"""The family matrix: which study runs on which family, and what each family that does not run gives instead.

Every decoder family with a tiny checkpoint (``analyses/synthetic/families.py``: ``ALL_FAMILIES``)
is a row, and so is each of ``CHECKED_FAMILIES`` (the rest of the bridge's dense decoders); every study of
:data:`STUDIES` a column.  A cell is ``ok`` (the study's numbers equal
an independent plain Hugging Face computation, test_matrix.py), or the one-line refusal headlens
gives (:data:`REFUSALS`: the test asserts headlens refuses with that text), or a known failure
(:data:`FAILURES`: the test asserts the failure happens, so it fails once fixed and the entry must
go).  ``verify`` is expected to pass exactly on the families of
``headlens.probes.attention.RECONSTRUCTED_FAMILIES`` and to be refused on the others.
scripts/families_table.py writes docs/families.md's table from this module.
"""

from __future__ import annotations

from headlens.analyses.synthetic.families import ALL_FAMILIES, CHECKED_FAMILIES
from headlens.probes.attention import RECONSTRUCTED_FAMILIES

#: The studies of the matrix, each a test of test_matrix.py.
STUDIES: dict[str, str] = {
    "capture": "captured patterns = Hugging Face eager `output_attentions`, every layer",
    "verify": "`verify` redoes every layer's pattern and z from q, k, v within 1e-5",
    "patching": "zeroing one head = a forward pre-hook on the Hugging Face output projection",
    "circuits": "the circuit graph's additivity check passes (or refuses in one line)",
    "sinks": "sink removal acts: layer 0's pattern = Hugging Face's renormalised without key 0",
    "kv": "KV bytes saved by pruning = KV heads freed x 2 x d_head x 1,000 tokens x 4 bytes",
    "half": "bfloat16 load: captured patterns finite, = Hugging Face eager in bfloat16 within 0.1",
}

#: The decoder families of the matrix (one tiny checkpoint each per test session).
FAMILIES: tuple[str, ...] = ALL_FAMILIES + CHECKED_FAMILIES


#: Encoder families -> (the model class tested, where): their matrix is tests/probes/test_capture_encoders.py
#: (capture and verify against Hugging Face eager, padding), the circuit graph refuses encoders.
ENCODERS: dict[str, tuple[str, str]] = {
    "bert": ("BertForMaskedLM; the real all-MiniLM-L6-v2", "tests/probes/test_capture_encoders.py"),
    "roberta": ("RobertaForMaskedLM", "tests/probes/test_capture_encoders.py"),
}

_GRANITE = "residual_multiplier scales each block's output before the stream, so readers do not read the writers' sum"

_NO_READER = "the bridge never runs {hook} on {family}, so the circuit graph has no input for that reader"

#: (family, study) -> a substring of headlens's one-line refusal (UnsupportedModelError), and why.
REFUSALS: dict[tuple[str, str], tuple[str, str]] = {
    ("granite", "circuits"): ("read the sum of the writers", _GRANITE),
    **{
        (family, "circuits"): ("never runs blocks.0.hook_mlp_in", _NO_READER.format(hook="blocks.0.hook_mlp_in", family=family))
        for family in ("phi", "cohere", "falcon", "bloom", "cohere2")
    },
    ("xglm", "sinks"): (
        "computes attention inside Hugging Face code",
        "XGLM's attention runs inside Hugging Face code that the bridge neither hooks nor replaces, so a score edit would not act",
    ),
    ("mpt", "circuits"): ("never runs blocks.0.attn.hook_q_input", _NO_READER.format(hook="blocks.0.attn.hook_q_input", family="mpt")),
    **{
        (family, "half"): (
            "multiplies a float32 pattern by half-precision values",
            "TransformerLens' OLMo attention keeps a float32 pattern in a half-precision model (its pattern @ v raises); refused at load",
        )
        for family in ("olmo", "olmo2", "olmo3", "flex_olmo")
    },
}

#: (family, study) -> (the exception type's name, what goes wrong and where the fix belongs).
FAILURES: dict[tuple[str, str], tuple[str, str]] = {}


def verify_refused(family: str) -> bool:
    """True when ``verify`` is expected to refuse ``family`` (its attention is not redone from q and k yet)."""
    return family not in RECONSTRUCTED_FAMILIES


def expected(family: str, study: str) -> str:
    """``ok``, ``refused`` or ``fails``: what the matrix asserts for ``study`` on ``family``."""
    if (family, study) in FAILURES:
        return "fails"
    if (family, study) in REFUSALS or (study == "verify" and verify_refused(family)):
        return "refused"
    return "ok"
