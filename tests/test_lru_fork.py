"""``core.lru.LoadOnceLRU`` in a process forked while another thread was loading a key (a DataLoader worker started
by ``fork`` while decode-ahead threads run): the child inherited the load's event, which no thread of the child
would ever set, and its first ``get`` of that key waited forever (a reviewer's reading, reproduced here)."""

import os
import sys
import threading

import pytest

from robo_loaders_plugin.core import lru
from robo_loaders_plugin.core.lru import LoadOnceLRU


def _forked_get(cache, key, timeout=10.0):
    """``cache.get(key)`` in a child forked now: its value, or ``None`` when the child is still waiting after
    ``timeout`` seconds (then killed)."""
    import select
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            os.write(w, repr(cache.get(key)).encode())
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout)
    out = os.read(r, 1000).decode() if ready else None
    if out is None:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(r)
    return out


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="fork")
def test_a_child_forked_during_a_load_loads_the_key_itself():
    """Control: with the cache's state as the fork left it (the reset undone), the child waits."""
    release, started = threading.Event(), threading.Event()

    def load(key):
        if threading.current_thread().name == "loader":
            started.set()
            release.wait(30)
        return f"{key}-loaded"

    cache = LoadOnceLRU(load, capacity=4)
    loader = threading.Thread(target=cache.get, args=("ep0",), name="loader")
    loader.start()
    started.wait(10)
    try:
        assert _forked_get(cache, "ep0") == "'ep0-loaded'"
        lru._CACHES.discard(cache)  # control: not made ready after the fork, the child waits for the parent's load
        try:
            assert _forked_get(cache, "ep0", timeout=1.0) is None
        finally:
            lru._CACHES.add(cache)
    finally:
        release.set()
        loader.join()
