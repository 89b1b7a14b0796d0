"""One bounded cache of values loaded on demand, shared by threads: loaded episodes (``frames/episodes.py``) and
blocks of remote video files (``sources/remote_blocks.py``).

Why load-once: several threads often want the same key at the same moment (the assembling threads of a batch
want the same episode; the decoders of neighbouring episodes want the same block of a file). Loading it in each
of them would multiply the slowest part (a decode, a remote read), so the first thread loads it and the others
wait for that load; the cache's lock is never held while loading, so other keys load at the same time.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

# every cache of this process, made ready again in a forked child (_after_fork)
_CACHES: weakref.WeakSet = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child: each cache's lock made anew (another thread may have held it at the fork) and the loads
    in flight forgotten (the threads loading them are not in the child: waiting for their events never ended)."""
    for cache in list(_CACHES):
        cache._lock = threading.Lock()
        cache._loading = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class LoadOnceLRU[K: Hashable, V]:
    """Values by key, ``load(key)`` called once per key while it stays cached; at most ``capacity`` kept, the least
    recently used evicted first.

    A key loaded *ahead* (``get(key, ahead=True)``, e.g. by DecodeAhead) and not asked for since is evicted last:
    by recency alone it would be the first to go (loaded before the keys used since) and be loaded a second time
    when its turn comes.

    Args:
        load: the loader, called outside the cache's lock; an error it raises reaches the caller that loaded, and
            the threads that waited try again.
        capacity: how many values are kept (at least 1).

    Attributes:
        loads: how many times ``load`` has returned (a key evicted and asked for again counts twice).
    """

    def __init__(self, load: Callable[[K], V], capacity: int):
        self.load, self.capacity = load, max(1, int(capacity))
        self._items: OrderedDict[K, V] = OrderedDict()
        self._unused: set[K] = set()  # loaded ahead, not asked for yet
        self._lock = threading.Lock()
        self._loading: dict[K, threading.Event] = {}
        self.loads = 0
        _CACHES.add(self)

    def get(self, key: K, ahead: bool = False) -> V:
        """The value of ``key``, loaded now (or by the thread already loading it) unless cached.

        Args:
            key: what to look up.
            ahead: a load for later, not a use: the value does not move up the recency order and is kept until
                asked for without ``ahead``.

        Returns:
            The cached or newly loaded value.
        """
        while True:
            with self._lock:
                if key in self._items:
                    if not ahead:
                        self._items.move_to_end(key)
                        self._unused.discard(key)
                    return self._items[key]
                event = self._loading.get(key)
                if event is None:
                    event = self._loading[key] = threading.Event()
                    break
            event.wait()
        try:
            value = self.load(key)
            with self._lock:
                self.loads += 1
                self._items[key] = value
                if ahead:
                    self._unused.add(key)
                while len(self._items) > self.capacity:
                    victim = next((k for k in self._items if k not in self._unused), None)
                    if victim is None:
                        victim = next(iter(self._items))
                    del self._items[victim]
                    self._unused.discard(victim)
            return value
        finally:
            with self._lock:
                self._loading.pop(key, None)
            event.set()

    def iter_loaded(self, keys: list[K]) -> Iterator[tuple[int, V]]:
        """``(position in keys, value)`` of every key: cached ones first, then those no other thread is loading
        (loaded here), and last those another thread is loading (waited for).

        Why: the threads assembling consecutive batches want mostly the same keys, in the same (sorted) order. Asked
        for one by one, the second thread waits on the first's load of its first key while its next key, which no
        one is loading, waits too; a 480p first batch then decoded its shuffle buffer's units one after another.
        Loading what no one else is loading first keeps every thread decoding. Values are yielded one at a time, so a
        caller that uses and drops each holds no more than it did with :meth:`get`.

        Args:
            keys: What to look up (each once).

        Yields:
            ``(i, value of keys[i])``, every position once.
        """
        busy = []
        for i, key in enumerate(keys):
            with self._lock:
                loading = key not in self._items and key in self._loading
            if loading:
                busy.append(i)
            else:  # cached (``get`` marks it used) or loaded here (unless another thread began meanwhile)
                yield i, self.get(key)
        for i in busy:
            yield i, self.get(keys[i])

    def release(self, key: K) -> None:
        """``key`` will not be asked for again soon (its last use in a pass is served): it is the first evicted.

        Why: recency alone may evict a value still in use (an episode of the shuffle buffer not drawn for a few
        batches) while keeping one that is done; whoever knows the order (the pipeline's plan) says which are done.

        Args:
            key: A cached key (others are ignored).
        """
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key, last=False)
                self._unused.discard(key)

    def load_ahead(self, key: K) -> None:
        """Load ``key`` for later (``get(key, ahead=True)``), e.g. from a decode-ahead thread.

        Args:
            key: What to load; it stays cached, evicted last, until asked for with :meth:`get`.
        """
        self.get(key, ahead=True)
