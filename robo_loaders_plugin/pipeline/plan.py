"""Which items form which batch of a pass: a pure function of the items' grouping by episode, the seed and the pass.

Why the order is planned up front: it depends only on how many items each episode has (known from the index
without touching data), the seed and the pass number, so every item appears exactly once per pass (or, with
replacement, a pass is a seeded draw of as many items), and the pipeline's whole state is (pass, batches served):
a stopped run resumes on the same next batch. Locality comes from an episode buffer: episodes enter in a shuffled
order, at most ``buffer_episodes`` are open at once, and items are drawn at random from the open ones, so each
episode is read about once per pass while batches still mix many episodes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from torchdata.nodes import BaseNode

from robo_loaders_plugin.core.ranks import rank_share

# BatchPlanNode.get_state() keys
EPOCH_KEY = "epoch"
BATCH_KEY = "batch"


class ItemGroups:
    """Dataset indices grouped by the episode (frame-source unit) they belong to: item ``k`` of group ``e``.

    Every item of a dataset in its own order (the usual pass) is held as nothing but the groups' starts: item ``k``
    of group ``e`` is then dataset index ``first[e] + k`` (8 bytes per item saved at a million items)."""

    def __init__(self, items: np.ndarray, episode_of_item: np.ndarray, num_episodes: int):
        items = np.asarray(items, dtype=np.int64)
        eps = episode_of_item[items]
        if np.any(eps[1:] < eps[:-1]):  # already grouped in the usual case (every item, in dataset order): no sort
            order = np.argsort(eps, kind="stable")
            items, eps = items[order], eps[order]
        self.n = len(items)
        identity = self.n == 0 or (
            int(items[0]) == 0 and int(items[-1]) == self.n - 1 and bool(np.all(np.diff(items) == 1))
        )
        self.items = None if identity else items
        self.counts = np.bincount(eps, minlength=num_episodes).astype(np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return self.n

    def indices(self, pairs: np.ndarray) -> np.ndarray:
        """Dataset index of each (episode, k) pair.

        Args:
            pairs: (N, 2) episode and position within it.

        Returns:
            (N,) dataset indices.
        """
        flat = self.first[pairs[:, 0]] + pairs[:, 1]
        return flat if self.items is None else self.items[flat]


def plan_windows(
    items_per_episode: Sequence[int],
    seed: int,
    epoch: int,
    buffer_episodes: int,
    shuffle: bool = True,
    replacement: bool = False,
    rank: int = 0,
    world_size: int = 1,
    warm_up: int = 0,
) -> np.ndarray:
    """(N, 2) array of (episode, k) in the order rank ``rank`` serves them in this pass.

    One process (``world_size`` 1): each pair exactly once, or, with ``replacement``, N pairs drawn uniformly with
    replacement (the multiset is drawn first, then served through the same episode buffer, so locality is kept).
    Several processes: the pass's global sequence (episodes in one shuffled order, each episode's items shuffled:
    the same on every rank, a function of (seed, pass)) is cut by :func:`rank_share`, and each rank serves its
    piece through its own episode buffer. Without ``shuffle`` the pass is in dataset order and ``replacement``
    does not apply: an ordered pass is what evaluation-style callers ask for.

    Cost: numpy work per item, and one small step per episode (the permutation of its items, and its entry into
    the episode buffer: :func:`_serving_order`); no Python per item (``tests/test_plan_scale.py`` guards it).

    Args:
        items_per_episode: Items of each episode (0 allowed).
        seed, epoch: The pass's order is a function of both.
        buffer_episodes: Episodes open at once.
        shuffle: False: dataset order.
        replacement: Draw as many items with replacement.
        rank, world_size: This process's share of the pass.
        warm_up: Items served from each step of a growing buffer before the pass draws from ``buffer_episodes``
            (:func:`_warm_up`; a batch's worth: the first batch is drawn from :data:`WARM_UP_FIRST` open episodes
            at a time, the next entering as one runs out, not from a whole buffer); 0: the buffer is full from the
            first item.

    Returns:
        (N, 2) int64 (episode, k) pairs in serving order.
    """
    counts = np.asarray(items_per_episode, dtype=np.int64)
    n_eps = len(counts)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if not shuffle:
        eps = np.repeat(np.arange(n_eps, dtype=np.int64), counts)
        ks = np.arange(len(eps), dtype=np.int64) - starts[eps]
        share = rank_share(len(eps), rank, world_size) if world_size > 1 else slice(None)
        return np.stack([eps[share], ks[share]], 1).astype(np.int64)
    rng = np.random.default_rng([int(seed), int(epoch)])
    total = int(starts[-1])
    if replacement:
        # uniform over all items (not over episodes), as torch's RandomSampler(replacement=True) draws indices
        flat = np.sort(rng.integers(total, size=total)) if total else np.zeros(0, np.int64)
        bounds = np.searchsorted(flat, starts)
        drawn_counts = np.diff(bounds)
        drawn = flat - np.repeat(starts[:-1], drawn_counts)  # each episode's draws, as positions in it
        drawn_starts = bounds[:-1]
    else:
        drawn = np.arange(total, dtype=np.int64) - np.repeat(starts[:-1], counts)
        drawn_counts, drawn_starts = counts, starts[:-1]
    order = rng.permutation(n_eps)
    # each episode's items shuffled, episodes in ``order``: the generator shuffles one episode at a time, in that
    # order, exactly as the reference loop's rng.permutation did (a shuffle of a copy: the same draws), in place
    eps = np.repeat(order, drawn_counts[order]).astype(np.int64)
    in_order = drawn_starts[order]
    ks = (
        drawn[
            np.repeat(in_order - (np.cumsum(drawn_counts[order]) - drawn_counts[order]), drawn_counts[order])
            + np.arange(len(eps), dtype=np.int64)
        ]
        if len(eps)
        else np.zeros(0, np.int64)
    )
    shuffle, pos = rng.shuffle, 0
    for c in drawn_counts[order].tolist():
        if c > 1:  # a shuffle of fewer than two draws nothing
            shuffle(ks[pos : pos + c])
        pos += c
    if world_size > 1:
        share = rank_share(len(eps), rank, world_size)
        eps, ks = eps[share], ks[share]
        rng = np.random.default_rng([int(seed), int(epoch), 1 + int(rank)])
    if warm_up > 0 and buffer_episodes > WARM_UP_FIRST:
        # its own generator: the rest of the pass draws what it drew before the warm-up existed
        warm_rng = np.random.default_rng([int(seed), int(epoch), 1 + int(rank), WARM_UP_STREAM])
        first, eps, ks = _warm_up(eps, ks, buffer_episodes, int(warm_up), warm_rng)
        if len(first):
            return np.concatenate([first, _through_buffer(eps, ks, buffer_episodes, rng)])
    return _through_buffer(eps, ks, buffer_episodes, rng)


WARM_UP_FIRST = 2  # episodes the first batch of a warm-up is drawn from (the buffer doubles at each batch after)
WARM_UP_STREAM = 7_919  # the warm-up generator's extra seed word (any constant no other stream uses)


def _warm_up(eps: np.ndarray, ks: np.ndarray, buffer_episodes: int, per_step: int, rng):
    """The first items of a pass served through a buffer that grows: ``per_step`` items from :data:`WARM_UP_FIRST`
    open episodes, the next ``per_step`` from twice as many, and so on below ``buffer_episodes``.

    Why: a pass drawn from a full buffer cannot serve its first batch before every episode of that buffer is
    loaded (16 decoded 480p units: over a second on two cores), while training waits. Growing the buffer lets the
    first batch go as soon as the first episodes are loaded, the loads ahead filling the rest meanwhile; only the
    first few batches mix fewer episodes. Each step is :func:`_through_buffer` over the episodes it can reach (at
    most its buffer plus its items), of which its first ``per_step`` draws are kept; what they did not serve (each
    episode's later items, in order) goes on to the next step, so every item is still served exactly once.

    Args:
        eps, ks: The pass's sequence, each episode's items in one run, episodes in entry order.
        buffer_episodes: The full buffer.
        per_step: Items served at each size.
        rng: The warm-up's generator.

    Returns:
        ``(served, eps, ks)``: the (M, 2) pairs served by the warm-up and the sequence left for the full buffer (in
        the same form); nothing served when an episode's items are not in one run (a rank's share that wraps round
        the pass).
    """
    none = np.zeros((0, 2), dtype=np.int64)
    if not len(eps):
        return none, eps, ks
    run_start = np.flatnonzero(np.concatenate([[True], eps[1:] != eps[:-1]]))
    if np.unique(eps[run_start]).size != len(run_start):
        return none, eps, ks
    served = []
    size = WARM_UP_FIRST
    while size < buffer_episodes and len(eps):
        # (each step keeps every episode in one run: only its items' first ones are taken out)
        run_start = np.flatnonzero(np.concatenate([[True], eps[1:] != eps[:-1]]))
        reach = size + per_step  # each draw empties at most one episode, so no more enter than this
        cut = int(run_start[reach]) if reach < len(run_start) else len(eps)
        step = _through_buffer(eps[:cut], ks[:cut], size, rng)[:per_step]
        served.append(step)
        # what the step served of each episode is the first items of its run (items come out in sequence order)
        taken = np.bincount(step[:, 0], minlength=int(eps[:cut].max()) + 1)
        starts = np.repeat(run_start[run_start < cut], np.diff(np.append(run_start[run_start < cut], cut)))
        keep = np.arange(cut) - starts >= taken[eps[:cut]]
        eps, ks = np.concatenate([eps[:cut][keep], eps[cut:]]), np.concatenate([ks[:cut][keep], ks[cut:]])
        size *= 2
    return np.concatenate(served), eps, ks


def _through_buffer(eps: np.ndarray, ks: np.ndarray, buffer_episodes: int, rng) -> np.ndarray:
    """Serve a sequence of (episode, k) through an episode buffer: episodes enter in the order they first appear,
    at most ``buffer_episodes`` open at once, and each pair is drawn from a random open episode (its items in the
    sequence's order).

    The rule is a loop (refill the buffer, draw a buffer slot with ``rng.integers(len(buffer))``, serve that
    episode's next item, drop it when it is empty); this computes the loop's exact result with numpy
    (:func:`_serving_order` draws the same numbers from ``rng``), so a pass is the same as before it was
    vectorised and a resumed run continues on the same batch."""
    n_items = len(eps)
    if not n_items:
        return np.zeros((0, 2), dtype=np.int64)
    eps, ks = np.asarray(eps, dtype=np.int64), np.asarray(ks, dtype=np.int64)
    run_start = np.flatnonzero(np.concatenate([[True], eps[1:] != eps[:-1]]))
    if np.bincount(eps[run_start]).max() == 1:  # each episode's items in one run (a pass's sequence always is)
        episode_at = eps[run_start]  # the episode at each entry position
        count = np.diff(np.append(run_start, n_items))
        in_entry_order = ks  # every entry's items, entries in entry order
    else:
        by_key = np.argsort(eps, kind="stable")
        uniq, first, n = np.unique(eps, return_index=True, return_counts=True)
        entry = np.argsort(first, kind="stable")  # entry position -> index into uniq
        episode_at, count = uniq[entry], n[entry]
        group_start = (np.cumsum(n) - n)[entry]  # where its items start in ks[by_key]
        in_entry_order = ks[by_key[np.repeat(group_start - (np.cumsum(count) - count), count) + np.arange(n_items)]]
    served = _serving_order(count, int(buffer_episodes), rng)  # entry position served at each draw
    # the r-th draw of an entry serves its r-th item: the draws grouped by entry, in time order, are the items in
    # entry order
    out = np.empty((n_items, 2), dtype=np.int64)
    out[:, 0] = episode_at[served]
    out[_group_in_order(served), 1] = in_entry_order
    return out


def serve_by_unit(indices: np.ndarray, unit_of: np.ndarray, buffer_units: int, rng) -> np.ndarray:
    """``indices`` (a pass's items, in the order they were drawn) served a few units at a time: at most
    ``buffer_units`` units open at once, and any stretch of the pass mixing the units as the whole pass does.

    What is served together is a *visit* of a unit: its drawn items cut into pieces of at most the unit's own size
    (its count of item indices in ``unit_of``), in the order they were drawn. The visits enter in a random order,
    one per step, and each visit's items are spread at random over the ``buffer_units - 1`` steps after its entry
    (each item's time is its visit's entry plus a uniform draw in ``[0, buffer_units - 1)``; items are served in
    time order), so a visit is open for at most that many steps and at most ``buffer_units`` visits overlap.

    Why visits, entering in a random order, and items spread in proportion to their visit's size: a unit drawn far
    more often than it has items (a small dataset weighted up in a mixture) would otherwise be served as one long
    stretch; units entering by their first draw put the most-drawn first; and a buffer drawing each item from a
    random open unit (a pipeline's rule for one dataset, :func:`_through_buffer`) serves every open unit at the same
    rate, so the largest units pile up in it and end the pass (measured: a component of 2,000-window episodes beside
    one of 100-window ones went from 6% to 100% of the served items across a pass). Here each open visit is served
    at a rate in proportion to its size, so each component's share is the same in any stretch of the pass (and in
    every rank's contiguous piece of it), up to which visits happen to be open.

    Why at all: a mixture of pipeline-served components drew each position of a pass at random over every
    component, so a batch of 32 touched ~29 components' episodes, each loaded (decoded, decompressed) for one or two
    items until every episode of the mixture had been loaded once: at 400 components the first thousand batches ran
    at a fifth of the rate that followed. Served by unit, each visit loads its unit once; the items served, and so
    each component's share of the pass, are the same.

    Args:
        indices: Item indices of a pass, in drawn order (an item may repeat).
        unit_of: The unit (episode, or part of one) of every item index; non-negative integers.
        buffer_units: Units open at once (at least 1).
        rng: The order's generator (a function of the seed and the pass, for a resumable order).

    Returns:
        The same indices in serving order.
    """
    indices = np.asarray(indices, dtype=np.int64)
    if len(indices) < 2:
        return indices
    unit_of = np.asarray(unit_of, dtype=np.int64)
    units = unit_of[indices]
    by_unit = _group_in_order(units)  # each unit's draws together, in drawn order
    grouped = units[by_unit]
    first = np.flatnonzero(np.concatenate(([True], grouped[1:] != grouped[:-1])))  # each unit's first draw
    uniq, drawn = grouped[first], np.diff(np.append(first, len(grouped)))
    size = np.maximum(1, np.bincount(unit_of, minlength=int(uniq[-1]) + 1)[uniq])  # a unit's own items
    nth = np.arange(len(indices), dtype=np.int64) - np.repeat(first, drawn)  # a draw's rank within its unit
    visits = -(-drawn // size)
    visit = np.repeat(np.cumsum(visits) - visits, drawn) + nth // np.repeat(size, drawn)  # of each draw, by_unit
    entry = rng.permutation(int(visits.sum()))[visit].astype(np.float64)
    spread = max(0, int(buffer_units) - 1)
    when = np.empty(len(indices), dtype=np.float64)
    when[by_unit] = entry + (rng.random(len(indices)) * spread if spread else 0.0)
    # served in time order, ties in drawn order: a non-negative float's bits sort as the float does, and
    # _group_in_order sorts them by radix passes (a comparison sort of 10M floats took seconds at a pass's start)
    return indices[_group_in_order(when.view(np.uint64))]


def _group_in_order(keys: np.ndarray) -> np.ndarray:
    """Positions of ``keys`` (non-negative integers) grouped by key, ascending, each group in position order: a
    stable argsort, made of 16-bit radix passes (numpy's stable sort of 16-bit keys is a radix sort: linear, where
    a comparison sort of a million 64-bit keys was a third of a pass's planning)."""
    top = int(keys.max()) if len(keys) else 0
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while top >> shift:
        order = order[np.argsort(((keys[order] >> shift) & 0xFFFF).astype(np.uint16), kind="stable")]
        shift += 16
    return order


def _slots(draws: np.ndarray, n_slots: int):
    """(times grouped by slot in time order, first and end index of each slot's group)."""
    small = draws.astype(np.uint16) if n_slots <= np.iinfo(np.uint16).max else draws
    at = np.argsort(small, kind="stable")  # a radix sort for 16-bit keys
    per_slot = np.bincount(draws, minlength=n_slots)
    end = np.cumsum(per_slot)
    return at, end - per_slot, end


def _serving_order(count: np.ndarray, buffer_episodes: int, rng) -> np.ndarray:
    """Entry position served at each draw of the episode-buffer loop (see :func:`_through_buffer`) for episodes
    entering in positions 0, 1, ... with ``count`` items each.

    How without a loop per item: the buffer is a list in entry order; a draw picks a slot of it, and the list
    changes only when an episode runs out (it leaves, later slots move down by one, the next episode enters at the
    end). Between two such events every draw maps through the same list, and while episodes are still waiting to
    enter the list has ``buffer_episodes`` slots, so all those draws are one ``rng.integers(B, size=...)`` (numpy
    draws a vector exactly as it draws the scalars one by one). Each buffered episode's last draw is found in the
    draws of its slot (``z``: its index in the slot-sorted draws); an event moves the episodes above the freed slot
    down, which shifts their ``z`` by the difference of the two slots' positions at that time. So the Python loop
    runs once per episode (a few numpy calls on buffer-sized arrays), and every item is placed by numpy. After the
    last episode has entered, each event shrinks the buffer: a few chunks of draws at each size. The generator is
    left exactly where the loop leaves it."""
    n = len(count)
    total = int(count.sum())
    out = np.empty(total, dtype=np.int64)
    size = min(buffer_episodes, n)
    buf = np.arange(size, dtype=np.int64)  # entry positions in the buffer, in buffer order
    rem = count[:size].astype(np.int64)  # items each still has
    done = 0
    if size < n:
        done, buf, rem = _while_entering(count, size, rng, out)
    while len(buf) > 1:
        done, buf, rem = _shrinking(buf, rem, rng, out, done)
    out[done:] = buf[0] if len(buf) else 0
    return out


def _while_entering(count: np.ndarray, size: int, rng, out: np.ndarray):
    """The draws while episodes wait to enter (a buffer of ``size`` slots) up to and including the first event
    that leaves a slot empty; returns (draws made, buffer, remaining items of each buffered episode)."""
    n = len(count)
    horizon = len(out)  # no more draws than items
    state = rng.bit_generator.state
    draws = rng.integers(size, size=horizon)
    at, lo, hi = _slots(draws, size)
    # each slot's draws in time order, then a "never" (time ``horizon``)
    slot = np.arange(size, dtype=np.int64)
    at = np.insert(at, hi, horizon)
    never = hi + slot  # index of each slot's "never"
    # row 0: index (in ``at``) of each buffered episode's last draw if it stays in its slot; row 1: the episode
    zb = np.stack([lo + slot + count[:size] - 1, slot])
    z, buf = zb[0], zb[1]
    nxt_draw = lo + slot  # index of each slot's first draw not yet made
    fin = at[np.minimum(z, never)]  # when each one's last draw comes if it stays in its slot
    nxt, used = size, 0
    # (this loop runs per episode: the arrays' own methods and ufuncs, not numpy's Python-level wrappers such as
    # np.take, which cost more than the work at these sizes)
    take_buf, take_at, minimum, subtract, bincount = buf.take, at.take, np.minimum, np.subtract, np.bincount
    step = np.empty(size, dtype=np.int64)
    while True:
        k = int(fin.argmin())
        t = int(fin[k])
        if t >= horizon:  # cannot happen: the items left always cover the draws left
            raise AssertionError("episode buffer plan: an episode's draws were not found")
        made = draws[used : t + 1]  # the draws up to this event map through this buffer
        take_buf(made, out=out[used : t + 1])
        nxt_draw += bincount(made, minlength=size)  # each slot's first draw after t (a count, no search)
        used = t + 1
        if nxt == n:  # the last episode has entered: this event shrinks the buffer
            rem = z + 1 - nxt_draw  # what each has left: its last draw past the slot's next
            break
        q = nxt_draw[k:]
        # the episodes above slot k move down one slot: their last draw is as far past the lower slot's first
        # draw after t as it was past their own slot's
        if k < size - 1:
            zb[:, k:-1] = zb[:, k + 1 :]
            d = step[: size - 1 - k]
            subtract(q[:-1], q[1:], out=d)
            z[k:-1] += d
        z[-1] = q[-1] + count[nxt] - 1
        buf[-1] = nxt
        nxt += 1
        take_at(minimum(z[k:], never[k:]), out=fin[k:])
    rng.bit_generator.state = state
    rng.integers(size, size=used)  # the generator as the loop leaves it
    keep = np.arange(size) != k
    return used, buf[keep], rem[keep]


def _shrinking(buf: np.ndarray, rem: np.ndarray, rng, out: np.ndarray, done: int):
    """Draws from a buffer that no longer refills, up to and including the next event (an episode runs out, the
    buffer shrinks by one); returns (draws made, buffer, remaining items)."""
    size = len(buf)
    chunk = max(1024, 4 * size * int(rem.min()))
    while True:
        left = int(rem.sum())
        m = min(chunk, left)
        state = rng.bit_generator.state
        draws = rng.integers(size, size=m)
        hits = np.bincount(draws, minlength=size)
        if np.all(hits < rem) and m < left:  # no episode runs out in this chunk: all of it is served as drawn
            out[done : done + m] = buf[draws]
            done += m
            rem = rem - hits
            chunk *= 2
            continue
        at, lo, hi = _slots(draws, size)
        z = lo + rem - 1
        fin = np.where(z < hi, at[np.minimum(z, m - 1)], m)
        k = int(fin.argmin())
        used = int(fin[k]) + 1
        out[done : done + used] = buf[draws[:used]]
        rem = rem - np.bincount(draws[:used], minlength=size)
        rng.bit_generator.state = state
        rng.integers(size, size=used)
        keep = np.arange(size) != k
        return done + used, buf[keep], rem[keep]


class BatchPlanNode(BaseNode):
    """Yields one batch of (episode, k) pairs at a time. State: the pass and the batches already yielded;
    :meth:`seek` positions the next ``reset()`` without a state dict.

    When a pass starts, the next pass is planned in a background thread (:meth:`plan_ahead`): planning is ~0.2 s
    per million items, and the pass that needs it starts on the training thread.

    With ``endless``, the end of a pass is not the end of the node: the next pass follows at once (its first
    batch after the last of this one), so a pipeline over it is not stopped and restarted between passes.

    With ``warm_up``, pass 0 (the one a run starts with) grows its buffer over its first batches
    (``plan_windows(warm_up=batch_size)``), so the first batch waits for the few episodes that hold it; later passes
    are loaded ahead while the one before is served, and a run resumed in pass 0 finds the same plan.
    """

    def __init__(
        self,
        items_per_episode,
        batch_size: int,
        drop_last: bool,
        seed: int,
        buffer_episodes: int,
        shuffle: bool = True,
        replacement: bool = False,
        rank: int = 0,
        world_size: int = 1,
        endless: bool = False,
        warm_up: bool = False,
    ):
        super().__init__()
        self.rank, self.world_size, self.endless = int(rank), int(world_size), bool(endless)
        self.warm_up = bool(warm_up)
        self.counts = np.asarray(items_per_episode, dtype=np.int64)
        self.batch_size, self.drop_last, self.seed = int(batch_size), bool(drop_last), int(seed)
        self.buffer_episodes, self.shuffle, self.replacement = int(buffer_episodes), bool(shuffle), bool(replacement)
        self.epoch, self._batch = -1, 0
        self._seek = None
        self.plan = None
        self._plans: dict[int, np.ndarray] = {}  # the last passes planned (the next one is planned ahead)
        self._planning: dict[int, threading.Thread] = {}  # passes being planned in the background
        self._lock = threading.Lock()

    def num_batches(self) -> int:
        """Batches in one pass (this rank's share of the items when ``world_size`` > 1): the last partial batch
        counts unless ``drop_last``."""
        n = int(self.counts.sum())
        if self.world_size > 1:
            n = len(rank_share(n, self.rank, self.world_size))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _make(self, epoch: int) -> np.ndarray:
        """Pass ``epoch``'s plan, kept as int32 when the episodes and items fit (8 bytes per item instead of 16:
        two passes are held at a time)."""
        plan = plan_windows(
            self.counts,
            self.seed,
            epoch,
            self.buffer_episodes,
            self.shuffle,
            self.replacement,
            self.rank,
            self.world_size,
            warm_up=self.batch_size if self.warm_up and epoch == 0 else 0,
        )
        if len(self.counts) < 2**31 and (not len(self.counts) or int(self.counts.max()) < 2**31):
            plan = plan.astype(np.int32)
        return plan

    def keep(self, epoch: int, plan: np.ndarray) -> None:
        """Keep pass ``epoch``'s plan (made here, in the background, or by another node of the same arguments), so
        that it is not made again.

        Args:
            epoch: The pass.
            plan: Its (N, 2) plan.
        """
        with self._lock:
            newest = max([epoch] + list(self._plans))
            self._plans = {e: p for e, p in self._plans.items() if e >= newest - 1}
            if epoch >= newest - 1:
                self._plans[epoch] = plan

    def plan_of(self, epoch: int) -> np.ndarray:
        """The pass's plan; computed once (~0.2 s per million items, numpy), so that a plan made ahead
        (:meth:`plan_ahead`, or ``DecodeAhead`` opening the next pass early) is not made again when the pass
        starts.

        Args:
            epoch: The pass.

        Returns:
            (N, 2) (episode, k) pairs in serving order (int32 when they fit).
        """
        epoch = int(epoch)
        with self._lock:
            plan, pending = self._plans.get(epoch), self._planning.get(epoch)
        if plan is None and pending is not None:
            pending.join()
            with self._lock:
                plan = self._plans.get(epoch)
        if plan is None:
            plan = self._make(epoch)
            self.keep(epoch, plan)
        return plan

    def plan_ahead(self, epoch: int) -> None:
        """Plan pass ``epoch`` in a background thread, unless it is planned or being planned. Not a daemon: an
        interpreter exiting meanwhile waits for it (under a second), instead of finalizing under numpy.

        Args:
            epoch: The pass to plan.
        """
        epoch = int(epoch)
        with self._lock:
            if epoch in self._plans or epoch in self._planning:
                return
            thread = threading.Thread(target=self._plan_in_background, args=(epoch,), name="robo-loaders-plan")
            self._planning[epoch] = thread
        thread.start()

    def _plan_in_background(self, epoch: int) -> None:
        try:
            self.keep(epoch, self._make(epoch))
        except Exception:  # noqa: BLE001 - planned again (and raised) on the training thread when the pass starts
            pass
        finally:
            with self._lock:
                self._planning.pop(epoch, None)

    def seek(self, epoch: int, batch: int = 0) -> None:
        """Make the next ``reset()`` (without a state) start at pass ``epoch``, batch ``batch``: how a resumed run or
        a sampler's ``set_epoch`` positions the pipeline without a torchdata state dict.

        Args:
            epoch: The pass.
            batch: The batch of that pass to yield next.
        """
        self._seek = {EPOCH_KEY: int(epoch), BATCH_KEY: int(batch)}

    def reset(self, initial_state=None):
        """Start a pass (torchdata's ``BaseNode.reset``): at ``initial_state``, else where :meth:`seek` said, else the
        pass after the current one from its first batch; then plan the following pass in the background.

        Args:
            initial_state: A state from :meth:`get_state` (``None``: see above).
        """
        super().reset(initial_state)
        state = initial_state if initial_state is not None else self._seek
        self._seek = None
        if state is not None:
            self.epoch, self._batch = int(state[EPOCH_KEY]), int(state[BATCH_KEY])
        else:
            self.epoch, self._batch = self.epoch + 1, 0
        self.plan = self.plan_of(self.epoch)
        self.plan_ahead(self.epoch + 1)

    def next(self):
        """The next batch of the pass (torchdata's ``BaseNode.next``).

        Returns:
            (B, 2) (episode, k) pairs, a view of the pass's plan; B is ``batch_size`` but for the last batch.

        Raises:
            StopIteration: the pass is over (never, with ``endless``, unless a pass has no batch).
        """
        if self._batch >= self.num_batches():
            if not self.endless or not self.num_batches():
                raise StopIteration
            self.epoch, self._batch = self.epoch + 1, 0  # the next pass, planned in the background meanwhile
            self.plan = self.plan_of(self.epoch)
            self.plan_ahead(self.epoch + 1)
        b = self._batch
        self._batch += 1
        return self.plan[b * self.batch_size : (b + 1) * self.batch_size]

    def get_state(self):
        """The position to resume from (torchdata's ``BaseNode.get_state``): ``{EPOCH_KEY: pass, BATCH_KEY: batches
        already yielded}``."""
        return {EPOCH_KEY: self.epoch, BATCH_KEY: self._batch}
