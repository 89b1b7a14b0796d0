"""Recycled output arrays for batch assembly.

Why: a (64, 10, 84, 84, 3) uint8 batch array is 13.5 MB; allocating it fresh every batch costs ~3,300 page faults
and the kernel's zeroing, about as long as decompressing the frames into it. A buffer is handed out again only
when nothing outside the pool references it any more (no tensor, view or sample built on it is alive), which
CPython's reference count tells exactly, so a batch still in use is never overwritten.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from robo_loaders_plugin.storage.pages import empty_small_pages

_FREE_REFS = 3  # the pool's list, the loop variable, getrefcount's argument


class BufferPool:
    """Output arrays handed out again once nothing outside the pool references them (see the module's docstring).

    Thread-safe. Pickled (a dataset sent to spawned DataLoader workers), it keeps only its setting: each process
    recycles its own buffers.

    Args:
        max_per_shape: How many buffers of one (shape, dtype) are kept for reuse; beyond that, :meth:`empty` hands out
            arrays the pool does not keep.
    """

    def __init__(self, max_per_shape: int = 12):
        self.max_per_shape = max_per_shape
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.allocations = 0  # arrays allocated, kept or not: what recycling saves (tests and benchmarks read it)

    def empty(self, shape: tuple, dtype) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype``: a kept buffer nothing references any more, else a new one.

        Args:
            shape: The array's shape.
            dtype: Its dtype.

        Returns:
            The array; its contents are whatever a previous batch left (the caller overwrites all of it).
        """
        key = (tuple(shape), np.dtype(dtype).str)
        with self._lock:
            bufs = self._free.setdefault(key, [])
            for buf in bufs:
                if sys.getrefcount(buf) == _FREE_REFS:
                    return buf
            out = empty_small_pages(shape, dtype)
            self.allocations += 1
            if len(bufs) < self.max_per_shape:
                bufs.append(out)
            return out

    def held(self) -> tuple[int, int]:
        """What the pool keeps: its buffers and their bytes, in use or free.

        Why: the pool grows only while batches are alive together (the ones being assembled, prefetched and held by
        the training step), so a pass that drops its batches must end with as many buffers as it started the second
        pass with; this is how the tests and the benchmarks see that.

        Returns:
            ``(buffers, bytes)``.
        """
        with self._lock:
            bufs = [b for v in self._free.values() for b in v]
        return len(bufs), sum(b.nbytes for b in bufs)

    def __getstate__(self):
        return {"max_per_shape": self.max_per_shape}

    def __setstate__(self, state):
        self.__init__(state["max_per_shape"])
