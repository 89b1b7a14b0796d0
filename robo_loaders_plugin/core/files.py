"""File locks tried without waiting.

Why one non-blocking flock: whether a lock is free is how the caches, the RAM stores and the conversion leases tell
a live holder from a dead one (the kernel drops a dead process's locks), so "held by someone else" must be told apart
from a real error the same way everywhere.
"""
from __future__ import annotations

import errno
import fcntl

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # EACCES: what some systems return for a conflicting lock


def try_flock(fd: int, mode: int = fcntl.LOCK_EX) -> bool:
    """Take an ``flock`` on the open file ``fd`` without waiting.

    Args:
        fd: an open file descriptor (another descriptor of the same file, even in this process, is another holder).
        mode: ``fcntl.LOCK_EX`` or ``fcntl.LOCK_SH``.

    Returns:
        True when the lock is now held through ``fd``; False when another open file holds a conflicting one.

    Raises:
        OSError: any other failure (a bad descriptor, a filesystem without locks).
    """
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise
