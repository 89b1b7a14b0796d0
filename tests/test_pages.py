"""storage.pages: large arrays written once get ordinary pages, not the transparent huge pages numpy asks for."""

import subprocess
import sys

import numpy as np
import pytest

from robo_loaders_plugin.storage.pages import SMALL_PAGES_MIN_BYTES, empty_small_pages

# run in a fresh interpreter: in a test process, a large array may be cut from memory the allocator already holds
# (an arena or heap an earlier test grew, its huge pages collapsed meanwhile), where advice given after the fact
# changes nothing; CI once saw -2048 kB moved process-wide, then 30 MB of huge pages inside the array's own range
_MEASURE = """
import re, sys
import numpy as np
from robo_loaders_plugin.storage.pages import empty_small_pages

def huge_kb_under(start, end):
    total, overlaps = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
            if head:
                lo, hi = int(head.group(1), 16), int(head.group(2), 16)
                overlaps = lo < end and start < hi
            elif overlaps and line.startswith("AnonHugePages:"):
                total += int(line.split()[1])
    return total

make = np.empty if sys.argv[1] == "numpy" else empty_small_pages
arr = make((64 << 20,), np.uint8)
arr[:] = 1
addr, page = arr.ctypes.data, 4096
print(huge_kb_under(-(-addr // page) * page, (addr + arr.nbytes) // page * page))
"""


def _touched_huge_kb(make: str) -> int:
    """AnonHugePages (kB) of the mappings holding a 64 MB array just written, made by ``make`` (``numpy``:
    ``np.empty``; else ``empty_small_pages``) in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, make], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
def test_large_arrays_get_no_huge_pages_where_numpy_would_get_them():
    """The control: the same array from ``np.empty`` is backed by huge pages here (else the kernel gives none and
    there is nothing to check)."""
    if _touched_huge_kb("numpy") == 0:
        pytest.skip("this kernel gives numpy no transparent huge pages (THP off or unavailable)")
    assert _touched_huge_kb("small") == 0


def test_it_is_an_empty_array_of_the_shape_and_dtype_asked():
    for shape in [(3,), (SMALL_PAGES_MIN_BYTES // 8 + 3, 2)]:
        arr = empty_small_pages(shape, np.float32)
        assert arr.shape == shape and arr.dtype == np.float32 and arr.flags.c_contiguous and arr.flags.writeable
