"""The torchdata.nodes graph: batch plan -> parallel read/decompress/assemble -> prefetch -> Loader.

Why the order is planned up front: which windows form which batch depends only on the episode lengths (in the
shard index), the seed and the epoch, so the plan is computed without touching data, every window appears exactly
once per pass (or, with replacement, a pass is a seeded draw of as many windows), and the pipeline's whole state is
(epoch, batches yielded): a stopped run resumes on the same next batch after ``load_state_dict``. Locality comes
from an episode buffer: episodes enter in a shuffled order, at most ``buffer_episodes`` are open at once, and windows
are drawn at random from the open ones, so each episode is read and decompressed about once per pass while batches
still mix many episodes.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
from torchdata.nodes import BaseNode, Loader, ParallelMapper, Prefetcher


def plan_windows(windows_per_episode: Sequence[int], seed: int, epoch: int, buffer_episodes: int,
                 shuffle: bool = True, replacement: bool = False) -> np.ndarray:
    """(N, 2) array of (episode, window) in the order they are served in this pass; each pair exactly once, or,
    with ``replacement``, N pairs drawn uniformly with replacement (the multiset is drawn first, then served through
    the same episode buffer, so locality is kept). Without ``shuffle`` the pass is in dataset order and
    ``replacement`` does not apply: an ordered pass is what evaluation-style callers ask for."""
    counts = np.asarray(windows_per_episode, dtype=np.int64)
    if not shuffle:
        return np.stack([np.repeat(np.arange(len(counts)), counts),
                         np.concatenate([np.arange(c) for c in counts]) if len(counts) else np.zeros(0, int)], 1)
    rng = np.random.default_rng([int(seed), int(epoch)])
    if replacement:
        total = int(counts.sum())
        # uniform over all windows (not over episodes), as torch's RandomSampler(replacement=True) draws indices
        flat = np.sort(rng.integers(total, size=total)) if total else np.zeros(0, np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        bounds = np.searchsorted(flat, starts)
        drawn = [flat[bounds[e]:bounds[e + 1]] - starts[e] for e in range(len(counts))]
        served = np.array([len(d) for d in drawn], dtype=np.int64)

        def windows_of(ep):
            return rng.permutation(drawn[ep]).tolist()
    else:
        served = counts

        def windows_of(ep):
            return rng.permutation(counts[ep]).tolist()
    order = rng.permutation(len(counts)).tolist()
    out = np.empty((int(served.sum()), 2), dtype=np.int64)
    buffer: list[list] = []  # [episode, remaining windows (shuffled)]
    n = 0
    while order or buffer:
        while order and len(buffer) < buffer_episodes:
            ep = order.pop(0)
            if served[ep]:
                buffer.append([ep, windows_of(ep)])
        if not buffer:  # only episodes nothing was drawn from are left
            break
        j = int(rng.integers(len(buffer)))
        ep, remaining = buffer[j]
        out[n] = (ep, remaining.pop())
        n += 1
        if not remaining:
            buffer.pop(j)
    return out


class BatchPlanNode(BaseNode):
    """Yields one batch of (episode, window) pairs at a time; state = epoch and batches already yielded."""

    def __init__(self, windows_per_episode, batch_size: int, drop_last: bool, seed: int, buffer_episodes: int,
                 shuffle: bool = True, replacement: bool = False):
        super().__init__()
        self.counts = list(windows_per_episode)
        self.batch_size, self.drop_last, self.seed = int(batch_size), bool(drop_last), int(seed)
        self.buffer_episodes, self.shuffle, self.replacement = int(buffer_episodes), bool(shuffle), bool(replacement)
        self.epoch = -1
        self._plan = None
        self._batch = 0

    def num_batches(self) -> int:
        n = sum(self.counts)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def reset(self, initial_state=None):
        super().reset(initial_state)
        if initial_state is not None:
            self.epoch, self._batch = int(initial_state["epoch"]), int(initial_state["batch"])
        else:
            self.epoch, self._batch = self.epoch + 1, 0
        self._plan = plan_windows(self.counts, self.seed, self.epoch, self.buffer_episodes, self.shuffle,
                                  self.replacement)

    def next(self):
        if self._batch >= self.num_batches():
            raise StopIteration
        b = self._batch
        self._batch += 1
        return self._plan[b * self.batch_size:(b + 1) * self.batch_size]

    def get_state(self):
        return {"epoch": self.epoch, "batch": self._batch}


class EpisodeCache:
    """Decoded episodes, shared by the assembling threads; at most ``capacity`` kept (LRU). Each episode is
    loaded once even when several threads want it at the same time."""

    def __init__(self, load: Callable[[int], dict], capacity: int):
        self.load, self.capacity = load, max(1, int(capacity))
        self._items: OrderedDict[int, dict] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[int, threading.Event] = {}
        self.loads = 0

    def get(self, ep: int) -> dict:
        while True:
            with self._lock:
                if ep in self._items:
                    self._items.move_to_end(ep)
                    return self._items[ep]
                event = self._loading.get(ep)
                if event is None:
                    event = self._loading[ep] = threading.Event()
                    break
            event.wait()
        try:
            value = self.load(ep)
            with self._lock:
                self.loads += 1
                self._items[ep] = value
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._loading.pop(ep, None)
            event.set()


_LIVE_LOADERS: "weakref.WeakSet[Loader]" = weakref.WeakSet()


def build_loader(plan: BatchPlanNode, assemble: Callable[[np.ndarray], dict], num_threads: int,
                 prefetch: int, pin_memory: bool = False) -> Loader:
    node = ParallelMapper(plan, map_fn=assemble, num_workers=max(1, int(num_threads)), in_order=True,
                          method="thread")
    if prefetch > 0:
        node = Prefetcher(node, prefetch_factor=int(prefetch))
    if pin_memory:
        from torchdata.nodes import PinMemory

        node = PinMemory(node)
    loader = Loader(node, restart_on_stop_iteration=False)
    _LIVE_LOADERS.add(loader)
    return loader


def shutdown(loader: Loader) -> None:
    """Stop a pipeline's threads and wait for them.

    Why: torchdata's worker threads are daemons. A training script that ends while they are still assembling
    the next batches (a prefetching pipeline always is) lets the interpreter finalize under them, and a thread
    inside torch or Blosc2 at that moment aborts the process ("terminate called without an active exception",
    exit 134) after a successful run. Every loader built here is shut down at exit; call this to stop one sooner.
    """
    stack, seen = [loader.root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        it = getattr(node, "_it", None)  # the iterator a torchdata node runs its threads in
        if it is not None:
            if hasattr(it, "_shutdown"):
                it._shutdown()
            stack.append(it)
        stack.append(getattr(node, "source", None))


@atexit.register
def _shutdown_live_loaders() -> None:
    for loader in list(_LIVE_LOADERS):
        shutdown(loader)
