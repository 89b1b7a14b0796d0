"""The order a mixture's pass serves its windows in: a pure function of (seed, pass), the same on every rank.

Why a function of (seed, pass) alone: a resumed run must find the rest of its pass from the pass number and the
batch it stopped at, and every rank of a multi-process run must cut the same sequence into disjoint shares
(``core.ranks.rank_share``) without talking to the others.

Global indices: component ``k``'s local window ``i`` is ``offsets[k] + i`` (``offsets`` = the cumulative sum of the
components' sizes), so a pass is one array of integers whatever the frameworks' datasets are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from robo_loaders_plugin.core.ranks import rank_share


class MixtureOrder:
    """Which window of which component each position of a pass serves.

    A pass has ``N = sum(sizes)`` positions. Weighted by size (``weights=None``) it is a permutation of every global
    index (``shuffle=False``: in order): plain concatenation, every window exactly once. With weights, each position
    draws its component independently with probability ``w_k / sum(w)`` (Open X-Embodiment's convention), from
    ``default_rng([seed, epoch, 1])``; component ``k``'s positions take its windows in the order of
    ``default_rng([seed, epoch, 2, k]).permutation(size_k)``, followed by fresh permutations
    (``[seed, epoch, 2, k, cycle]``) when it is drawn more often than it has windows: no window is served twice
    within one cycle through its component (``shuffle=False``: the cycles are in order).

    Args:
        sizes: Windows per component (each at least 1).
        weights: One positive finite weight per component, or ``None`` for weighting by size.
        seed: The order seed (the same on every rank).
        shuffle: Whether the order is drawn (``False``: concatenation in order, or each component's windows in order).

    Raises:
        ValueError: no component, a component without windows, or weights of another length, not positive or not
            finite.
    """

    def __init__(self, sizes: Sequence[int], weights: Sequence[float] | None = None, seed: int = 0, shuffle=True):
        self.sizes = np.asarray([int(s) for s in sizes], dtype=np.int64)
        if self.sizes.size == 0 or (self.sizes < 1).any():
            raise ValueError(f"a mixture needs components of at least one window each, got sizes {self.sizes.tolist()}")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.total = int(self.sizes.sum())
        self.weights = None
        if weights is not None:
            w = np.asarray([float(x) for x in weights], dtype=np.float64)
            if w.shape != self.sizes.shape or not np.isfinite(w).all() or (w <= 0).any():
                raise ValueError(f"weights must be {len(self.sizes)} positive finite numbers, got {list(weights)}")
            self.weights = w
        self.seed, self.shuffle = int(seed), bool(shuffle)

    def __len__(self) -> int:
        return self.total

    @property
    def probabilities(self) -> np.ndarray:
        """Each component's share of a pass: its weight's share, or its size's share."""
        w = self.sizes.astype(np.float64) if self.weights is None else self.weights
        return w / w.sum()

    def indices_of(self, epoch: int) -> np.ndarray:
        """A pass's global indices, in serving order.

        Args:
            epoch: The pass number.

        Returns:
            ``N`` global indices (``int64``).
        """
        epoch = int(epoch)
        if self.weights is None:
            if not self.shuffle:
                return np.arange(self.total, dtype=np.int64)
            return np.random.default_rng([self.seed, epoch]).permutation(self.total).astype(np.int64)
        k = len(self.sizes)
        comps = np.random.default_rng([self.seed, epoch, 1]).choice(k, size=self.total, p=self.probabilities)
        out = np.empty(self.total, dtype=np.int64)
        for c in range(k):
            where = np.flatnonzero(comps == c)
            out[where] = self.offsets[c] + self._local(epoch, c, len(where))
        return out

    def _local(self, epoch: int, c: int, n: int) -> np.ndarray:
        """Component ``c``'s first ``n`` local windows of a pass: cycles through its windows."""
        size = int(self.sizes[c])
        parts: list[np.ndarray] = []
        for cycle in range(-(-n // size)):
            if not self.shuffle:
                parts.append(np.arange(size, dtype=np.int64))
            else:
                key = [self.seed, epoch, 2, c] + ([cycle] if cycle else [])
                parts.append(np.random.default_rng(key).permutation(size))
        return np.concatenate(parts)[:n] if parts else np.zeros(0, dtype=np.int64)

    def rank_indices(self, epoch: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
        """This rank's piece of a pass (``core.ranks.rank_share`` of the global sequence).

        Args:
            epoch: The pass number.
            rank: This process's rank.
            world_size: Processes sharing the pass.

        Returns:
            The global indices this rank serves, in order.
        """
        return self.indices_of(epoch)[rank_share(self.total, rank, world_size)]

    def split(self, global_indices) -> tuple[np.ndarray, np.ndarray]:
        """Global indices as (component, local index) pairs.

        Args:
            global_indices: Indices in ``[0, N)``.

        Returns:
            ``(components, locals)``, two ``int64`` arrays.

        Raises:
            IndexError: an index outside ``[0, N)``.
        """
        g = np.asarray(global_indices, dtype=np.int64).reshape(-1)
        if g.size and (g.min() < 0 or g.max() >= self.total):
            raise IndexError(f"mixture index out of range [0, {self.total}): {g[(g < 0) | (g >= self.total)][:5]}")
        comps = np.searchsorted(self.offsets, g, side="right") - 1
        return comps.astype(np.int64), g - self.offsets[comps]
