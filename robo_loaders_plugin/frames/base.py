"""The frame-source protocol every backend gathers through.

Why one protocol: the window rules (``robo_loaders_plugin.windows``) turn sample indices into ``(episode, step)``
index arrays, the same for every backend; what differs is only where an episode's arrays live (a compressed store
mapped from RAM, episodes read from shards, tensors on a GPU, later decoded video buffers). A frame source answers
one question, "field F at these (episode, step) pairs", as fast as its storage allows: into a numpy array, or, for
device-resident sources, as a tensor where the data lives.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import numpy as np

from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.storage.pages import empty_small_pages

# how a field is read at a position between two recorded steps (rate conversion, ``windows.rates``)
NEAREST, PREVIOUS, LINEAR = "nearest", "previous", "linear"
MODES = (NEAREST, PREVIOUS, LINEAR)
_EPS = 1e-6  # positions within this of a step are that step (float error of time -> step conversions)


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """How a frame source stores one field; the same in every episode.

    Attributes:
        dtype: The field's dtype.
        shape: The shape of one step.
        frames: Whether it is camera frames: stored compressed or decoded per step, and copied row by row.
    """

    dtype: np.dtype
    shape: tuple  # of one step
    frames: bool  # camera frames: stored compressed/decoded per step, copied row by row


class JoinedField(abc.ABC):
    """One field of several frame sources of one class, read as one (:meth:`FrameSource.join_field`): a mixture's
    camera across all its components.

    Built once per field (in each process), so what a read across the parts needs (where each part's frames lie,
    which were checked) is laid out once, and a batch is located with a few numpy calls over all its rows instead
    of a few per part (measured: docs/benchmarks.md, *Where a mixed batch's time goes*).
    """

    @abc.abstractmethod
    def take(self, parts: np.ndarray, episodes: np.ndarray, steps: np.ndarray, rows: np.ndarray, out) -> None:
        """``out[rows[b], ...] = parts[b]``'s field at ``(episodes[b], steps[b, ...])``, for every ``b``.

        Args:
            parts: (B,) each row's part: an index into the ``parts`` the field was joined from.
            episodes: (B,) each row's episode in its part's source.
            steps: (B,) or (B, T) step indices within each row's episode.
            rows: (B,) distinct rows of ``out`` to write.
            out: The destination, ``(N,) + steps.shape[1:] + step shape`` of the field's dtype, C-contiguous.

        Raises:
            IndexError: a step outside its part's rows, where the parts' class checks it.
        """


class FrameSource(abc.ABC):
    """Per-episode arrays; ``lengths[e]`` steps in episode ``e``; every episode stores a field the same way."""

    lengths: np.ndarray

    # whether a mixture reads this source's low-dim rows of every episode at its start (``mixtures.joined_frames``:
    # True, the rows are at hand: in memory, or one read of a store) or as its batches first reach each episode
    # (False: a source that reads whole episode records, where reading them all means reading every record, and
    # an episode's first load for a batch keeps its low-dim fields anyway)
    low_dim_up_front: bool = True

    @abc.abstractmethod
    def info(self, field: str) -> FieldInfo:
        """dtype and per-step shape of ``field``.

        Args:
            field: The field's name.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            KeyError: (or the source's own error) naming the field, when the source does not serve it.
        """

    @abc.abstractmethod
    def take(self, field: str, episodes: np.ndarray, steps: np.ndarray, out: np.ndarray) -> None:
        """``out[b, ...] = field[episodes[b]][steps[b, ...]]``.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode (already clamped into it).
            out: The destination, ``steps.shape + step shape``, of the field's dtype.
        """

    def close(self) -> None:  # noqa: B027 - a default that does nothing, not an abstract method
        """Release files, maps and threads now rather than at garbage collection (a frame source holding none
        keeps this default, which does nothing)."""

    def closed(self, where: str) -> FrameSource:
        """:meth:`close` this source and return what its dataset reads from afterwards: a source refusing every
        read with one line naming ``where``.

        Args:
            where: What was closed (the dataset's location), for the message.

        Returns:
            A :class:`ClosedFrames`.
        """
        self.close()
        return ClosedFrames(getattr(self, "lengths", ()), where)

    def gather(self, field: str, episodes: np.ndarray, steps: np.ndarray, pool=None):
        """``field`` at (episode, step) pairs as one ``steps.shape + step shape`` array.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode.
            pool: An ``extend.BufferPool`` to recycle the output array from, or ``None`` for a new array.

        Returns:
            The values, as a numpy array; device-resident sources return a tensor where their data lives instead.
        """
        info = self.info(field)
        shape = tuple(steps.shape) + tuple(info.shape)
        out = pool.empty(shape, info.dtype) if pool is not None else empty_small_pages(shape, info.dtype)
        self.take(field, episodes, steps, out)
        return out

    def gather_low_dim(self, fields, episodes: np.ndarray, steps: np.ndarray) -> dict:
        """Fields that are not camera frames at many (episode, step) pairs at once: what a mixture reads once at its
        start, every component's low-dim rows into one table each (``mixtures.joined_frames``).

        Why a call of its own: a source that loads whole episodes may read them here without their frames (a
        mixture of hundreds of components read every episode whole for its low-dim rows); training's reads keep
        their own order. This default is :meth:`gather_fields`.

        Args:
            fields: The fields' names (none of them frames).
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode.

        Returns:
            ``{field: values}`` as :meth:`gather_fields` returns them.
        """
        return self.gather_fields(fields, episodes, steps)

    def low_dim_of_unit(self, fields, episode: int) -> dict:
        """Fields that are not camera frames at every step of one episode: what a mixture keeps of an episode as
        its batches first reach it (``low_dim_up_front`` false; ``mixtures.joined_frames``). This default is
        :meth:`gather_low_dim` over its steps.

        Args:
            fields: The fields' names (none of them frames).
            episode: The episode's index.

        Returns:
            ``{field: values}``, each ``(steps,) + step shape``.
        """
        n = int(self.lengths[episode])
        return self.gather_low_dim(fields, np.full(n, episode, dtype=np.int64), np.arange(n, dtype=np.int64))

    def gather_fields(self, fields, episodes: np.ndarray, steps: np.ndarray, pool=None) -> dict:
        """Several fields at the same (episode, step) pairs, as :meth:`gather` returns each.

        Why a call of its own: a LeRobot batch reads most of its keys at the same rows (every tabular column at the
        items' rows; a camera and ``observation.state`` at the same window), and a source that finds where rows
        live (a global row, a tier, a loaded unit) does it once per call, not once per key (what that saves:
        docs/benchmarks.md, *Measurements behind the code*). This default calls :meth:`gather` per field; sources
        with per-call bookkeeping override it.

        Args:
            fields: The fields' names.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode.
            pool: Recycles the output arrays (``extend.BufferPool``), or ``None``.

        Returns:
            ``{field: values}`` in the order of ``fields``, each as :meth:`gather` returns it.
        """
        return {f: self.gather(f, episodes, steps, pool) for f in fields}

    @classmethod
    def join_field(cls, parts: Sequence[tuple[FrameSource, str]]) -> JoinedField | None:
        """One field of several sources of this class as one reader (a mixture's camera across its components,
        ``mixtures.joined_frames``), or ``None`` to decline. Called once per camera group (below) and process, on the
        class of every part's source.

        Why a hook of its own: a batch of a mixture reads each camera from ~25 components' sources, a few frames
        each, and a source whose reads carry per-call bookkeeping (a decoder and a layout buffer set up, frames put
        back in their layout, rows located) pays it once per component; a class that holds its frames the same way
        in every source can lay them out once for all of them and read a batch in one call (measured:
        docs/benchmarks.md, *Where a mixed batch's time goes*). This default declines, and the caller reads each
        source by :meth:`gather_fields`.

        A mixture asks once for all its cameras of one dtype and step shape, every (component, camera) pair a part
        (one source may come with several fields), so that a batch reads its cameras in one call, each camera's
        rows a slice of one output; where that is declined, it asks again for each camera alone.

        Args:
            parts: ``(source, field)`` pairs, every source of this class: the field's name in that source.

        Returns:
            A :class:`JoinedField`, or ``None`` when the sources cannot be read as one (this class, or the sources
            hold the field in different dtypes, shapes or layouts).
        """
        del parts
        return None


def gather(source: FrameSource, field: str, episodes, steps, pool=None):
    """:meth:`FrameSource.gather`, with ``episodes`` and ``steps`` made numpy arrays first.

    Args:
        source: The frame source.
        field: The field's name.
        episodes: (B,) episode indices (any sequence).
        steps: (B,) or (B, T) step indices (any sequence).
        pool: Recycles the output array (:class:`~robo_loaders_plugin.storage.buffers.BufferPool`), or ``None``.

    Returns:
        The values (see :meth:`FrameSource.gather`).
    """
    return source.gather(field, np.asarray(episodes), np.asarray(steps), pool)


def gather_many(source: FrameSource, fields, episodes, steps, pool=None) -> dict:
    """:meth:`FrameSource.gather_fields`, with ``episodes`` and ``steps`` made numpy arrays first.

    Args:
        source: The frame source.
        fields: The fields' names.
        episodes: (B,) episode indices (any sequence).
        steps: (B,) or (B, T) step indices (any sequence).
        pool: Recycles the output arrays, or ``None``.

    Returns:
        ``{field: values}`` (see :meth:`FrameSource.gather_fields`).
    """
    return source.gather_fields(fields, np.asarray(episodes), np.asarray(steps), pool)


def gather_at(source: FrameSource, field: str, episodes, positions, mode: str, pool=None):
    """``field`` at step positions that may fall between recorded steps (rate conversion, ``windows.rates``).

    ``nearest`` takes the closer step (ties: the later one), ``previous`` the step at or before (zero-order hold),
    ``linear`` blends the two neighbours (float fields only). Integral positions read exactly the recorded steps,
    whatever the mode, so conversion to the recorded rate is the identity.

    Args:
        source: The frame source.
        field: The field's name.
        episodes: (B,) episode indices.
        positions: (B,) or (B, T) step positions, integer or float, already clamped into each episode.
        mode: :data:`NEAREST`, :data:`PREVIOUS` or :data:`LINEAR`.
        pool: Recycles the output array of an exact read (a blended one is always new), or ``None``.

    Returns:
        The values, ``positions.shape + step shape``.

    Raises:
        ValueError: an unknown mode, for positions between steps.
    """
    positions = np.asarray(positions)
    episodes = np.asarray(episodes)
    if positions.dtype.kind in "iu":
        return gather(source, field, episodes, positions, pool)
    lo = np.floor(positions + _EPS).astype(np.int64)
    frac = positions - lo
    if mode == PREVIOUS or not np.any(frac > _EPS):
        return gather(source, field, episodes, lo, pool)
    if mode == NEAREST:
        return gather(source, field, episodes, np.where(frac >= 0.5 - _EPS, lo + 1, lo), pool)
    if mode != LINEAR:
        raise ValueError(f"unknown resampling mode {mode!r}; choose one of {MODES}")
    last = (np.asarray(source.lengths)[episodes] - 1).reshape(episodes.shape + (1,) * (positions.ndim - 1))
    a = gather(source, field, episodes, lo)
    b = gather(source, field, episodes, np.minimum(lo + 1, last))
    w = np.where(frac > _EPS, frac, 0.0)
    return lerp(a, b, w)


def lerp(a, b, w: np.ndarray):
    """``a + w * (b - a)`` in ``a``'s float dtype, ``w`` broadcast over the per-step dims (numpy or torch).

    Args:
        a: Values at the step before (numpy array or tensor).
        b: Values at the step after, like ``a``.
        w: Weights in [0, 1], one per position (numpy), ``a.shape`` without the per-step dims.

    Returns:
        The blend, of ``a``'s type, dtype and device.
    """
    w = w.reshape(w.shape + (1,) * (a.ndim - w.ndim))
    if isinstance(a, np.ndarray):
        return (a + (b - a) * w.astype(a.dtype)).astype(a.dtype, copy=False)
    import torch

    return torch.lerp(a, b, torch.from_numpy(w).to(device=a.device, dtype=a.dtype))


ROW_COPY_BYTES = 256  # fields whose steps are at least this big are copied window by window (a slice per row)


def copy_windows(values, local: np.ndarray, out: np.ndarray, at: np.ndarray) -> None:
    """One held episode's (or unit's) windows copied into a batch: ``out[at[j]] = values[local[j]]``.

    Why one function: :class:`~robo_loaders_plugin.frames.episodes.EpisodeFrames` (whole episodes) and
    :class:`~robo_loaders_plugin.frames.chunks.ChunkFrames` (units of episodes) hold the same kinds of arrays, and
    each kind has one fastest copy: compressed frames
    (:class:`~robo_loaders_plugin.storage.encoded_frames.EncodedFrames`) are decoded straight into ``out`` in one
    call; steps under :data:`ROW_COPY_BYTES` take one fancy index; larger ones (camera frames) are copied window by
    window, a slice where the window's steps are consecutive, because a fancy index first builds a temporary of
    the windows and the batch copies it again (two copies of every frame).

    Args:
        values: The held steps (an array, steps first) or their ``EncodedFrames``.
        local: (n, T) steps within ``values``, one window per row (clamped at the episode's edges: repeats).
        out: The batch, ``(B, T) + step shape``, written in place.
        at: (n,) the batch rows the windows go to.
    """
    T = local.shape[1]
    if isinstance(values, EncodedFrames):  # frames stored channels last are put back a group at a time
        dest = step_slots(at, T)
        values.decode_into(local.reshape(-1).tolist(), out.reshape((-1,) + out.shape[2:]), dest.tolist())
    elif values[0].nbytes < ROW_COPY_BYTES:
        out[at] = values[local]
    else:
        first = local[:, 0]
        # consecutive steps, each one after the other: a clamped window of sparse offsets can span T - 1 steps with
        # repeats ((-4, -1, 0, 2, 6) at an episode's last step reads 7, 10, 11, 11, 11: a slice served 7..11)
        contiguous = (np.diff(local, axis=1) == 1).all(axis=1).tolist()
        for r, lo, whole, row in zip(at.tolist(), first.tolist(), contiguous, local):
            out[r] = values[lo : lo + T] if whole else values[row]


def part_offsets(counts) -> np.ndarray:
    """Where each part's entries start when the parts' entries are laid end to end (``[0, c0, c0 + c1, ...]``, one
    more than ``counts``): how a joined read (:class:`JoinedField`) and a mixture number every part's episodes,
    blobs or units in one array.

    Args:
        counts: Each part's number of entries.

    Returns:
        (len(counts) + 1,) int64 offsets; the last is the total.
    """
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


def step_slots(rows, T: int) -> np.ndarray:
    """The flat positions of ``T`` steps of each row in a ``(N, T, ...)`` batch viewed as ``(N * T, ...)``: row
    ``r``'s steps at ``r * T .. r * T + T - 1``, in the order of ``rows``.

    Args:
        rows: (B,) batch rows.
        T: Steps per row.

    Returns:
        (B * T,) int64 positions.
    """
    return (np.asarray(rows, dtype=np.int64)[:, None] * T + np.arange(T)).reshape(-1)


def runs(keys: np.ndarray) -> list[tuple[int, int, int]]:
    """``(key, start, end)`` of each run of equal values in ``keys`` (sorted: one run per key), for a joined read's
    loop over its parts (:class:`JoinedField`).

    Args:
        keys: (N,) integer keys, equal ones adjacent.

    Returns:
        The runs, in order.
    """
    if not keys.size:
        return []
    cuts = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), keys.size]
    return list(zip(keys[cuts[:-1]].tolist(), cuts[:-1], cuts[1:]))


def grouped(keys) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """A batch's positions grouped by key: one stable sort, then :func:`runs` over it. Why not a search per key
    (``np.unique`` and ``flatnonzero(inverse == i)`` for each): that costs a pass over the batch per key, and a
    batch drawn from many episodes, units or parts has as many keys as rows.

    Args:
        keys: (N,) integer keys (episodes, units, parts), in batch order.

    Returns:
        ``(order, groups)``: the positions sorted by key (in batch order within a key), and ``(key, start, end)`` of
        each key's positions in ``order[start:end]``, keys ascending.
    """
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    return order, runs(keys[order])


def broadcast_episodes(episodes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Episode of every element of ``steps``.

    Args:
        episodes: (B,) episode indices, one per row.
        steps: (B,) or (B, T) step indices.

    Returns:
        ``episodes`` broadcast to ``steps.shape`` (a read-only view).
    """
    return np.broadcast_to(episodes.reshape(episodes.shape + (1,) * (steps.ndim - 1)), steps.shape)


class ClosedFrames(FrameSource):
    """What a closed dataset reads from: every read fails with one line naming what was closed, instead of an
    error from a closed map or file deep inside a gather."""

    def __init__(self, lengths, where: str):
        self.lengths, self.where = np.asarray(lengths, dtype=np.int64), where

    def info(self, field: str) -> FieldInfo:
        """Refuses: the dataset was closed.

        Args:
            field: The field asked for.

        Raises:
            RoboLoadersError: always, naming the dataset.
        """
        from robo_loaders_plugin.core.errors import RoboLoadersError

        raise RoboLoadersError(f"the dataset over {self.where} was closed; build it again to read from it")

    def take(self, field, episodes, steps, out) -> None:
        """Refuses, as :meth:`info` does.

        Args:
            field: The field asked for.
            episodes: Unused.
            steps: Unused.
            out: Unused.
        """
        self.info(field)


def frames_first(frames: FrameSource, groups: list) -> list:
    """Groups of fields read together (``(anything, field names)`` pairs: the item rules' reads of one batch),
    those holding camera frames first, otherwise in their order.

    Why: a source that loads a unit whole, its frames and the rest (``frames.episodes.EpisodeFrames`` over
    shards), keeps the unit's other fields at that load; a mixture's low-dim tables are filled from
    them after the reads (``mixtures.joined_frames.JoinedFrames``). Read first, the low-dim fields read each unit
    without its frames, and its frames were then read again: two reads of every record a pass first reaches.

    Args:
        frames: The frame source the keys are read from.
        groups: ``(anything, field names)`` pairs.

    Returns:
        The same pairs, reordered.
    """
    return sorted(groups, key=lambda group: not any(frames.info(key).frames for key in group[1]))
