"""core/lru.py: the one load-once LRU, behind the episode buffer (frames/episodes.py) and the remote block cache
(sources/remote_blocks.py)."""

import threading
import time
from typing import ClassVar

import pytest

from robo_loaders_plugin.core.lru import LoadOnceLRU


def test_loads_once_under_concurrency_and_evicts_lru():
    loads = []

    def load(ep):
        loads.append(ep)
        time.sleep(0.05)
        return {"ep": ep}

    cache = LoadOnceLRU(load, capacity=2)
    threads = [threading.Thread(target=cache.get, args=(1,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [1]  # four threads wanted it at once: one load
    cache.get(2), cache.get(1), cache.get(3)  # 2 is now the least recently used: evicted
    assert cache.get(1)["ep"] == 1 and loads == [1, 2, 3]
    cache.get(2)
    assert loads == [1, 2, 3, 2] and cache.loads == 4


def test_keys_loaded_ahead_are_evicted_last_until_used():
    cache = LoadOnceLRU(lambda k: k * 10, capacity=2)
    cache.load_ahead("a")  # loaded for later: oldest by recency, yet kept
    cache.get("b"), cache.get("c")  # over capacity: b (used, least recent) goes, not a
    assert set(cache._items) == {"a", "c"} and cache.loads == 3
    assert cache.get("a") == "aa" * 5 and cache.loads == 3  # used now, without a second load
    cache.get("d")  # a is an ordinary entry again: c, the least recently used, goes
    assert set(cache._items) == {"a", "d"}


def test_a_failed_load_reaches_its_caller_and_a_waiting_thread_loads_again():
    calls, started = [], threading.Event()

    def load(key):
        calls.append(key)
        if len(calls) == 1:
            started.set()
            time.sleep(0.1)
            raise OSError("remote read failed")
        return "ok"

    cache = LoadOnceLRU(load, capacity=4)
    waiter_got = []

    def first_get():
        with pytest.raises(OSError):
            cache.get(("file", 0))

    first = threading.Thread(target=first_get)
    first.start()
    started.wait()
    waiter = threading.Thread(target=lambda: waiter_got.append(cache.get(("file", 0))))
    waiter.start()  # waits for the failing load, then loads itself
    first.join()
    waiter.join()
    assert waiter_got == ["ok"] and calls == [("file", 0), ("file", 0)] and cache.loads == 1


def test_the_remote_block_cache_fetches_each_block_once_and_counts_its_bytes():
    from robo_loaders_plugin.sources.remote_blocks import BlockCache

    class FS:
        reads: ClassVar[list] = []

        def size(self, path):
            return 10

        def cat_file(self, path, start, end):
            self.reads.append((start, end))
            return bytes(range(start, end))

    cache = BlockCache(FS(), block=4, max_bytes=8)  # two blocks kept
    with cache.open("f") as f:
        assert f.read() == bytes(range(10)) and FS.reads == [(0, 4), (4, 8), (8, 10)] and cache.fetched == 10
        f.seek(4)
        assert f.read(4) == bytes(range(4, 8)) and len(FS.reads) == 3  # block 1: still cached
        f.seek(1)
        assert f.read(2) == bytes([1, 2])  # block 0 was evicted by block 2: fetched again
    assert FS.reads[3:] == [(0, 4)] and cache.fetched == 14


def test_a_remote_file_that_shrank_while_read_is_an_error_not_a_hang():
    """BlockFile.readinto looped forever when a block came back shorter than the size the file had when opened."""
    import pytest

    from robo_loaders_plugin.sources.remote_blocks import BlockCache, BlockFile

    class Shrunk:  # an fsspec filesystem whose file had 100 bytes when opened and has 40 now
        def size(self, path):
            return 100

        def cat_file(self, path, start=None, end=None):
            return b"x" * max(0, min(end, 40) - start)

    f = BlockFile(BlockCache(Shrunk(), block=16), "f")
    with pytest.raises(OSError, match="changed while being read"):
        f.read(100)


def test_a_released_key_is_evicted_first_before_older_ones():
    cache = LoadOnceLRU(lambda k: k * 10, capacity=3)
    for k in (1, 2, 3):
        cache.get(k)
    cache.release(3)  # the newest, but done
    cache.release(99)  # not cached: ignored
    cache.get(4)
    assert cache.get(1) == 10 and cache.get(2) == 20 and cache.loads == 4  # 1 and 2 kept, 3 evicted
    cache.get(3)
    assert cache.loads == 5
    control = LoadOnceLRU(lambda k: k, capacity=3)  # by recency alone the oldest goes
    for k in (1, 2, 3, 4):
        control.get(k)
    control.get(1)
    assert control.loads == 5


def test_episodes_done_by_batch_lists_each_episode_at_its_last_item():
    import numpy as np

    from robo_loaders_plugin.pipeline.batches import episodes_done_by_batch

    plan = np.array([[e, 0] for e in (0, 1, 0, 2, 1, 3, 3, 2)])  # batches of 3: [0 1 0] [2 1 3] [3 2]
    assert episodes_done_by_batch(plan, 3) == {0: [0], 1: [1], 2: [2, 3]}
    assert episodes_done_by_batch(plan[:0], 3) == {}


@pytest.mark.parametrize("many", [True, False])
def test_iter_loaded_loads_what_no_one_is_loading_before_waiting(many):
    """Two threads wanting the same keys in the same order: with ``iter_loaded`` the second loads the key the first is
    not loading instead of waiting on the first's (a 480p first batch decoded its units one after another). The load
    of "a" waits (up to 10 s) for the load of "b" to start; control (``get`` one by one): "b" waits behind "a"."""
    a_started, b_started = threading.Event(), threading.Event()
    overlapped = []

    def load(key):
        if key == "a":
            a_started.set()
            overlapped.append(b_started.wait(10 if many else 0.5))  # the control's "b" cannot start meanwhile
        else:
            b_started.set()
        return key

    cache = LoadOnceLRU(load, capacity=4)

    def fetch(keys):
        if not many:
            return [cache.get(k) for k in keys]
        out = [None] * len(keys)
        for i, value in cache.iter_loaded(keys):
            out[i] = value
        return out

    got = []
    first = threading.Thread(target=lambda: got.append(fetch(["a", "b"])))
    first.start()
    assert a_started.wait(5)
    second = threading.Thread(target=lambda: got.append(fetch(["a", "b", "c"])))
    second.start()
    first.join()
    second.join()
    assert sorted(map(tuple, got)) == [("a", "b"), ("a", "b", "c")] and cache.loads == 3
    assert overlapped == [many]


def test_a_server_ignoring_range_requests_is_named_not_a_corrupt_file():
    """A reviewer's finding: a server answering every range with the whole file had that kept as one block, and
    decoding then said the file was truncated or corrupt. A block of another length is refused, saying why.
    Control: a server answering ranges is read."""
    import pytest

    from robo_loaders_plugin.sources.remote_blocks import BlockCache

    class NoRanges:
        def size(self, path):
            return 100

        def cat_file(self, path, start=None, end=None):
            return bytes(100)

    with pytest.raises(OSError, match=r"the server answered 100 bytes for bytes 0-16 .*ignores HTTP Range requests"):
        BlockCache(NoRanges(), block=16).open("f").read(10)

    class Ranges(NoRanges):
        def cat_file(self, path, start=None, end=None):
            return bytes(end - start)

    assert BlockCache(Ranges(), block=16).open("f").read(10) == bytes(10)
