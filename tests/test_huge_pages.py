"""gpu_resampler's host tiers are advised onto transparent huge pages (random-row gathers miss the TLB less)."""

from __future__ import annotations

import os

import pytest
import torch

from robo_loaders_plugin.backends.gpu_resampler.tensors import HUGE_PAGE, host_tensor

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def vm_flags(address: int) -> set[str]:
    """The kernel's VmFlags of the mapping that holds ``address`` (``hg``: advised MADV_HUGEPAGE)."""
    with open(f"/proc/{os.getpid()}/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


needs_thp = pytest.mark.skipif(
    not os.path.exists(THP) or "[never]" in open(THP).read(), reason="no transparent huge pages on this kernel"
)


@needs_thp
def test_a_large_host_tier_is_advised_onto_huge_pages():
    t = host_tensor((64, 1 << 20), torch.uint8)  # 64 MiB
    middle = t.data_ptr() + t.nbytes // 2
    assert "hg" in vm_flags(middle)
    # the control: the same allocation without the advice is not flagged, so the check can fail
    plain = torch.empty((64, 1 << 20), dtype=torch.uint8)
    assert "hg" not in vm_flags(plain.data_ptr() + plain.nbytes // 2)


@needs_thp
def test_a_small_tensor_is_left_alone():
    t = host_tensor((HUGE_PAGE // 2,), torch.uint8)
    assert "hg" not in vm_flags(t.data_ptr())
