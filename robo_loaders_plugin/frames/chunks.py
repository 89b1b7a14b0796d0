"""Camera frames of parts of episodes, decoded on demand into a bounded cache (the pipeline-served backends' units;
on robomimic through :class:`EpisodeUnits`).

Why parts of episodes: the pipeline opens a few *units* at a time and draws items from them (``pipeline.plan``),
decoding each unit once per pass. A unit that is a whole episode is fine at 84x84 (a 100-frame episode of two
cameras is 4 MB), but a 20-s episode of three 480p cameras is 1.7 GB decoded: a shuffle buffer of them does not fit
in memory, and the first batch waits for several of them to decode (measured: docs/benchmarks.md, *Measurements
behind the code*). So long episodes are cut
into units of about :data:`UNIT_BYTES` decoded, and each unit is decoded with the frames its items' windows reach
outside it (``margin``: a diffusion policy's previous frame), so an item never needs a second unit. Fields that are
not camera frames (a few bytes per row) are held whole for every row.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch

from robo_loaders_plugin.core.lru import LoadOnceLRU
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource, broadcast_episodes, copy_windows, grouped
from robo_loaders_plugin.frames.joined_loads import JoinsLoads

UNIT_BYTES = 32 << 20  # decoded camera bytes of one unit: 12 frames of three 480p cameras, whole 84x84 episodes


def split_runs(
    runs: list[tuple[int, int, int]], step_bytes: int, unit_bytes: int | None = None
) -> list[tuple[int, int, int]]:
    """Cut episode runs ``(episode, first row, end row)`` into units of about ``unit_bytes`` (default
    :data:`UNIT_BYTES`; ``step_bytes`` per row): an episode of up to 1.5 units stays whole, a longer one is cut into
    near-equal parts, in row order.

    Args:
        runs: ``(episode, first row, end row)`` of each episode (end exclusive).
        step_bytes: Decoded camera bytes of one row (every camera).
        unit_bytes: The target decoded bytes of a unit (``None`` or 0: :data:`UNIT_BYTES`); at least one row.

    Returns:
        The units, ``(episode, first row, end row)``, in the order of ``runs`` and, within an episode, of rows.
    """
    per = max(1, int(unit_bytes or UNIT_BYTES) // max(1, int(step_bytes)))
    out = []
    for ep, s, e in runs:
        n = e - s
        if n <= 1.5 * per:
            out.append((ep, s, e))
            continue
        parts = -(-n // per)
        cuts = s + (np.arange(parts + 1) * n) // parts
        out += [(ep, int(a), int(b)) for a, b in itertools.pairwise(cuts)]
    return out


def runs_of(lengths) -> list[tuple[int, int, int]]:
    """Episodes laid end to end (episode ``i``'s rows follow episode ``i - 1``'s), as a footprint sees them from
    metadata.

    Args:
        lengths: Each episode's rows.

    Returns:
        ``(episode, first row, end row)`` of each.
    """
    starts = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))])
    return [(i, int(a), int(b)) for i, (a, b) in enumerate(itertools.pairwise(starts))]


def split_lengths(lengths, step_bytes: int) -> list[tuple[int, int, int]]:
    """:func:`split_runs` over episodes laid end to end (episode ``i``'s rows follow episode ``i - 1``'s), as a
    footprint sees them from metadata: the one way every backend buffering parts cuts a dataset.

    Args:
        lengths: Each episode's rows.
        step_bytes: Decoded camera bytes of one row (every camera).

    Returns:
        The units, ``(episode, first row, end row)``; as many as episodes when none is long.
    """
    return split_runs(runs_of(lengths), step_bytes)


class ChunkFrames(JoinsLoads, FrameSource):
    """Units (parts of episodes, in row order) whose camera frames are loaded whole, with margins, on demand.

    Args:
        units: ``(episode, first row, end row)`` of each unit; rows are the dataset's, contiguous per episode.
        episode_rows: ``{episode: (first row, end row)}``: margins never cross these.
        infos: Every field's dtype and step shape (``frames``: the ones loaded per unit).
        small: ``{field: array of every row}`` for the fields that are not frames.
        load: ``load(episode, lo, hi)`` -> ``{frame field: rows lo..hi-1}`` (decoded arrays, or
            :class:`EncodedFrames` decoded per batch).
        margin: ``(before, after)`` rows each unit is loaded with beyond its own (the windows' reach).
        capacity: Units kept loaded.
    """

    def __init__(
        self,
        units,
        episode_rows: dict,
        infos: dict[str, FieldInfo],
        small: dict,
        load: Callable[[int, int, int], dict],
        margin: tuple[int, int],
        capacity: int,
    ):
        self.units = [tuple(int(x) for x in u) for u in units]
        self.lengths = np.array([e - s for _, s, e in self.units], dtype=np.int64)
        self.unit_start = np.array([s for _, s, _ in self.units], dtype=np.int64)
        before, after = (max(0, int(m)) for m in margin)
        self.lo = np.array([max(episode_rows[ep][0], s - before) for ep, s, _ in self.units], dtype=np.int64)
        self.hi = np.array([min(episode_rows[ep][1], e + after) for ep, _, e in self.units], dtype=np.int64)
        self.infos, self.small, self.load = dict(infos), small, load
        self.frame_fields = [k for k, v in self.infos.items() if v.frames]
        self.capacity = int(capacity)
        self.cache = LoadOnceLRU(self._load, self.capacity)

    def __getstate__(self):  # each process has its own cache
        state = dict(self.__dict__)
        state["cache"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.cache = LoadOnceLRU(self._load, self.capacity)

    def _load(self, unit: int) -> dict:
        ep = self.units[unit][0]
        return self.load(ep, int(self.lo[unit]), int(self.hi[unit]))

    def info(self, field: str) -> FieldInfo:
        """A field's dtype, step shape and whether it is loaded per unit (:meth:`FrameSource.info`).

        Args:
            field: The field's name.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            KeyError: the source does not serve the field (the message lists those it serves).
        """
        try:
            return self.infos[field]
        except KeyError:
            raise KeyError(f"field {field!r} is not served by this source (it has: {sorted(self.infos)})") from None

    def _local(self, field: str, u: int, rows: np.ndarray) -> np.ndarray:
        local = rows - self.lo[u]
        if local.min() < 0 or local.max() >= self.hi[u] - self.lo[u]:  # the margins cover every window
            raise IndexError(
                f"{field}: rows {int(rows.min())}..{int(rows.max())} reach outside unit {u} (rows "
                f"{int(self.lo[u])}..{int(self.hi[u]) - 1} loaded)"
            )
        return local

    def gather(self, field, episodes, steps, pool=None):
        """``field`` at (unit, step) pairs (:meth:`FrameSource.gather`): frames decoded on a GPU (NVDEC) are
        gathered where they are, as a tensor on that device; everything else into numpy (:meth:`take`).

        Args:
            field: The field's name.
            episodes: (B,) *unit* indices (this source's episodes are its units).
            steps: (B,) or (B, T) row offsets from each unit's first row (may reach into its margins).
            pool: Recycles a numpy output array (:class:`~robo_loaders_plugin.storage.buffers.BufferPool`), or
                ``None``.

        Returns:
            The values, ``steps.shape + step shape``: a ``torch.Tensor`` on the frames' device, or a numpy array.

        Raises:
            KeyError: the field is not served.
            IndexError: a row reaches outside what its unit was loaded with.
        """
        info = self.info(field)
        units = np.asarray(episodes)
        if not info.frames or not len(units):
            return super().gather(field, episodes, steps, pool)
        first = self.cache.get(int(units[0]))[field]
        if not isinstance(first, torch.Tensor):
            return super().gather(field, episodes, steps, pool)
        rows = (self.unit_start[broadcast_episodes(units, steps)] + steps).reshape(len(units), -1)
        out = torch.empty(rows.shape + tuple(info.shape), dtype=first.dtype, device=first.device)
        uniq, inverse = np.unique(units, return_inverse=True)
        for i, u in enumerate(uniq.tolist()):
            at = np.flatnonzero(inverse == i)
            values = self.cache.get(u)[field]
            local = torch.from_numpy(self._local(field, u, rows[at])).to(first.device)
            out[torch.from_numpy(at).to(first.device)] = values[local]
        return out.reshape(tuple(np.shape(steps)) + tuple(info.shape))

    def take(self, field, episodes, steps, out):
        """Write ``field`` at (unit, step) pairs into ``out`` (:meth:`FrameSource.take`): fields that are not frames
        from the rows held whole, frames from each unit's loaded rows (loading the unit when it is not cached;
        :class:`EncodedFrames` decoded straight into ``out``).

        Args:
            field: The field's name.
            episodes: (B,) unit indices.
            steps: (B,) or (B, T) row offsets from each unit's first row.
            out: A numpy array of ``steps.shape + step shape`` and the field's dtype, written in place.

        Raises:
            KeyError: the field is not served.
            IndexError: a row reaches outside what its unit was loaded with.
        """
        info = self.info(field)
        units = np.asarray(episodes)
        if not info.frames:
            g = self.unit_start[broadcast_episodes(units, steps)] + steps  # the dataset's rows
            np.take(self.small[field], g.reshape(-1), axis=0, out=out.reshape((-1,) + tuple(info.shape)))
            return
        B = len(units)
        st = np.asarray(steps).reshape(B, -1)
        self.take_into(field, units, st, out.reshape((B, st.shape[1]) + tuple(info.shape)), np.arange(B))

    def take_into(self, field: str, episodes: np.ndarray, steps: np.ndarray, out: np.ndarray, rows: np.ndarray):
        """``out[rows[b]] = field[unit episodes[b]][steps[b]]`` for a frame field: what :meth:`take` and a
        mixture's joined read (``frames.joined_loads``) write, into any rows of a batch.

        Args:
            field: A frame field's name.
            episodes: (n,) unit indices.
            steps: (n, T) row offsets from each unit's first row.
            out: The batch, ``(N, T) + step shape``, C-contiguous.
            rows: (n,) distinct rows of ``out``.

        Raises:
            IndexError: a row reaches outside what its unit was loaded with.
        """
        units = np.asarray(episodes)
        g = self.unit_start[units][:, None] + steps  # the dataset's rows
        local = g - self.lo[units][:, None]  # rows within each unit's loaded rows
        # every row checked and every unit's rows found at once, before any unit is loaded: per unit, the check and
        # the search were a fifth of the assembling threads' time holding the GIL (docs/scale.md, the copy ceiling)
        outside = ((local < 0) | (local >= (self.hi - self.lo)[units][:, None])).any(axis=1)
        if outside.any():
            u = int(units[outside].min())
            self._local(field, u, g[units == u])  # raises, naming the unit and its rows
        order, groups = grouped(units)
        # units no other thread is loading are loaded first, those being loaded elsewhere waited for last
        for i, loaded in self.cache.iter_loaded([u for u, _, _ in groups]):
            _, a, z = groups[i]
            at = order[a:z]
            held = loaded[field]
            held = held.numpy() if isinstance(held, torch.Tensor) else held
            copy_windows(held, local[at], out, rows[at])


class EpisodeUnits(FrameSource):
    """Episodes addressed by ``(episode, step)`` (what robomimic's window rules ask for), served from the units
    of a :class:`ChunkFrames`: each request row from the unit holding its first step, which is loaded with the
    steps a window reaches after it (the margin). Why a view and not the units themselves: the window rules
    compute padding and goals per episode, so the episodes keep their steps; only where the frames come from
    changes (a 400-step demo of 240x240 cameras is read and held a few parts at a time).

    Rows some samples ask for outside their window (robomimic's ``goal_mode="last"`` goal, the last ``next_obs``
    of the demo) are *pinned*: loaded once per episode by ``load_pinned`` and kept, so that a goal never loads the
    demo's last unit beside the one the sample is drawn from.

    Args:
        chunks: The units (``(episode, first row, end row)`` in the dataset's rows), loaded with margins
            ``(0, T - 1)`` for windows of at most ``T`` steps.
        episode_starts: The first dataset row of each episode.
        lengths: Steps of each episode.
        pinned_steps: One step per episode served from ``load_pinned`` (``None``: none).
        load_pinned: ``load_pinned(episode)`` -> ``{frame field: one row}`` (the frames at that episode's pinned
            step).
        pinned_fields: The fields ``load_pinned`` gives (the goal's cameras); every other field at a pinned step
            comes from the units (the observation window of a one-step sample at the demo's last step asked the
            pinned rows for an ``obs/`` camera they do not hold: a ``KeyError``, in a reviewer's reproduction).
    """

    def __init__(
        self,
        chunks: ChunkFrames,
        episode_starts,
        lengths,
        pinned_steps=None,
        load_pinned: Callable[[int], dict] | None = None,
        pinned_fields=(),
    ):
        self.chunks = chunks
        self.starts = np.asarray(episode_starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.pinned_steps = None if pinned_steps is None else np.asarray(pinned_steps, dtype=np.int64)
        self.load_pinned = load_pinned
        self.pinned_fields = frozenset(pinned_fields)
        self._pinned = LoadOnceLRU(self._load_pinned, len(self.lengths))

    @property
    def cache(self) -> LoadOnceLRU:
        """The units' cache (the pipeline fits its pass to it and releases the units a pass is done with)."""
        return self.chunks.cache

    @property
    def unit_count(self) -> int:
        """Units the pipeline plans its passes over (what :meth:`units_of` returns)."""
        return len(self.chunks.units)

    def __getstate__(self):  # each process keeps its own pinned rows
        state = dict(self.__dict__)
        state["_pinned"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._pinned = LoadOnceLRU(self._load_pinned, len(self.lengths))

    def _load_pinned(self, episode: int) -> dict:
        return self.load_pinned(episode)

    def units_of(self, episodes, first_steps) -> np.ndarray:
        """The unit serving windows that start at ``first_steps`` of ``episodes``.

        Args:
            episodes: Episode indices.
            first_steps: The first step of each window, in its episode.

        Returns:
            int64 unit indices, the shape of the arguments.
        """
        rows = self.starts[np.asarray(episodes)] + np.asarray(first_steps)
        return np.searchsorted(self.chunks.unit_start, rows, side="right") - 1

    def info(self, field: str) -> FieldInfo:
        """:meth:`ChunkFrames.info` of the units (the episodes' fields are theirs).

        Args:
            field: The field's name.
        """
        return self.chunks.info(field)

    def take(self, field, episodes, steps, out):
        """Write ``field`` at (episode, step) pairs into ``out`` (:meth:`FrameSource.take`): each row of the request
        from the unit holding its first step, pinned steps from the pinned rows.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) steps within each row's episode.
            out: A numpy array of ``steps.shape + step shape`` and the field's dtype, written in place.

        Raises:
            KeyError: the field is not served.
            IndexError: a row reaches beyond the margin its unit was loaded with.
        """
        episodes = np.asarray(episodes)
        B = len(episodes)
        flat = np.asarray(steps).reshape(B, -1)
        info = self.chunks.info(field)
        todo = np.arange(B)
        if info.frames and self.pinned_steps is not None and field in self.pinned_fields and flat.shape[1] == 1:
            pinned = np.flatnonzero(flat[:, 0] == self.pinned_steps[episodes])
            if len(pinned):
                flat_out = out.reshape((B,) + tuple(info.shape))
                for b in pinned.tolist():
                    flat_out[b] = self._pinned.get(int(episodes[b]))[field]
                todo = np.setdiff1d(todo, pinned, assume_unique=True)
                if not len(todo):
                    return
        units = self.units_of(episodes[todo], flat[todo, 0])
        rel = self.starts[episodes[todo]][:, None] + flat[todo] - self.chunks.unit_start[units][:, None]
        if len(todo) == B:
            self.chunks.take(field, units, rel.reshape(np.shape(steps)), out)
            return
        part = np.empty((len(todo),) + flat.shape[1:] + tuple(info.shape), dtype=out.dtype)
        self.chunks.take(field, units, rel, part)
        out.reshape((B,) + flat.shape[1:] + tuple(info.shape))[todo] = part
