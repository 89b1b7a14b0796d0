"""Which items form which batch of a pass: a pure function of the items' grouping by episode, the seed and the pass.

Why the order is planned up front: it depends only on how many items each episode has (known from the index
without touching data), the seed and the pass number, so every item appears exactly once per pass (or, with
replacement, a pass is a seeded draw of as many items), and the pipeline's whole state is (pass, batches served):
a stopped run resumes on the same next batch. Locality comes from an episode buffer: episodes enter in a shuffled
order, at most ``buffer_episodes`` are open at once, and items are drawn at random from the open ones, so each
episode is read about once per pass while batches still mix many episodes.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from torchdata.nodes import BaseNode

from robo_loaders_plugin.core.ranks import rank_share

# BatchPlanNode.get_state() keys
EPOCH_KEY = "epoch"
BATCH_KEY = "batch"


class ItemGroups:
    """Dataset indices grouped by the episode (frame-source unit) they belong to: item ``k`` of group ``e``."""

    def __init__(self, items: np.ndarray, episode_of_item: np.ndarray, num_episodes: int):
        items = np.asarray(items, dtype=np.int64)
        order = np.argsort(episode_of_item[items] if len(items) else items, kind="stable")
        self.items = items[order]
        eps = episode_of_item[self.items]
        self.counts = np.bincount(eps, minlength=num_episodes).astype(np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.items)

    def indices(self, pairs: np.ndarray) -> np.ndarray:
        """Dataset index of each (episode, k) pair."""
        return self.items[self.first[pairs[:, 0]] + pairs[:, 1]]


def plan_windows(items_per_episode: Sequence[int], seed: int, epoch: int, buffer_episodes: int,
                 shuffle: bool = True, replacement: bool = False, rank: int = 0, world_size: int = 1) -> np.ndarray:
    """(N, 2) array of (episode, k) in the order rank ``rank`` serves them in this pass.

    One process (``world_size`` 1): each pair exactly once, or, with ``replacement``, N pairs drawn uniformly with
    replacement (the multiset is drawn first, then served through the same episode buffer, so locality is kept).
    Several processes: the pass's global sequence (episodes in one shuffled order, each episode's items shuffled:
    the same on every rank, a function of (seed, pass)) is cut by :func:`rank_share`, and each rank serves its
    piece through its own episode buffer. Without ``shuffle`` the pass is in dataset order and ``replacement``
    does not apply: an ordered pass is what evaluation-style callers ask for."""
    counts = np.asarray(items_per_episode, dtype=np.int64)
    n_eps = len(counts)
    if not shuffle:
        eps = np.repeat(np.arange(n_eps), counts)
        ks = np.concatenate([np.arange(c) for c in counts]) if n_eps else np.zeros(0, np.int64)
        share = rank_share(len(eps), rank, world_size) if world_size > 1 else slice(None)
        return np.stack([eps[share], ks[share]], 1).astype(np.int64)
    rng = np.random.default_rng([int(seed), int(epoch)])
    if replacement:
        total = int(counts.sum())
        # uniform over all items (not over episodes), as torch's RandomSampler(replacement=True) draws indices
        flat = np.sort(rng.integers(total, size=total)) if total else np.zeros(0, np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        bounds = np.searchsorted(flat, starts)
        drawn = [flat[bounds[e]:bounds[e + 1]] - starts[e] for e in range(n_eps)]
    else:
        drawn = [np.arange(c, dtype=np.int64) for c in counts]
    order = rng.permutation(n_eps)
    ks = [rng.permutation(drawn[e]) for e in order]
    eps = np.repeat(order, [len(k) for k in ks]).astype(np.int64)
    ks = np.concatenate(ks).astype(np.int64) if n_eps else np.zeros(0, np.int64)
    if world_size > 1:
        share = rank_share(len(eps), rank, world_size)
        eps, ks = eps[share], ks[share]
        rng = np.random.default_rng([int(seed), int(epoch), 1 + int(rank)])
    return _through_buffer(eps, ks, buffer_episodes, rng)


def _through_buffer(eps: np.ndarray, ks: np.ndarray, buffer_episodes: int, rng) -> np.ndarray:
    """Serve a sequence of (episode, k) through an episode buffer: episodes enter in the order they first appear,
    at most ``buffer_episodes`` open at once, and each pair is drawn from a random open episode (its items in the
    sequence's order)."""
    if not len(eps):
        return np.zeros((0, 2), dtype=np.int64)
    by_key = np.argsort(eps, kind="stable")
    uniq, first, n = np.unique(eps, return_index=True, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    pending = {int(e): ks[by_key[s:s + c]][::-1].tolist() for e, s, c in zip(uniq, starts, n)}
    order = uniq[np.argsort(first, kind="stable")].tolist()
    out = np.empty((len(eps), 2), dtype=np.int64)
    buffer: list[list] = []  # [episode, remaining items (served from the end)]
    i = pos = 0
    while pos < len(order) or buffer:
        while pos < len(order) and len(buffer) < buffer_episodes:
            ep = order[pos]
            pos += 1
            buffer.append([ep, pending[ep]])
        j = int(rng.integers(len(buffer)))
        ep, remaining = buffer[j]
        out[i] = (ep, remaining.pop())
        i += 1
        if not remaining:
            buffer.pop(j)
    return out


class BatchPlanNode(BaseNode):
    """Yields one batch of (episode, k) pairs at a time. State: the pass and the batches already yielded;
    :meth:`seek` positions the next ``reset()`` without a state dict."""

    def __init__(self, items_per_episode, batch_size: int, drop_last: bool, seed: int, buffer_episodes: int,
                 shuffle: bool = True, replacement: bool = False, rank: int = 0, world_size: int = 1):
        super().__init__()
        self.rank, self.world_size = int(rank), int(world_size)
        self.counts = np.asarray(items_per_episode, dtype=np.int64)
        self.batch_size, self.drop_last, self.seed = int(batch_size), bool(drop_last), int(seed)
        self.buffer_episodes, self.shuffle, self.replacement = int(buffer_episodes), bool(shuffle), bool(replacement)
        self.epoch, self._batch = -1, 0
        self._seek = None
        self.plan = None
        self._plans: dict[int, np.ndarray] = {}  # the last passes planned (the next one is planned ahead)

    def num_batches(self) -> int:
        n = int(self.counts.sum())
        if self.world_size > 1:
            n = len(rank_share(n, self.rank, self.world_size))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def plan_of(self, epoch: int) -> np.ndarray:
        """The pass's plan; computed once (a Python loop over the items: ~3 ms per 1,000), so that a plan made
        ahead (``DecodeAhead`` opening the next pass early) is not made again when the pass starts."""
        plan = self._plans.get(int(epoch))
        if plan is None:
            plan = plan_windows(self.counts, self.seed, epoch, self.buffer_episodes, self.shuffle, self.replacement,
                                self.rank, self.world_size)
            self._plans = {e: p for e, p in self._plans.items() if e >= epoch - 1}
            self._plans[int(epoch)] = plan
        return plan

    def seek(self, epoch: int, batch: int = 0) -> None:
        self._seek = {EPOCH_KEY: int(epoch), BATCH_KEY: int(batch)}

    def reset(self, initial_state=None):
        super().reset(initial_state)
        state = initial_state if initial_state is not None else self._seek
        self._seek = None
        if state is not None:
            self.epoch, self._batch = int(state[EPOCH_KEY]), int(state[BATCH_KEY])
        else:
            self.epoch, self._batch = self.epoch + 1, 0
        self.plan = self.plan_of(self.epoch)

    def next(self):
        if self._batch >= self.num_batches():
            raise StopIteration
        b = self._batch
        self._batch += 1
        return self.plan[b * self.batch_size:(b + 1) * self.batch_size]

    def get_state(self):
        return {EPOCH_KEY: self.epoch, BATCH_KEY: self._batch}
