"""core/files.py: the one non-blocking flock every lock user shares (caches, RAM stores, conversion leases)."""
import fcntl
import os

import pytest

from robo_loaders_plugin.core.files import try_flock


def test_try_flock_tells_a_held_lock_from_a_free_one(tmp_path):
    path = str(tmp_path / "lock")
    a = os.open(path, os.O_RDWR | os.O_CREAT)
    b = os.open(path, os.O_RDWR)  # another open file of the same path: another holder, even in this process
    try:
        assert try_flock(a) is True and try_flock(b) is False  # exclusive by default
        assert try_flock(b, fcntl.LOCK_SH) is False
        fcntl.flock(a, fcntl.LOCK_UN)
        assert try_flock(a, fcntl.LOCK_SH) and try_flock(b, fcntl.LOCK_SH)  # shared locks coexist
        assert try_flock(a, fcntl.LOCK_EX) is False  # upgrading while b shares it
        os.close(b)  # a lock goes with its file (as with a dead process)
        b = None
        assert try_flock(a, fcntl.LOCK_EX) is True
    finally:
        os.close(a)
        if b is not None:
            os.close(b)


def test_try_flock_raises_what_is_not_a_busy_lock():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        try_flock(r)  # a closed descriptor is an error, never "someone else holds it"
