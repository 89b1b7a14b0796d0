"""A process using a RAM cache through ``store_cache.open_or_build`` (what every backend does without
``cache_dir``), for tests/test_ramfile.py; run as a script it is one of the processes of a host.

``python tests/ram_users.py MODE SOURCE LOG``: opens the RAM cache of SOURCE (a file whose bytes become the cached
array), appends its pid to LOG when it builds, prints ``<cache path> built|reused`` and then waits for a line on
stdin ("release": drop the dataset and print "released"; end of input: exit). MODE: ``plain``, ``mid-build``
(prints "building" and hangs in the middle of its build), ``exit3``/``graceful``/``ignore`` (a SIGTERM handler
installed before robo-loaders': exits 3 / lets the process run on / ignores SIGTERM).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time

import numpy as np

from robo_loaders_plugin.storage import fingerprint as fp_mod
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.store_cache import open_or_build


class FileSource:
    """The smallest source a store is built from: one file, fingerprinted by the one staleness policy."""

    def __init__(self, path):
        self.path = str(path)

    def fingerprint(self, recorded=None):
        return fp_mod.fingerprint(self.path, lambda: hashlib.sha256(open(self.path, "rb").read()).hexdigest(), recorded)


def open_ram(src, log=None, hang_in_build=False, max_memory=None):
    """``(store, hold, reused)`` of the RAM cache of ``src``."""

    def write(w):
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
        data = np.frombuffer(open(src, "rb").read(), dtype=np.uint8).reshape(-1, 1)
        w.add_episode("demo_0", {"low": data})
        if hang_in_build:
            print("building", flush=True)
            time.sleep(600)

    return open_or_build(
        kind="test",
        source=FileSource(src),
        key_desc={"source": str(src)},
        write=write,
        codec=FrameCodec(),
        cache_dir=None,
        max_memory=max_memory,
        build_workers=1,
        meta={},
        option_prefix="test",
        description="a test cache",
    )


def main(mode, src, log):
    stop = []
    if mode == "exit3":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))
    elif mode == "graceful":
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    elif mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    store, hold, reused = open_ram(src, log, hang_in_build=mode == "mid-build")
    assert bytes(store.raw(0, "low")[:, 0]) == open(src, "rb").read()
    print(store.path, "reused" if reused else "built", flush=True)
    if mode == "graceful":
        while not stop:
            time.sleep(0.05)
        assert os.path.exists(store.path)
        print("graceful stop, cache still there", flush=True)
        return
    for line in sys.stdin:
        if line.strip() == "release":
            store.close()
            hold.release()
            print("released", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
