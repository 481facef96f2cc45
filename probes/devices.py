"""Device and dtype selection."""

from __future__ import annotations

import torch

from headlens.probes.errors import DeviceError, InputError

__all__ = ["resolve_device", "resolve_dtype", "DTYPES"]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


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
            raise DeviceError("--device cuda asked for, but CUDA is not available on this machine (use --device auto or cpu)", device=device)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here", device=device)
    elif dev.type == "mps" and not _mps_available():
        raise DeviceError("--device mps asked for, but MPS is not available on this machine", device=device)
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"unsupported device {device!r}: use auto, cpu, cuda, cuda:N or mps", device=device)
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """float32 anywhere; bfloat16 and float16 only on a GPU (CUDA or MPS)."""
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}", dtype=dtype)
    if dtype != "float32" and device.type == "cpu":
        raise DeviceError(f"--dtype {dtype} needs a GPU; on the CPU use float32", dtype=dtype)
    return DTYPES[dtype]
