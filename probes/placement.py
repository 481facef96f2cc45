"""Where a model's layers go when it is larger than one device: ``device_map`` and ``max_memory``.

Hugging Face's ``device_map`` with accelerate does the placement (layers on several devices,
CPU and disk offload); TransformerBridge is booted on the dispatched model.  This module
checks what the caller asked for before anything loads, in one line each:

* ``device_map``: ``auto``, ``balanced``, ``sequential`` (accelerate's keywords), a mapping of
  module names to devices, or the path of a JSON file holding one.  Every name must be a
  module of the model (``""`` is the whole model) and the map must place every weight:
  transformers ignores an unknown name or an uncovered weight without a word.
* ``max_memory``: per-device budgets in accelerate's format (``{0: "20GiB", "cpu": "60GiB"}``,
  or the CLI's ``0=20GiB,cpu=60GiB``);
* the devices named exist (:class:`DeviceError`, exit 5).

After the boot :func:`realized` reads the placement accelerate chose (``hf_device_map``) and
refuses a budget that held no module (everything went to disk).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import torch
from tqdm import TqdmWarning

# accelerate (here) and transformers import ``tqdm.auto``; its first import, in a Jupyter kernel
# without ipywidgets, warns "IProgress not found" in red on every `import headlens` and the first
# model load.  Imported first here with that one warning silenced: the bars then draw as text,
# which is all the warning says.  Module caching does the rest (no filter stays in force).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
    import tqdm.auto  # noqa: F401

from headlens.probes.config import ModelConfig
from headlens.probes.errors import DeviceError, InputError

__all__ = [
    "Placement",
    "DEVICE_MAP_KEYWORDS",
    "placement_of",
    "parse_max_memory",
    "check_module_names",
    "realized",
    "input_device",
    "compute_device",
    "command_placement",
    "placement_in_force",
    "materialized",
]

log = logging.getLogger(__name__)
#: A ModelConfig or a subclass: returned as the same type.
_Config = TypeVar("_Config", bound=ModelConfig)

#: accelerate's placement strategies ``device_map`` accepts by name.
DEVICE_MAP_KEYWORDS = ("auto", "balanced", "balanced_low_0", "sequential")

#: Device names a map or a budget may use besides GPU indices (``0``, ``cuda:1``).
_OFFLOAD = ("cpu", "disk")

#: Modules listed before "..." in a one-line message.
_SHOW = 4


@dataclass(frozen=True, kw_only=True)
class Placement:
    """A checked ``device_map`` (keyword or ``{module: device}``) and ``max_memory`` (``{device: bytes}``)."""

    device_map: str | dict[str, str | int]
    max_memory: dict[str | int, int] | None = None
    #: Folder for weights accelerate offloads to disk (None: transformers reads them from the
    #: checkpoint's safetensors files where it can).
    offload_folder: str | None = None
    #: Where the map came from: the keyword, ``"mapping"`` or the JSON file's path.
    source: str = "mapping"

    def boot_kwargs(self) -> dict[str, Any]:
        """Keywords for ``TransformerBridge.boot_transformers`` (``device`` is left out: they are exclusive)."""
        kwargs: dict[str, Any] = {"device_map": self.device_map}
        if self.max_memory is not None:
            kwargs["max_memory"] = dict(self.max_memory)
        if self.offload_folder is not None:
            kwargs["offload_folder"] = self.offload_folder
        return kwargs

    def describe(self) -> dict[str, Any]:
        return {
            "device_map": self.device_map,
            "device_map_source": self.source,
            "max_memory": None if self.max_memory is None else {str(k): v for k, v in self.max_memory.items()},
            "offload_folder": self.offload_folder,
        }


def placement_of(device_map: Any, max_memory: Any = None, offload_folder: str | None = None, *, device: str = "auto") -> Placement | None:
    """The :class:`Placement` of ``load_model``'s keywords, or None (one device, as ``device`` says).

    ``max_memory`` without ``device_map`` and ``device_map`` with a ``device`` other than
    ``auto`` are refused: the map places the model, ``device`` would contradict it.
    """
    if device_map is None:
        if max_memory is not None:
            raise InputError("max_memory needs device_map= (auto, balanced or a map file)", max_memory=str(max_memory))
        return None
    if device != "auto":
        raise InputError(f"device={device!r} and device_map= both place the model; give one", device=device)
    dmap, source = _parse_device_map(device_map)
    budget = parse_max_memory(max_memory)
    if isinstance(dmap, dict):
        _refuse_gpu_with_offload(list(dmap.values()))
    for dev in (list(dmap.values()) if isinstance(dmap, dict) else []) + list(budget or {}):
        _check_device(dev)
    return Placement(
        device_map=dmap, max_memory=budget, offload_folder=None if offload_folder is None else str(offload_folder), source=source
    )


def _parse_device_map(value: Any) -> tuple[str | dict[str, str | int], str]:
    if isinstance(value, Mapping):
        return _checked_map(dict(value), "device_map"), "mapping"
    if not isinstance(value, (str, Path)):
        raise InputError(
            f"device_map must be one of {', '.join(DEVICE_MAP_KEYWORDS)}, a mapping or a JSON file, not {type(value).__name__}"
        )
    text = str(value)
    if text in DEVICE_MAP_KEYWORDS:
        return text, text
    path = Path(text).expanduser()
    if not path.is_file():
        raise InputError(
            f"device_map={text!r}: not {', '.join(DEVICE_MAP_KEYWORDS[:-1])} or {DEVICE_MAP_KEYWORDS[-1]}, and no such file",
            device_map=text,
        )
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(
            f"device_map={text!r}: not a JSON file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})", device_map=text
        ) from exc
    if not isinstance(loaded, dict):
        raise InputError(
            f'device_map={text!r}: the JSON must be an object of module names to devices, e.g. {{"transformer.h.0": 0, "lm_head": "cpu"}}',
            device_map=text,
        )
    return _checked_map(loaded, f"device_map={text!r}"), str(path.resolve())


def _checked_map(dmap: dict[Any, Any], where: str) -> dict[str, str | int]:
    if not dmap:
        raise InputError(f"{where}: the map is empty; name the modules and their devices", device_map=where)
    out: dict[str, str | int] = {}
    for name, dev in dmap.items():
        if not isinstance(name, str):
            raise InputError(f"{where}: module names must be strings, not {name!r}", device_map=where)
        if isinstance(dev, bool) or not isinstance(dev, (int, str)):
            raise InputError(
                f"{where}: the device of {name!r} must be a GPU index, 'cuda:N', 'mps', 'cpu' or 'disk', not {dev!r}", device_map=where
            )
        out[name] = dev.strip().lower() if isinstance(dev, str) else dev
        if out[name] == "meta":
            raise InputError(f"{where}: {name!r} on 'meta' has no weights to run; use 'cpu' or 'disk' to offload it", device_map=where)
    return out


def _refuse_gpu_with_offload(devices: list[str | int]) -> None:
    """transformer-lens 4.3 refuses a map that puts some modules on a GPU and offloads others
    (``cpu``/``disk``): "verified on CPU-only hardware" only.  Said here, before anything loads."""
    gpu = [d for d in devices if isinstance(d, int) or str(d).startswith("cuda")]
    offload = [d for d in devices if d in _OFFLOAD]
    if gpu and offload:
        raise DeviceError(
            f"device_map= puts modules on a GPU ({gpu[0]}) and offloads others ({offload[0]}); transformer-lens {_tl_version()} refuses"
            " to run a GPU with CPU/disk offload: use an all-GPU map (several GPUs) or an all-CPU/disk one",
            device_map="mixed",
        )


def _tl_version() -> str:
    try:
        return metadata.version("transformer-lens")
    except metadata.PackageNotFoundError:
        return "?"


def parse_max_memory(value: Any) -> dict[str | int, int] | None:
    """``"0=20GiB,cpu=60GiB"`` or ``{0: "20GiB", "cpu": 60e9}`` -> ``{0: bytes, "cpu": bytes}`` (accelerate's units)."""
    if value is None:
        return None
    if isinstance(value, str):
        pairs: list[tuple[str, str]] = []
        for item in value.split(","):
            dev, sep, size = item.partition("=")
            if not sep or not dev.strip() or not size.strip():
                raise InputError(f"max_memory={value!r}: expected DEVICE=SIZE pairs such as 0=20GiB,cpu=60GiB", max_memory=value)
            pairs.append((dev.strip(), size.strip()))
        items: list[tuple[Any, Any]] = pairs
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise InputError(
            f"max_memory must be a mapping of devices to sizes or a string such as '0=20GiB,cpu=60GiB', not {type(value).__name__}"
        )
    if not items:
        raise InputError("max_memory is empty; give a budget per device such as 0=20GiB,cpu=60GiB")
    out: dict[str | int, int] = {}
    for dev, size in items:
        key: str | int = int(dev) if isinstance(dev, str) and dev.isdigit() else (dev.lower() if isinstance(dev, str) else dev)
        out[key] = _bytes(size, key)
    return out


def _bytes(size: Any, dev: str | int) -> int:
    if isinstance(size, int) and not isinstance(size, bool):
        n = size
    elif isinstance(size, float) and size.is_integer():
        n = int(size)
    elif isinstance(size, str) and size.isdigit():
        n = int(size)
    else:
        from accelerate.utils import convert_file_size_to_int

        try:
            n = convert_file_size_to_int(str(size))
        except ValueError:
            n = -1
    if n <= 0:
        raise InputError(
            f"max_memory={f'{dev}={size}'!r}: not a size; write bytes or a number with a unit such as 20GiB, 500MB", max_memory=str(size)
        )
    return n


def _check_device(dev: str | int) -> None:
    """A device of a map or a budget exists here (GPU indices, ``cuda:N``, ``mps``, ``cpu``, ``disk``)."""
    if dev in _OFFLOAD:
        return
    if dev == "mps":
        backend = getattr(torch.backends, "mps", None)
        if backend is None or not backend.is_available():
            raise DeviceError("device_map= or max_memory= names 'mps', but MPS is not available on this machine", device=dev)
        return
    index: int | None = dev if isinstance(dev, int) else None
    if isinstance(dev, str):
        if dev == "cuda":
            index = 0
        elif dev.startswith("cuda:") and dev[5:].isdigit():
            index = int(dev[5:])
        else:
            raise InputError(
                f"device_map= or max_memory=: unknown device {dev!r}; use a GPU index (0), 'cuda:N', 'mps', 'cpu' or 'disk'",
                device=str(dev),
            )
    assert index is not None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index < 0 or index >= count:
        have = f"only {count} CUDA device(s) here" if count else "CUDA is not available on this machine"
        raise DeviceError(f"device_map= or max_memory= names GPU {index}, but {have}", device=str(dev))


def check_module_names(placement: Placement, path: str, revision: str | None, spec: str) -> None:
    """Every name of an explicit map is a module of the model and every weight is placed.

    The model is built on the meta device from its config (no weights read), as the class
    its ``config.json`` names.
    """
    if not isinstance(placement.device_map, dict):
        return
    model = _meta_model(path, revision)
    modules = {name for name, _ in model.named_modules()}
    unknown = [name for name in placement.device_map if name not in modules]
    if unknown:
        raise InputError(
            f"device_map=: {_names(unknown)} {'is not a module' if len(unknown) == 1 else 'are not modules'} of {spec} "
            f"({type(model).__name__});"
            f" its top modules are {_names(sorted(n for n in modules if n and n.count('.') <= 1))}",
            unknown=unknown,
        )
    keys = list(placement.device_map)
    weights = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    unplaced = [n for n in weights if not any(k == "" or n == k or n.startswith(k + ".") for k in keys)]
    if unplaced:
        raise InputError(
            f"device_map=: the map places no device for {_names(unplaced)}; map these modules (or a module above them) too",
            unplaced=unplaced,
        )


def _meta_model(path: str, revision: str | None) -> Any:
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, revision=revision)
    arch = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if isinstance(arch, str) else None
    if cls is None:
        cls = transformers.AutoModelForCausalLM
    from accelerate import init_empty_weights

    with init_empty_weights():
        return cls._from_config(config)  # pyright: ignore[reportAttributeAccessIssue] - every model class has it


def _names(items: list[str]) -> str:
    shown = ", ".join(repr(i) for i in items[:_SHOW])
    return shown + (f", ... ({len(items) - _SHOW} more)" if len(items) > _SHOW else "")


def realized(hf_model: Any, placement: Placement) -> dict[str, str]:
    """The placement accelerate chose (``{module: device}``, ``{"": "cpu"}`` when it kept one device).

    Raises :class:`DeviceError` when ``max_memory`` held no module: every module went to a
    device without a budget (disk), so the budget cannot hold even one layer.
    """
    got = getattr(hf_model, "hf_device_map", None) or {}
    result = {str(k): str(v) for k, v in got.items()}
    if not result:
        first = next(iter(hf_model.parameters()), None)
        result = {"": str(first.device) if first is not None else "cpu"}
    if placement.max_memory:
        budgeted = {str(k) for k in placement.max_memory if k != "disk"}
        used = set(result.values())
        if budgeted and not budgeted & (used | {str(k) for k in used}):
            shown = ",".join(f"{k}={_human(v)}" for k, v in placement.max_memory.items())
            raise DeviceError(
                f"max_memory={shown!r} cannot hold any module of the model (everything went to {', '.join(sorted(used))}); raise the "
                "budget",
                max_memory=shown,
            )
    return result


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g}{unit}"
    return f"{n}B"


def input_device(bridge: Any) -> torch.device:
    """The device input tokens go to: where the dispatched model's embedding sits (the bridge's ``cfg.device``)."""
    dev = getattr(getattr(bridge, "cfg", None), "device", None)
    return torch.device(str(dev)) if dev is not None else torch.device("cpu")


def compute_device(placement: Placement) -> torch.device:
    """The kind of device the placement computes on, for the dtype check: a GPU when the map names one
    (or, for a keyword map, when one is here), else the CPU."""
    if isinstance(placement.device_map, dict):
        devs = [str(d) for d in placement.device_map.values()]
        if any(d.isdigit() or d.startswith("cuda") for d in devs):
            return torch.device("cuda")
        return torch.device("mps") if "mps" in devs else torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


#: ``(device_map, max_memory)`` of the CLI command running now (``--device-map``/``--max-memory``).
_COMMAND: ContextVar[tuple[Any, Any] | None] = ContextVar("headlens_command_placement", default=None)


@contextmanager
def command_placement(device_map: Any, max_memory: Any) -> Iterator[None]:
    """For the block, every :func:`~headlens.probes.loading.load_model` whose config names no
    ``device_map`` uses these: how one command's ``--device-map``/``--max-memory`` reach its loads."""
    token = _COMMAND.set((device_map, max_memory))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def placement_in_force(config: _Config) -> _Config:
    """``config`` with the running command's placement filled in, where it names none itself."""
    command = _COMMAND.get()
    if command is None or config.device_map is not None or config.max_memory is not None:
        return config

    return dataclasses.replace(config, device_map=command[0], max_memory=command[1])


@contextmanager
def materialized(module: Any) -> Iterator[None]:
    """In the block, the weights of ``module`` and everything under it are real tensors on their
    execution device, also where accelerate offloaded them (to the CPU or disk, leaving meta
    placeholders that only its forward hooks fill).  For code that reads weights outside a
    forward (``W_O`` of a head); a no-op on a model that is not offloaded.  Tensors read inside
    stay valid after the block."""
    from accelerate.utils import align_module_device

    with ExitStack() as stack:
        for sub in module.modules():
            stack.enter_context(align_module_device(sub))
        yield
