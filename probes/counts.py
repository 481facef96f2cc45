"""The one bound on every count a run takes (pairs, prompts, windows, resamples, random orders).

A count is checked before any work, in one line naming its parameter:

* it is an int (not a bool) of at least its ``minimum`` (what the statistic needs: an interval
  needs 2 items);
* it is at most :data:`MAX_COUNT`: no headlens run needs more than a million of anything, and a
  count past that is a typing slip (``--n-pairs 1000000000``) that would run for days;
* what it costs in memory (``bytes_each`` per unit, as the caller knows its arrays on this model)
  fits in :func:`memory_budget`: half of this machine's memory or what is available now, whichever
  is less (on a GPU, its free memory).

What the *task* can hold (windows a text has, pairs that fit a tokenizer) is the caller's: it
knows the text and says so in its own line.
"""

from __future__ import annotations

import logging
import os
import sys

from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["MAX_COUNT", "check_count", "memory_budget"]

#: The largest count any setting takes.
MAX_COUNT = 1_000_000
#: The memory budget when the machine's memory cannot be read.
_FALLBACK_BYTES = 8 * 2**30


def memory_budget(device: object = None) -> int:
    """Bytes a run's arrays may take: on a CUDA ``device`` its free memory now
    (``torch.cuda.mem_get_info``); else half of this machine's physical memory or what is
    available now (``MemAvailable``), whichever is less."""
    torch = sys.modules.get("torch")  # a GPU run has torch loaded; this module stays light (the CLI's --help reads it)
    if str(device or "").startswith("cuda") and torch is not None:
        free, _ = torch.cuda.mem_get_info(torch.device(str(device)))
        return max(int(free), 1)
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError) as exc:  # not a POSIX machine
        log.debug("cannot read the machine's memory (%s): budget %d bytes", exc, _FALLBACK_BYTES)
        return _FALLBACK_BYTES
    available = _available_bytes()
    return max(min(total // 2, available) if available is not None else total // 2, 1)


def _available_bytes() -> int | None:
    """What the kernel says can be allocated now without swapping (Linux's ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_count(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    bytes_each: int = 0,
    why: str = "",
    subject: str | None = None,
    maximum: int | None = None,
    why_most: str = "",
    device: object = None,
) -> int:
    """``value`` as an int when it is a count ``name`` may take (see the module doc), else a
    one-line :class:`InputError` naming ``name`` (``subject``: how the line names the count in
    place of ``name=value``, e.g. ``"task file t.jsonl holds 1 pair"``); ``why``: what the
    minimum is for; ``maximum`` (at most :data:`MAX_COUNT`): a caller's lower cap, ``why_most`` its reason;
    ``device``: where the ``bytes_each`` live (:func:`memory_budget`)."""
    said = subject or f"{name}={value!r}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be a whole number, got {value!r}", parameter=name)
    if value < minimum:
        because = f" ({why})" if why else ""
        if subject:
            raise InputError(f"{subject}; at least {minimum} needed{because}", parameter=name)
        raise InputError(f"{name} must be at least {minimum}{because}, got {value}", parameter=name)
    most = MAX_COUNT if maximum is None else min(int(maximum), MAX_COUNT)
    if value > most:
        because = (why_most or "a bound of this run") if most < MAX_COUNT else "headlens' bound on any count"
        raise InputError(f"{said}: at most {most:,} ({because})", parameter=name)
    need = value * max(bytes_each, 0)
    budget = memory_budget(device) if need else 0
    if need > budget:
        most = max(budget // bytes_each, minimum)
        where = "free on the GPU" if str(device or "").startswith("cuda") else "half of this machine's memory or what is available now"
        raise InputError(
            f"{said}: needs about {_gib(need)} of memory, more than the {_gib(budget)} ({where}) a run may take; at most {most:,}",
            parameter=name,
        )
    return int(value)
