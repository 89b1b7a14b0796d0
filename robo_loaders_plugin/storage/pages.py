"""Large arrays written once, right after allocation, backed by ordinary 4 kB pages instead of transparent huge pages.

Why: numpy asks the kernel for transparent huge pages on every large array (``madvise(MADV_HUGEPAGE)``), and on
kernels whose THP ``defrag`` setting is ``madvise`` (a common default) each first touch of a 2 MB page then
allocates, and may compact memory for, a huge page in the faulting thread. A pass that decodes units and
assembles batches writes each array once, straight after allocating it, so it pays that at the worst time: its
first batch waits for it (measured: docs/benchmarks.md, *Measurements behind the code*). Small pages change
nothing else: the arrays are read by copies, where the TLB is not what bounds them.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np

_MADV_NOHUGEPAGE = 15  # linux/mman.h
SMALL_PAGES_MIN_BYTES = 4 << 20  # below this, numpy does not ask for huge pages either (its threshold is 4 MB)
_madvise = None


def _libc_madvise():
    global _madvise
    if _madvise is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            fn.restype = ctypes.c_int
            _madvise = fn
        except (OSError, AttributeError):
            _madvise = False
    return _madvise


def empty_small_pages(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, its pages not transparent huge pages (Linux; elsewhere just ``np.empty``).

    Args:
        shape: The array's shape.
        dtype: Its dtype.

    Returns:
        The uninitialised array; advised before anything touched it, so none of its pages is a huge page.
    """
    out = np.empty(shape, dtype=dtype)
    if out.nbytes < SMALL_PAGES_MIN_BYTES or not sys.platform.startswith("linux"):
        return out
    madvise = _libc_madvise()
    if madvise:
        page = mmap.PAGESIZE
        addr = out.ctypes.data
        start = -(-addr // page) * page  # whole pages inside the array (the first may hold malloc's header)
        end = (addr + out.nbytes) // page * page
        if end > start:
            madvise(start, end - start, _MADV_NOHUGEPAGE)  # advice: a failure leaves the default, nothing wrong
    return out
