"""Checking whether the CPU runs a half dtype draws nothing from torch's global generator:
a seeded run gives the same numbers whether or not a half-precision model was resolved first."""

from __future__ import annotations

import torch


def test_cpu_supports_leaves_the_global_generator_alone():
    from headlens.probes.devices import cpu_supports

    cpu_supports.cache_clear()  # the check runs once per process: make this call the first
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    cpu_supports(torch.bfloat16)
    assert torch.equal(torch.rand(3), expected)
