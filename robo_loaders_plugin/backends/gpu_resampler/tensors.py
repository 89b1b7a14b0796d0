"""Every episode's fields as one tensor per field (episodes end to end), where the batches are needed.

Why: a window is a handful of rows of a few large arrays, so with the arrays resident as tensors a whole batch of
windows is one ``index_select`` per field, on the training GPU when the data fits its memory budget, otherwise in
host memory (pinned when the training device is CUDA, so each gathered batch is uploaded with one non-blocking
copy). No per-sample Python, no worker processes, no decompression.
"""

from __future__ import annotations

import functools
import operator
import warnings
from typing import Any

import numpy as np
import torch

from robo_loaders_plugin.core.errors import BackendOptionError, SourceError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import (
    FieldInfo,
    FrameSource,
    JoinedField,
    broadcast_episodes,
    grouped,
    part_offsets,
    step_slots,
)

logger = get_logger(__name__)

# a camera step at most this big is gathered into a batch of its own, then scattered into the joined batch in one copy
# (JoinedHostRows.take: one numpy call where a copy per row is a Python step a row); a bigger one is copied row by
# row in place, so that the batch's bytes are not copied twice
SMALL_STEP_BYTES = 64 << 10
DEFAULT_VRAM_FRACTION = 0.5  # of the free memory of the training GPU, when max_device_memory is not given

# how many times host arrays of a TensorFrames were replaced in this process (share_host, close): a reader keeping
# their spans across batches (JoinedHostRows) takes them again when it changed, never a replaced array's view
_HOST_MOVES = [0]


class EpisodeFieldMismatch(SourceError):
    """An episode holds a field another way than the first episode (dtype or step shape), or with another number of
    steps than its metadata says: what one array per field cannot hold.

    Why a class: the tiers know an episode only by its position; :meth:`named` says it again with the source and the
    episodes' names, as ``tiers_at_start.kept_or_filled`` knows them (a bare ``episode 2`` named the third demo of a
    filter key's selection, not ``demo_2``).

    Args:
        ep: The episode's position.
        field: The field's name.
        got: What the episode holds (``float32(3,)``; for ``steps``, its number of steps).
        expected: What the first episode holds (for ``steps``, the steps its metadata says).
        steps: Whether the number of steps differs (else the dtype or step shape).
    """

    def __init__(self, ep: int, field: str, got: str, expected: str, steps: bool = False):
        self.ep, self.field, self.got, self.expected, self.steps = ep, field, got, expected, steps
        super().__init__(f"episode {ep}: field {field!r} is {got}, expected {expected}")

    def named(self, where: str, names) -> SourceError:
        """The same refusal naming the source and the episodes.

        Args:
            where: The source, as the message starts.
            names: Each episode's name, by position.

        Returns:
            The ``SourceError`` to raise.
        """
        this = f"{names[self.ep]}/{self.field}"
        if self.steps:
            return SourceError(
                f"{where}: {this} has {self.got} steps, its metadata says {self.expected}; the file disagrees with "
                "itself: write it again"
            )
        return SourceError(
            f"{where}: {this} is {self.got}, {names[0]}/{self.field} is {self.expected}; every episode must hold a "
            "field the same way"
        )


def check_episode_field(ep: int, field: str, a: np.ndarray, steps: int, info: FieldInfo) -> None:
    """Refuse an episode's field that does not fit the tiers' array of that field.

    Args:
        ep: The episode's position.
        field: The field's name.
        a: Its steps.
        steps: The steps its metadata says.
        info: The field as the first episode holds it.

    Raises:
        EpisodeFieldMismatch: another dtype or step shape, or another number of steps.
    """
    if a.shape[1:] != tuple(info.shape) or a.dtype != info.dtype:
        raise EpisodeFieldMismatch(ep, field, f"{a.dtype}{a.shape[1:]}", f"{np.dtype(info.dtype)}{tuple(info.shape)}")
    if len(a) != steps:
        raise EpisodeFieldMismatch(ep, field, str(len(a)), str(steps), steps=True)


def host_moves() -> int:
    """How many times a ``TensorFrames``' host arrays were replaced in this process (:func:`host_moved`).

    Returns:
        The count.
    """
    return _HOST_MOVES[0]


def host_moved() -> None:
    """Say that a ``TensorFrames``' host arrays were replaced (moved to shared memory, or released): spans kept
    by readers (:class:`JoinedHostRows`) are taken again at their next read. Called after the replacement."""
    _HOST_MOVES[0] += 1


def _torch_dtype(dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def training_device(option: str, where: str, prefer_cuda: bool = True) -> torch.device:
    """The device batches are built on, from the ``device`` option: ``auto``: the CUDA device this process trains on
    (``LOCAL_RANK`` under torchrun/accelerate, else the current device) when there is one and the framework trains
    on CUDA (``prefer_cuda``), else the CPU; ``cpu``; ``cuda`` / ``cuda:N``, refused with a clear error without a
    GPU.

    Args:
        option: The ``device`` option's value.
        where: How the user sets options (``train.data_backend_kwargs``, ...), for messages.
        prefer_cuda: Whether the framework trains on CUDA when it can (``auto`` picks the CPU otherwise).

    Returns:
        The ``torch.device``.

    Raises:
        BackendOptionError: the value is not a CPU or CUDA device, or names CUDA and torch sees no GPU.
    """
    import os

    if option == "auto":
        if prefer_cuda and torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))
        return torch.device("cpu")
    try:
        device = torch.device(option)
    except RuntimeError:
        raise BackendOptionError(f"{where}.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {option!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendOptionError(
            f"{where}.device={option!r} but torch sees no CUDA GPU (torch.cuda.is_available() "
            "is False); use device 'auto' (the CPU here) or 'cpu'"
        )
    if device.type not in ("cpu", "cuda"):
        raise BackendOptionError(f"{where}.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {option!r}")
    return device


def host_gather(src: torch.Tensor, rows: np.ndarray, out: torch.Tensor, checked: bool = False) -> torch.Tensor:
    """Rows ``rows`` of a host tensor written into the host tensor ``out``, by numpy's ``take``: one thread, the GIL
    released while it copies.

    Why not ``torch.index_select``: batches are built by several threads at once (one per ``num_workers``), and
    torch splits each gather over its intra-op thread pool as well, so on a machine with as many cores as batch
    threads the two pools contend: a gather of R240-shaped rows (16 windows of 10 frames of 2 cameras 240x240) took
    5-27 ms with torch's two threads, 3-6 ms by numpy's take on one (docs/scale.md).

    Args:
        src: The held tensor (on the CPU).
        rows: Row indices (1-D, int64).
        out: A C-contiguous CPU tensor of ``(len(rows),) + src.shape[1:]`` and ``src``'s dtype.
        checked: The caller has checked that every row lies in ``src`` (once for several fields' gathers).

    Returns:
        ``out``.

    Raises:
        IndexError: a row outside ``src``.
    """
    take_rows(src.numpy(), rows, out.numpy(), checked)
    return out


def take_rows(src: np.ndarray, rows: np.ndarray, out: np.ndarray, checked: bool = False) -> np.ndarray:
    """:func:`host_gather` on numpy arrays (the held tensors' numpy views): a small field's gather is a few
    microseconds of copying, and the tensor round trips (``.numpy()``, ``reshape``) cost as much again.

    Args:
        src: The held array.
        rows: Row indices (1-D, int64).
        out: A C-contiguous array of ``(len(rows),) + src.shape[1:]`` and ``src``'s dtype.
        checked: The caller has checked that every row lies in ``src``.

    Returns:
        ``out``.

    Raises:
        IndexError: a row outside ``src``.
    """
    if not checked and rows.size and (int(rows.min()) < 0 or int(rows.max()) >= src.shape[0]):
        raise IndexError(f"rows {int(rows.min())}..{int(rows.max())} outside the {src.shape[0]} rows held")
    # mode="clip" (the rows are checked above): numpy buffers the whole output of mode="raise" to undo a partial
    # write, a second copy of every batch (2-4x slower on R240-shaped batches)
    np.take(src, rows, axis=0, out=out, mode="clip")
    return out


def in_shared_memory(t: torch.Tensor) -> torch.Tensor:
    """``t`` in shared memory, for a spawned DataLoader worker to map rather than copy: ``t`` itself when it is
    there already or on a GPU (torch sends a CUDA tensor by handle), else a copy there; ``t`` is left as it is.

    Args:
        t: A held tensor.

    Returns:
        ``t``, or its copy in shared memory.
    """
    if t.device.type != "cpu" or t.is_shared():
        return t
    return t.clone().share_memory_()


class TensorFrames(FrameSource):
    """``fill(ep, arrays)`` every episode once; then ``gather`` returns tensors on ``output_device``.

    Pickled for a spawned DataLoader worker (``lerobot-train``'s evaluation loader), its host tensors go through
    shared memory (:meth:`__getstate__`).
    """

    def __init__(
        self,
        lengths,
        infos: dict[str, FieldInfo],
        storage: torch.device,
        output_device: torch.device,
        pinned: bool = False,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.infos = dict(infos)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.storage, self.output_device, self.pinned = storage, output_device, pinned
        total = self.total_rows = int(self.lengths.sum())
        self.tensors = {
            k: torch.empty((total,) + tuple(v.shape), dtype=_torch_dtype(v.dtype), device=storage, pin_memory=pinned)
            for k, v in self.infos.items()
        }
        self.filled = np.zeros(len(self.lengths), dtype=bool)

    @staticmethod
    def nbytes(lengths, infos: dict[str, FieldInfo]) -> int:
        """Bytes the tensors will take, before any is allocated.

        Args:
            lengths: Steps per episode.
            infos: Every field's dtype and step shape.

        Returns:
            Bytes of every field over every step.
        """
        total = int(np.sum(lengths))
        return sum(total * int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize for v in infos.values())

    def fill(self, ep: int, arrays: dict) -> None:
        """Copy one episode's fields into its rows of the tensors (once per episode, before any gather).

        Args:
            ep: The episode's index.
            arrays: ``{field: array of the episode's steps}`` for every held field.

        Raises:
            EpisodeFieldMismatch: a field's shape or dtype is not the one declared.
            KeyError: a held field is missing from ``arrays``.
        """
        s, n = int(self.starts[ep]), int(self.lengths[ep])
        for k, t in self.tensors.items():
            a = np.ascontiguousarray(arrays[k])
            check_episode_field(ep, k, a, n, self.infos[k])
            with warnings.catch_warnings():  # read-only source arrays (a mapped file) are only read here
                warnings.simplefilter("ignore", UserWarning)
                t[s : s + n].copy_(torch.from_numpy(a))
        self.filled[ep] = True

    def info(self, field: str) -> FieldInfo:
        """A held field's dtype and step shape (:meth:`FrameSource.info`).

        Args:
            field: The field's name.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            KeyError: the field is not held (the message lists those that are).
        """
        try:
            return self.infos[field]
        except KeyError:
            raise KeyError(f"field {field!r} is not held (held: {sorted(self.infos)})") from None

    def _rows(self, episodes: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The held rows of (episode, step) pairs, flattened: episodes lie end to end in every tensor."""
        return (self.starts[broadcast_episodes(episodes, steps)] + steps).reshape(-1)

    def gather(self, field, episodes, steps, pool=None) -> torch.Tensor:
        """``field`` at (episode, step) pairs in one gather (:meth:`FrameSource.gather`; :func:`host_gather` on the
        CPU, ``index_select`` on the GPU); from pinned host
        memory, gathered into pinned memory and uploaded to ``output_device`` with one non-blocking copy.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode.
            pool: On the CPU (not pinned), the batch array is taken from it (recycled: no page faults) instead of
                allocated; ``None``: always allocated.

        Returns:
            A tensor of ``steps.shape + step shape``, where the tensors live (or on ``output_device`` when pinned).

        Raises:
            KeyError: the field is not held.
            IndexError: a pair outside the held rows.
        """
        return self.gather_fields((field,), episodes, steps, pool)[field]

    def gather_fields(self, fields, episodes, steps, pool=None) -> dict:
        """Several fields at the same pairs (:meth:`FrameSource.gather_fields`): the held rows are found, and
        checked, once for all of them; each field then as :meth:`gather` reads it.

        Args:
            fields: The fields' names.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices within each row's episode.
            pool: As for :meth:`gather`.

        Returns:
            ``{field: tensor}`` in the order of ``fields``.

        Raises:
            KeyError: a field is not held.
            IndexError: a pair outside the held rows.
        """
        steps = np.asarray(steps)
        rows = self._rows(np.asarray(episodes), steps)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= self.total_rows):
            raise IndexError(f"rows {int(rows.min())}..{int(rows.max())} outside the {self.total_rows} rows held")
        return {f: self._gather_rows(f, rows, tuple(steps.shape), pool) for f in fields}

    def _gather_rows(self, field, rows: np.ndarray, steps_shape: tuple, pool) -> torch.Tensor:
        """``field`` at held rows ``rows`` (flat, already checked), shaped ``steps_shape + step shape``."""
        if field not in self.tensors:
            self.info(field)  # raises the KeyError naming the fields held
        t = self.tensors[field]
        if t.device.type != "cpu":
            idx = torch.from_numpy(rows).to(t.device, non_blocking=True)
            return torch.index_select(t, 0, idx).reshape(steps_shape + tuple(t.shape[1:]))
        shape = (rows.size,) + tuple(t.shape[1:])
        if self.pinned:  # gathered into pinned memory, then one non-blocking upload
            out = host_gather(t, rows, torch.empty(shape, dtype=t.dtype, pin_memory=True), checked=True)
            return out.to(self.output_device, non_blocking=True).reshape(steps_shape + tuple(t.shape[1:]))
        dtype = self.infos[field].dtype
        arr = pool.empty(shape, dtype) if pool is not None else np.empty(shape, dtype=dtype)
        take_rows(self._host_arrays[field], rows, arr, checked=True)
        return torch.from_numpy(arr.reshape(steps_shape + arr.shape[1:]))

    @classmethod
    def join_field(cls, parts) -> JoinedHostRows | None:
        """See :meth:`FrameSource.join_field`: on the CPU, every part's held host rows copied straight into the
        batch (:class:`JoinedHostRows`).

        Args:
            parts: ``(source, field)`` pairs, every source a ``TensorFrames``.

        Returns:
            The joined reader, or ``None`` when a source serves batches on a GPU or the sources hold the field in
            different dtypes or step shapes.
        """
        infos = [source.info(field) for source, field in parts]
        if not parts or any(source.output_device.type != "cpu" for source, _ in parts):
            return None
        if len({(np.dtype(i.dtype), tuple(i.shape)) for i in infos}) != 1:
            return None
        return JoinedHostRows(parts, infos[0])

    def _host_span(self, field: str) -> tuple[np.ndarray, int, int] | None:
        """``(array, first, end)``: the host array holding held rows ``first..end-1`` of ``field`` (its element 0 is
        row ``first``), or ``None`` when no host array holds it (:class:`JoinedHostRows`)."""
        arrays = self._host_arrays
        return (arrays[field], 0, self.total_rows) if field in arrays else None

    @functools.cached_property
    def _host_arrays(self) -> dict:
        """The numpy views of the tensors in host memory (they share their memory: filled in place)."""
        return {k: t.numpy() for k, t in self.tensors.items() if t.device.type == "cpu"}

    def __getstate__(self):
        """The state a spawned worker gets: the host tensors in shared memory (:meth:`share_host`), the numpy views
        left out (made again where they are next used).

        Why: torch's pickler for workers moves a host tensor's storage into shared memory in place and frees the old
        one, under the numpy views this process gathers through (``_host_arrays``): the worker got the views' bytes
        (garbage, after the move) and this process read freed memory next.
        """
        self.share_host()
        state = dict(self.__dict__)
        state.pop("_host_arrays", None)
        return state

    def share_host(self) -> None:
        """Hold the host tensors in shared memory from now on (a copy each, once: :func:`in_shared_memory`), so that
        pickling them for a worker moves nothing. A thread gathering meanwhile keeps the view it took, and with it
        the tensor it viewed; the views are made again at the next gather."""
        self.tensors = {k: in_shared_memory(t) for k, t in self.tensors.items()}
        self.__dict__.pop("_host_arrays", None)
        host_moved()

    def take(self, field, episodes, steps, out):
        """:meth:`gather` copied into a numpy array (:meth:`FrameSource.take`).

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            out: A numpy array of ``steps.shape + step shape``, written in place.
        """
        out[...] = self.gather(field, episodes, steps).cpu().numpy()


class JoinedHostRows(JoinedField):
    """One field of several ``TensorFrames`` on the CPU as one (:meth:`TensorFrames.join_field`): a batch's rows of
    every part located and checked with a few numpy calls over the whole batch, then each row taken as a view of its
    part's host array and the views copied into the batch by one concatenate, where a read per part located and
    checked its rows on its own (``benchmarks/mixture_batch_cost.py``). A row not all in its part's host array (a
    compressed tier) is read by its part's own ``gather_fields`` and copied in.

    Args:
        parts: ``(source, field)`` pairs, every source a ``TensorFrames`` on the CPU.
        info: The field's dtype and step shape (one for all parts).
    """

    def __init__(self, parts, info: FieldInfo):
        self.sources = [source for source, _ in parts]
        self.fields = [field for _, field in parts]
        self.step_shape = tuple(info.shape)
        self.first_row = np.concatenate([source.starts for source in self.sources]).astype(np.int64)
        self.episode_base = part_offsets([len(s.starts) for s in self.sources])
        self.total_rows = np.array([source.total_rows for source in self.sources], dtype=np.int64)
        self._spans: tuple | None = None  # (host_moves(), arrays, firsts, ends) of every part (_host_spans)

    def _host_spans(self) -> tuple:
        """Every part's host span (``TensorFrames._host_span``) as ``(host_moves(), arrays, firsts, ends)``, kept
        until a source's host arrays are replaced (:func:`host_moved`); a part without one has ``None`` and an empty
        range.

        Why kept: asking each part of a batch for its span at every read was a third of a pretraining mixture's
        joined read (~2 us a part, ~25 parts a batch per camera); the spans change only when a source's host memory
        is moved (``share_host``) or released (``close``)."""
        kept = self._spans
        moves = host_moves()  # read before the spans: a move while they are taken makes the next read take them again
        if kept is None or kept[0] != moves:
            spans = [source._host_span(field) for source, field in zip(self.sources, self.fields)]
            arrays = [s[0] if s is not None else None for s in spans]
            firsts = np.array([s[1] if s is not None else 0 for s in spans], dtype=np.int64)
            ends = np.array([s[2] if s is not None else 0 for s in spans], dtype=np.int64)
            kept = self._spans = (moves, arrays, firsts, ends)
        return kept

    def __getstate__(self):  # the kept spans are this process's views: taken again where it is used
        state = dict(self.__dict__)
        state["_spans"] = None
        return state

    def take(self, parts, episodes, steps, rows, out) -> None:
        """See :meth:`JoinedField.take`.

        Args:
            parts: (B,) each row's part.
            episodes: (B,) each row's episode in its part's source.
            steps: (B,) or (B, T) step indices.
            rows: (B,) the rows of ``out`` to write.
            out: The destination (numpy).

        Raises:
            IndexError: a pair outside its part's held rows.
        """
        steps = np.asarray(steps)
        if not len(parts):
            return
        T = steps.shape[-1] if steps.ndim > 1 else 1
        held = self.first_row[self.episode_base[parts] + episodes][:, None] + steps.reshape(len(parts), T)
        outside = (held < 0) | (held >= self.total_rows[parts][:, None])
        if outside.any():
            b = int(np.flatnonzero(outside.any(axis=1))[0])
            raise IndexError(
                f"{self.fields[parts[b]]}: rows {int(held[b].min())}..{int(held[b].max())} outside the "
                f"{int(self.total_rows[parts[b]])} rows held"
            )
        rows = np.asarray(rows, dtype=np.int64)
        # where each part's host array holds its rows: kept while no source's host memory moved (_host_spans)
        _, part_arrays, firsts, ends = self._host_spans()
        lo = firsts[parts][:, None]
        direct = ((held >= lo) & (held < ends[parts][:, None])).all(axis=1)  # every step of the row in a host array
        local = held - lo
        flat = out.reshape((-1,) + self.step_shape)
        # each row's steps as a view of its part's host array where they follow one another (a window inside its
        # episode; a single step always), else by a fancy index; the views copied into the batch by one
        # concatenate. Why not a copy per part: rows of a batch drawn from hundreds of components come from as
        # many parts, and grouping, locating and copying each part's rows cost ~5 us a part
        first = local[:, 0]
        arrays: list[Any] = list(map(part_arrays.__getitem__, parts.tolist()))
        every = bool(direct.all())
        views: list[Any]
        if T == 1 and every:
            views = list(map(operator.getitem, arrays, map(slice, first.tolist(), (first + 1).tolist())))
        else:  # a view only of a row held in its part's host array (a slice past an array's end is short, not an error)
            run = (np.diff(local, axis=1) == 1).all(axis=1)
            views = [
                (a[f : f + T] if r else a[local[b]]) if d else None
                for b, (a, f, r, d) in enumerate(zip(arrays, first.tolist(), run.tolist(), direct.tolist()))
            ]
        if every:
            B = len(rows)
            if int(rows[-1]) - int(rows[0]) == B - 1 and bool((np.diff(rows) == 1).all()):
                np.concatenate(views, out=flat[int(rows[0]) * T : (int(rows[-1]) + 1) * T])  # in place, one copy
            elif flat[:1].nbytes <= SMALL_STEP_BYTES:  # small frames: joined first, then one scatter
                flat[step_slots(rows, T)] = np.concatenate(views)
            else:  # large frames: each row copied in place (no second copy of the batch)
                for r, view in zip(rows.tolist(), views):
                    flat[r * T : (r + 1) * T] = view
            return
        for r, view in zip(rows.tolist(), views):
            if view is not None:
                flat[r * T : (r + 1) * T] = view
        left = np.flatnonzero(~direct)  # rows with a step in another tier: their source's own read, per part
        order, groups = grouped(parts[left])
        for p, a, z in groups:
            sel = left[order[a:z]]
            value = self.sources[p].gather_fields((self.fields[p],), episodes[sel], steps[sel])[self.fields[p]]
            flat[step_slots(rows[sel], T)] = np.asarray(value).reshape((-1,) + self.step_shape)
