"""gpu_resampler's host gather (numpy ``take`` without its buffered mode) equals ``index_select`` and refuses rows
outside the tensor instead of clipping them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robo_loaders_plugin.backends.gpu_resampler.tensors import host_gather


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.int64, torch.bool])
def test_equals_index_select(dtype):
    src = (torch.arange(50 * 6).reshape(50, 2, 3) % 7).to(dtype)
    rows = np.array([3, 3, 49, 0, 17], dtype=np.int64)
    out = torch.empty((5, 2, 3), dtype=dtype)
    assert host_gather(src, rows, out) is out
    assert torch.equal(out, torch.index_select(src, 0, torch.from_numpy(rows)))


@pytest.mark.parametrize("bad", [50, -1])
def test_a_row_outside_is_refused_not_clipped(bad):
    # the control: numpy's take in clip mode would serve row 49 (or 0) here without a word
    src = torch.arange(50).reshape(50, 1)
    out = torch.empty((2, 1), dtype=src.dtype)
    with pytest.raises(IndexError, match="outside the 50 rows"):
        host_gather(src, np.array([1, bad]), out)
    clipped = np.take(src.numpy(), np.array([1, bad]), axis=0, mode="clip")
    assert clipped[1, 0] in (0, 49)
