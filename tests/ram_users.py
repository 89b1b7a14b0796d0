"""A process using a RAM cache through ``storage.cached_dir.build_or_reuse`` (what the SDK does for a store that may
live in RAM, ``compressed_cache``'s, without ``cache_dir``), for tests/test_ramfile.py; run as a script it is one
of the processes of a host.

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

from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore, StoreWriter, drop_publish_lock
from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore, store_file
from robo_loaders_plugin.storage import fingerprint as fp_mod
from robo_loaders_plugin.storage.cached_dir import build_or_reuse
from robo_loaders_plugin.storage.codec import FrameCodec


class FileSource:
    """The smallest source a store is built from: one file, fingerprinted by the one staleness policy."""

    def __init__(self, path):
        self.path = str(path)

    def fingerprint(self, recorded=None):
        return fp_mod.fingerprint(self.path, lambda: hashlib.sha256(open(self.path, "rb").read()).hexdigest(), recorded)


def open_cached(src, write=None, cache_dir=None, kind="test", log=None, hang_in_build=False, max_memory=None):
    """``(store, hold, reused)`` of the cache entry of ``src``: an episode store (``store.rlc``) in the entry's
    directory, built and checked as ``compressed_cache``'s store is, in RAM without ``cache_dir``.

    ``write(writer)`` adds the episodes (default: one, ``demo_0``, whose ``low`` field is the source's bytes)."""

    def build(directory):
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
        w = StoreWriter(store_file(directory), FrameCodec(), max_bytes=max_memory)
        try:
            if write is None:
                w.add_episode("demo_0", {"low": np.frombuffer(open(src, "rb").read(), dtype=np.uint8).reshape(-1, 1)})
            else:
                write(w)
            if hang_in_build:
                print("building", flush=True)
                time.sleep(600)
            w.finish({})
        except BaseException:
            w.abort()
            raise
        drop_publish_lock(store_file(directory))

    path, hold, reused = build_or_reuse(
        kind=kind,
        source=FileSource(src),
        key={"source": str(src)},
        build=build,
        cache_dir=cache_dir,
        check=CompressedStore().verify,
        description="test store",
        option_prefix="test",
        in_ram=cache_dir is None,
        ram_budget=max_memory,
    )
    return EpisodeStore(store_file(path)), hold, reused


def open_ram(src, log=None, hang_in_build=False, max_memory=None):
    """``(store, hold, reused)`` of the RAM cache of ``src`` (:func:`open_cached`)."""
    return open_cached(src, log=log, hang_in_build=hang_in_build, max_memory=max_memory)


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
