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

    Thread-safe. Pickled (a dataset sent to spawned DataLoader workers), it keeps only its settings: each process
    recycles its own buffers.

    Args:
        max_per_shape: How many buffers of one (shape, dtype) are kept for reuse; beyond that, :meth:`empty` hands out
            arrays the pool does not keep.
        max_bytes: The most bytes of buffers kept, whatever their shapes (``None``: no bound but ``max_per_shape``);
            see :meth:`bound`.
        round_rows: Hand out an array of fewer rows (its first dimension) than this as the first rows of a buffer
            whose rows are rounded up to a power of two (at most this many), so that arrays of many row counts share a
            few buffers (a mixture's parts: one per component in each batch, of every size; this: the batch size,
            whose arrays share them too); 0: a buffer per shape. Settable once the owner knows its batch size.
    """

    def __init__(self, max_per_shape: int = 12, max_bytes: int | None = None, round_rows: int = 0):
        self.max_per_shape = max_per_shape
        self.max_bytes = max_bytes
        self.round_rows = int(round_rows)
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._used: dict[int, tuple] = {}  # id of each kept buffer -> its key, least recently handed out first
        self._kept_bytes = 0
        self._lock = threading.Lock()
        self.allocations = 0  # arrays allocated, kept or not: what recycling saves (tests and benchmarks read it)

    def empty(self, shape: tuple, dtype) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype``: a kept buffer nothing references any more, else a new one.

        A new one is kept while the pool has room for it (``max_per_shape``, ``max_bytes``: buffers nothing
        references, least recently handed out first, are let go to make room); else it is handed out unkept.

        Args:
            shape: The array's shape.
            dtype: Its dtype.

        Returns:
            The array; its contents are whatever a previous batch left (the caller overwrites all of it).
        """
        shape = tuple(int(n) for n in shape)
        rows, limit = (shape[0] if shape else 0), self.round_rows
        if 1 < rows < limit:  # a view of the first rows holds its buffer: recycled once neither is referenced
            whole = self._empty((min(1 << (rows - 1).bit_length(), limit),) + shape[1:], dtype)
            return whole[:rows]
        return self._empty(shape, dtype)

    def _empty(self, shape: tuple, dtype) -> np.ndarray:
        key = (shape, np.dtype(dtype).str)
        with self._lock:
            bufs = self._free.setdefault(key, [])
            for buf in bufs:
                if sys.getrefcount(buf) == _FREE_REFS:
                    self._used[id(buf)] = self._used.pop(id(buf))  # the most recently handed out
                    return buf
            out = empty_small_pages(shape, dtype)
            self.allocations += 1
            if len(bufs) < self.max_per_shape and self._room_for(out.nbytes):
                bufs.append(out)
                self._used[id(out)] = key
                self._kept_bytes += out.nbytes
            return out

    def bound(self, max_bytes: int | None) -> None:
        """Keep at most ``max_bytes`` of buffers from now on (``None``: no bound), letting go at once of buffers
        nothing references beyond it.

        Why a bound in bytes: a pool keyed by shape keeps a buffer for every shape it has seen. A mixture's
        components build parts of every size (a part per component in each batch, its rows drawn by the weights),
        and their pools kept 50-75 shapes each: 17.5 batches' bytes after six passes of three components, where the
        footprint counted 5 batches in flight (``core.in_flight``). The owner bounds the pool by those.

        Args:
            max_bytes: The bound.
        """
        with self._lock:
            self.max_bytes = None if max_bytes is None else int(max_bytes)
            self._room_for(0)

    def _room_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more can be kept within ``max_bytes``, after letting go of buffers nothing references,
        least recently handed out first, as far as needed (under the lock)."""
        if self.max_bytes is None:
            return True
        for ident, key in list(self._used.items()):
            if self._kept_bytes + nbytes <= self.max_bytes:
                break
            bufs = self._free[key]
            for i in range(len(bufs)):  # not enumerate: its cached tuple would hold a reference to the buffer
                buf = bufs[i]
                if id(buf) == ident:
                    if sys.getrefcount(buf) == _FREE_REFS:  # nothing outside the pool references it
                        del bufs[i]
                        del self._used[ident]
                        self._kept_bytes -= buf.nbytes
                    break
        return self._kept_bytes + nbytes <= self.max_bytes

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

    def release(self) -> None:
        """Forget every kept buffer (a closed dataset's): arrays still referenced by a batch live on with it, the
        others are freed now; the pool starts empty if it is used again."""
        with self._lock:
            self._free, self._used, self._kept_bytes = {}, {}, 0

    def __getstate__(self):
        return {"max_per_shape": self.max_per_shape, "max_bytes": self.max_bytes, "round_rows": self.round_rows}

    def __setstate__(self, state):
        self.__init__(state["max_per_shape"], state.get("max_bytes"), state.get("round_rows", 0))
