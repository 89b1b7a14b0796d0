"""Integer index arrays packed small for a process boundary.

Why: a spawned DataLoader worker receives its dataset through a pipe, and a payload larger than the pipe's buffer
(64 kB on Linux) blocks the parent until that worker has imported torch and LeRobot, so the workers start one
after the other. At 10,000 episodes every per-episode int64 array is 80 kB on its own (what that cost at a million
frames: docs/benchmarks.md, *Measurements behind the code*). Index arrays
are nearly regular (run starts, episode bounds), so their first differences fit a small integer type and compress
to a few kB; they are exact: unpacking gives the same values, dtype and shape.
"""

from __future__ import annotations

import zlib

import numpy as np

_SMALL = (np.int8, np.int16, np.int32, np.int64)


def pack_ints(values) -> tuple:
    """An integer array as ``(dtype, shape, difference dtype, zlib bytes)``: its first differences (flattened, the
    first against 0) in the smallest signed type that holds them, compressed.

    Args:
        values: An integer (or boolean) numpy array, or anything ``np.asarray`` makes one of.

    Returns:
        The packed tuple (plain bytes and strings: picklable anywhere).

    Raises:
        TypeError: ``values`` is not an integer array.
    """
    a = np.asarray(values)
    if a.dtype.kind not in "iub":
        raise TypeError(f"pack_ints packs integer arrays, not {a.dtype}")
    d = np.diff(a.reshape(-1).astype(np.int64), prepend=0)
    small = next(t for t in _SMALL if not d.size or (np.iinfo(t).min <= d.min() and d.max() <= np.iinfo(t).max))
    return a.dtype.str, a.shape, np.dtype(small).str, zlib.compress(d.astype(small).tobytes(), 1)


def unpack_ints(packed: tuple) -> np.ndarray:
    """The array :func:`pack_ints` packed (same values, dtype and shape).

    Args:
        packed: What :func:`pack_ints` returned.

    Returns:
        A new, writable array.
    """
    dtype, shape, small, blob = packed
    d = np.frombuffer(zlib.decompress(blob), dtype=small).astype(np.int64)
    return np.cumsum(d).astype(dtype).reshape(shape)
