"""Arrays in this machine's byte order, the one rule every reader of stored arrays follows.

Why: an HDF5 file may store an array big-endian (``>u2`` depth, ``>f4`` from some writers). robomimic serves such
arrays converted (h5py hands them over as stored, and its collate then goes through torch, which refuses a
non-native dtype), so the backends convert too, wherever a stored array enters: the HDF5 source's object-API
reads, the shards reader (shards converted by an earlier version kept a file's byte order) and ``verify``'s
comparison with the source. Caches that are rebuilt without asking (a backend's store or stored tiers) refuse an
entry holding such arrays instead, and are rebuilt from the source; converted shards are the user's artifact,
often hours of work, so they are converted as read.
"""

from __future__ import annotations

import numpy as np


def in_native_order(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself when its dtype is in this machine's byte order, else a copy that is.

    Args:
        arr: any numpy array (a structured or object array is returned as is when native).

    Returns:
        An array of the same values and shape whose dtype is native (``dtype.isnative``).
    """
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))
