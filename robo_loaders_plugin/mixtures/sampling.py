"""The order a mixture's pass serves its windows in: a pure function of (seed, pass), the same on every rank.

Why a function of (seed, pass) alone: a resumed run must find the rest of its pass from the pass number and the
batch it stopped at, and every rank of a multi-process run must cut the same sequence into disjoint shares
(``core.ranks.rank_share``) without talking to the others.

Global indices: component ``k``'s local window ``i`` is ``offsets[k] + i`` (``offsets`` = the cumulative sum of the
components' sizes), so a pass is one array of integers whatever the frameworks' datasets are.

Eligible windows: a framework may serve only some windows of a component in a pass (LeRobot's sampler leaves each
episode's last ``drop_n_last_frames`` frames out); the pass then draws from those only, while the global indices
still span every window, so ``split`` and the items of any index are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from robo_loaders_plugin.core.ranks import rank_share
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, some_of


def weight_shares(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Each weight's share of their sum, for any positive finite weights.

    Why not ``w / w.sum()``: the sum of finite weights can overflow (``[1e308, 1e308]`` sums to ``inf``, every share
    is then 0 and numpy's ``choice`` refuses them). The weights are first scaled by the power of two that brings the
    largest into ``[0.5, 1)``: scaling by a power of two is exact, so the shares are bit for bit ``w / w.sum()``
    wherever that sum is finite (the orders drawn by earlier versions are unchanged), and a weight smaller than the
    largest by more than float64's range (``1e-308`` beside ``1e308``) gets a share of 0, its true share rounded.

    Args:
        weights: Positive finite weights.

    Returns:
        ``float64`` shares summing to 1 (within rounding).
    """
    w = np.asarray(weights, dtype=np.float64)
    _, exponent = np.frexp(w.max())
    scaled = np.ldexp(w, -int(exponent))
    return scaled / scaled.sum()


def named_shares(names: Sequence[str], shares, form: str = "{} {:.1%}") -> str:
    """The components and their shares for a log line: the first few named (``core.units.some_of``), the rest
    counted with the range of their shares.

    Args:
        names: The components' names, in order.
        shares: Their shares (summing to 1).
        form: How one component is written, from its name and share.

    Returns:
        ``"a 50.0%, b 50.0%"`` or ``"a 0.2%, ..., ... and 392 more (0.2%-0.7% each)"``.
    """
    shares = np.asarray(shares, dtype=np.float64)
    rest = shares[NAMED_IN_A_LINE:]
    return some_of(
        (form.format(n, p) for n, p in zip(names, shares, strict=True)),
        rest=f"{rest.min():.1%}-{rest.max():.1%} each" if rest.size else "",
    )


class MixtureOrder:
    """Which window of which component each position of a pass serves.

    A pass has ``N = sum(n_k)`` positions, ``n_k`` the windows component ``k`` serves in a pass (its size, or its
    eligible windows' count). Weighted by size (``weights=None``) it is a permutation of every served window's global
    index (``shuffle=False``: in order): plain concatenation, every served window exactly once. With weights, each
    position draws its component independently with probability ``w_k / sum(w)`` (Open X-Embodiment's convention),
    from ``default_rng([seed, epoch, 1])``; component ``k``'s positions take its served windows in the order of
    ``default_rng([seed, epoch, 2, k]).permutation(n_k)``, followed by fresh permutations (``[seed, epoch, 2, k,
    cycle]``) when it is drawn more often than it has windows: no window is served twice within one cycle through
    its component (``shuffle=False``: the cycles are in order).

    With ``units`` (components read by unit: an episode, or part of one, loaded whole), the drawn pass is then
    served through a buffer of ``unit_buffer`` open units (``pipeline.plan.serve_by_unit``, generator
    ``default_rng([seed, epoch, 3])``), as a pipeline serves one dataset's pass: the same windows, so the same shares,
    in an order that loads each unit about once per pass.

    Args:
        sizes: Windows per component (each at least 1): the global indices span them all.
        weights: One positive finite weight per component, or ``None`` for weighting by size (by served windows).
        seed: The order seed (the same on every rank).
        shuffle: Whether the order is drawn (``False``: concatenation in order, or each component's windows in order).
        eligible: Per component, the local windows a pass may serve (``None`` in the list, or no list: all of
            them), e.g. what LeRobot's sampler would serve of that component alone.
        units: The unit of every global index (``sum(sizes)`` non-negative integers, distinct across components), or
            ``None``: served in the drawn order.
        unit_buffer: Units open at once when ``units`` is given (at least 1).

    Raises:
        ValueError: no component, a component without windows (or without eligible windows), eligible windows
            outside the component or repeated, weights of another length, not positive or not finite, or units
            not one per global index.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        weights: Sequence[float] | None = None,
        seed: int = 0,
        shuffle=True,
        eligible: Sequence[np.ndarray | None] | None = None,
        units: np.ndarray | None = None,
        unit_buffer: int = 1,
    ):
        self.sizes = np.asarray([int(s) for s in sizes], dtype=np.int64)
        if self.sizes.size == 0 or (self.sizes < 1).any():
            raise ValueError(f"a mixture needs components of at least one window each, got sizes {self.sizes.tolist()}")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.rows = int(self.sizes.sum())
        self.eligible = _eligible(self.sizes, eligible)
        self.counts = np.asarray(
            [int(s) if e is None else len(e) for s, e in zip(self.sizes, self.eligible)], dtype=np.int64
        )
        self.total = int(self.counts.sum())
        self.weights = None
        if weights is not None:
            w = np.asarray([float(x) for x in weights], dtype=np.float64)
            if w.shape != self.sizes.shape or not np.isfinite(w).all() or (w <= 0).any():
                raise ValueError(f"weights must be {len(self.sizes)} positive finite numbers, got {list(weights)}")
            self.weights = w
        self.seed, self.shuffle = int(seed), bool(shuffle)
        self.units = None if units is None else np.asarray(units, dtype=np.int64).reshape(-1)
        if self.units is not None and (len(self.units) != self.rows or (self.units < 0).any()):
            raise ValueError(f"units must be {self.rows} non-negative integers, one per global index")
        self.unit_buffer = max(1, int(unit_buffer))

    def __len__(self) -> int:
        """Positions of a pass (``sum(n_k)``)."""
        return self.total

    @property
    def probabilities(self) -> np.ndarray:
        """Each component's share of a pass: its weight's share, or its served windows' share."""
        return weight_shares(self.counts if self.weights is None else self.weights)

    def served(self, c: int) -> np.ndarray:
        """Component ``c``'s global indices a pass may serve, in order.

        Args:
            c: The component.

        Returns:
            ``offsets[c]`` plus its eligible local windows (all of them when none were given).
        """
        e = self.eligible[c]
        local = np.arange(int(self.sizes[c]), dtype=np.int64) if e is None else e
        return self.offsets[c] + local

    def indices_of(self, epoch: int) -> np.ndarray:
        """A pass's global indices, in serving order (by unit when the order has ``units``).

        Args:
            epoch: The pass number.

        Returns:
            ``N`` global indices (``int64``).
        """
        drawn = self.drawn(epoch)
        if self.units is None or not self.shuffle:
            return drawn
        # imported here: the pipeline needs torchdata (an optional extra), and only its datasets have units
        from robo_loaders_plugin.pipeline.plan import serve_by_unit

        return serve_by_unit(drawn, self.units, self.unit_buffer, np.random.default_rng([self.seed, int(epoch), 3]))

    def drawn(self, epoch: int) -> np.ndarray:
        """A pass's global indices in the order they are drawn (before they are served by unit).

        Args:
            epoch: The pass number.

        Returns:
            ``N`` global indices (``int64``).
        """
        epoch = int(epoch)
        k = len(self.sizes)
        if self.weights is None:
            every = all(e is None for e in self.eligible)
            if not self.shuffle:
                return np.arange(self.total, dtype=np.int64) if every else self._served_all()
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.total).astype(np.int64)
            return perm if every else self._served_all()[perm]
        comps = np.random.default_rng([self.seed, epoch, 1]).choice(k, size=self.total, p=self.probabilities)
        out = np.empty(self.total, dtype=np.int64)
        # each component's draws, in pass order: one stable sort (a radix sort of 16-bit keys) instead of a scan of
        # the pass per component, which took 16-26 s a pass at 500 components and 10M windows (a reviewer's
        # measurement), on the training thread at every pass start; the same positions
        by_component = np.argsort(comps.astype(np.uint16) if k <= 1 << 16 else comps, kind="stable")
        ends = np.cumsum(np.bincount(comps, minlength=k))
        for c in range(k):
            where = by_component[(ends[c - 1] if c else 0) : ends[c]]
            local = self._local(epoch, c, len(where))
            e = self.eligible[c]
            out[where] = self.offsets[c] + (local if e is None else e[local])
        return out

    def _served_all(self) -> np.ndarray:
        return np.concatenate([self.served(c) for c in range(len(self.sizes))])

    def _local(self, epoch: int, c: int, n: int) -> np.ndarray:
        """Positions among component ``c``'s served windows of its first ``n`` draws of a pass: cycles through them."""
        size = int(self.counts[c])
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
            global_indices: Indices in ``[0, sum(sizes))`` (every window, eligible or not).

        Returns:
            ``(components, locals)``, two ``int64`` arrays.

        Raises:
            IndexError: an index outside ``[0, sum(sizes))``.
        """
        g = np.asarray(global_indices, dtype=np.int64).reshape(-1)
        if g.size and (g.min() < 0 or g.max() >= self.rows):
            raise IndexError(f"mixture index out of range [0, {self.rows}): {g[(g < 0) | (g >= self.rows)][:5]}")
        comps = np.searchsorted(self.offsets, g, side="right") - 1
        return comps.astype(np.int64), g - self.offsets[comps]


def _eligible(sizes: np.ndarray, eligible) -> list[np.ndarray | None]:
    """Each component's eligible local windows, checked (``None``: all of them)."""
    if eligible is None:
        return [None] * len(sizes)
    if len(eligible) != len(sizes):
        raise ValueError(f"eligible windows must be given for {len(sizes)} components, got {len(eligible)}")
    out: list[np.ndarray | None] = []
    for k, (size, e) in enumerate(zip(sizes.tolist(), eligible)):
        if e is None:
            out.append(None)
            continue
        e = np.asarray(e, dtype=np.int64).reshape(-1)
        if e.size == 0:
            raise ValueError(f"component {k} has no eligible window to serve")
        if e.min() < 0 or e.max() >= size or np.unique(e).size != e.size:
            raise ValueError(f"component {k}'s eligible windows must be distinct indices in [0, {size})")
        out.append(None if e.size == size and (e == np.arange(size)).all() else e)
    return out
