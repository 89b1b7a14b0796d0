"""storage.pages: large arrays written once get ordinary pages, not the transparent huge pages numpy asks for."""

import re
import sys

import numpy as np
import pytest

from robo_loaders_plugin.storage.pages import SMALL_PAGES_MIN_BYTES, empty_small_pages


def _huge_kb_under(start: int, end: int) -> int:
    """AnonHugePages of the mappings overlapping ``[start, end)`` only: the process-wide sum moves with whatever
    other threads and earlier tests in this worker map, free or have collapsed meanwhile (CI once saw -2048 kB)."""
    total = 0
    with open("/proc/self/smaps") as f:
        overlaps = False
        for line in f:
            head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
            if head:
                lo, hi = int(head.group(1), 16), int(head.group(2), 16)
                overlaps = lo < end and start < hi
            elif overlaps and line.startswith("AnonHugePages:"):
                total += int(line.split()[1])
    return total


def _touched_huge_kb(make) -> int:
    arr = make((64 << 20,), np.uint8)
    arr[:] = 1
    addr = arr.ctypes.data
    page = 4096
    return _huge_kb_under(-(-addr // page) * page, (addr + arr.nbytes) // page * page)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
def test_large_arrays_get_no_huge_pages_where_numpy_would_get_them():
    """The control: the same array from ``np.empty`` is backed by huge pages here (else the kernel gives none and
    there is nothing to check)."""
    if _touched_huge_kb(np.empty) == 0:
        pytest.skip("this kernel gives numpy no transparent huge pages (THP off or unavailable)")
    assert _touched_huge_kb(empty_small_pages) == 0


def test_it_is_an_empty_array_of_the_shape_and_dtype_asked():
    for shape in [(3,), (SMALL_PAGES_MIN_BYTES // 8 + 3, 2)]:
        arr = empty_small_pages(shape, np.float32)
        assert arr.shape == shape and arr.dtype == np.float32 and arr.flags.c_contiguous and arr.flags.writeable
