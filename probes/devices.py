"""Device and dtype selection, and the tolerances each dtype is checked to.

Half precision: bfloat16 and float16 on CUDA and MPS; on the CPU too, where this torch runs
the operations a transformer forward needs in that dtype (:func:`cpu_supports`: matmul,
softmax, layer norm, GELU, SDPA on a few numbers), else a one-line refusal (exit 5).
:data:`TOLERANCES` is the one place the per-dtype tolerances are stated.
"""

from __future__ import annotations

from functools import cache

import torch

from headlens.probes.errors import DeviceError, InputError

__all__ = ["resolve_device", "resolve_dtype", "cpu_supports", "DTYPES", "TOLERANCES", "tolerance"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

#: Absolute tolerances per dtype, stated here only (measured gaps in tests/probes/test_devices_half_precision.py):
#:
#: * ``verify``: largest error of the attention recomputed from the captured q and k (in
#:   float32) against the captured pattern, and of ``pattern @ V`` against ``hook_z``
#:   (:mod:`headlens.analyses.heads.verify`): the rounding of q, k, v, the pattern and z to
#:   the dtype (a relative step of 2**-8 in bfloat16, 2**-11 in float16) bounds it.
#: * ``pattern``: largest difference of one attention weight (captured pattern) from the same
#:   model run in float32 (weights rounded to the dtype once; softmax in float32 where the
#:   family computes it so): rounding carried through the layers (bfloat16 measured up to
#:   0.042 on a 2-layer Llama, float16 0.007).
#: * ``score``: largest difference of a census score or interval end (a mean of attention
#:   weights; the detectors reduce in float32 and float64) from float32 (measured 0.0015, 0.0002).
#: * ``loss``: largest difference of a per-window loss (nats) or an ablation's loss change from
#:   float32 (measured 0.012, 0.001).
TOLERANCES: dict[str, dict[str, float]] = {
    "float32": {"verify": 1e-4, "pattern": 0.0, "score": 0.0, "loss": 0.0},
    "float16": {"verify": 5e-3, "pattern": 2e-2, "score": 2e-3, "loss": 1e-2},
    "bfloat16": {"verify": 3e-2, "pattern": 1e-1, "score": 1e-2, "loss": 5e-2},
}


def tolerance(dtype: torch.dtype | str, what: str) -> float:
    """``TOLERANCES[dtype][what]`` (``dtype`` a torch dtype or its name)."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    return TOLERANCES[name][what]


@cache
def cpu_supports(dtype: torch.dtype) -> bool:
    """Whether this torch runs a transformer forward's operations in ``dtype`` on the CPU."""
    if dtype == torch.float32:
        return True
    try:
        # fixed values, not torch.randn: the check must not draw from the global generator
        # (it runs once per process, so a seeded run would differ before and after it)
        x = torch.linspace(-1.0, 1.0, 64).reshape(2, 4, 8).to(dtype)
        w = torch.linspace(1.0, -1.0, 64).reshape(8, 8).to(dtype)
        y = torch.addmm(torch.zeros(8, dtype=dtype), x[0], w) + (x @ w).sum()
        torch.nn.functional.layer_norm(y, (8,))
        torch.nn.functional.gelu(torch.softmax(y, -1))
        torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
        torch.baddbmm(torch.zeros(2, 4, 4, dtype=dtype), x, x.transpose(1, 2))
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA, then MPS, then CPU; an explicit device must exist."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise InputError(f"unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps", device=device) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                "device='cuda' asked for, but CUDA is not available on this machine (use device='auto' or device='cpu')", device=device
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) here", device=device)
    elif dev.type == "mps" and not _mps_available():
        raise DeviceError("device='mps' asked for, but MPS is not available on this machine", device=device)
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"unsupported device {device!r}: use auto, cpu, cuda, cuda:N or mps", device=device)
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """float32 anywhere; bfloat16 and float16 on a GPU (CUDA or MPS), and on the CPU where this
    torch runs them (:func:`cpu_supports`)."""
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}", dtype=dtype)
    if device.type == "cpu" and not cpu_supports(DTYPES[dtype]):
        raise DeviceError(f"dtype={dtype!r}: this torch ({torch.__version__}) cannot run it on the CPU; use float32 or a GPU", dtype=dtype)
    return DTYPES[dtype]
