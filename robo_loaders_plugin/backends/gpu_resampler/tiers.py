"""``gpu_resampler``'s tiers: episodes on the GPU while they fit, then in host memory raw, then with camera frames
compressed (in RAM, then in a file on disk), served by one gather per field whatever tier holds them.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import IO

import numpy as np
import torch

from robo_loaders_plugin.backends.gpu_resampler.tensors import (
    DEFAULT_VRAM_FRACTION,
    TensorFrames,
    _torch_dtype,
    check_episode_field,
    host_gather,
    host_moved,
    in_shared_memory,
    take_rows,
)
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.frames.base import FieldInfo, part_offsets

logger = get_logger(__name__)


class CompressedRows:
    """Camera frames of a run of rows kept compressed, one Blosc2 blob per frame (the last ``gpu_resampler``
    tier): in host memory, or, when even compressed they exceed the memory budget, in a file on local disk
    (``spill_dir``; unlinked at once, so nothing is left behind; the page cache keeps the hot part). Episodes are
    appended in row order; a row is found by (buffer, offsets).

    From the file, a batch's blobs are read whole, in the file's order, adjacent ones together, all of them announced
    to the kernel first, into a buffer of the thread asking, then decoded into their places in the batch (the
    sampler's order kept; ``spill_reads``): read frame by frame through a mapping in the sampler's order they came
    at a fraction of the disk's rate (docs/scale.md).

    Each blob's checksum (``storage.integrity.checksum``) is kept beside it, and a frame read from the file on disk is
    checked (the bytes read, after their decode): a file changed or cut short while the run reads it (a failing
    disk, a process writing to it through ``/proc``) is a ``StoreError`` naming the directory, the episode, the
    field and the frame, never wrong pixels, Blosc2's anonymous ``Cannot decompress`` or a crash. Blobs in host
    memory are not checked: no other process can write this process's memory.

    Args:
        first_row: The global row of the first frame held.
        frame_shape: One frame's shape.
        dtype: The frames' dtype.
        codec: The ``storage.codec.FrameCodec`` compressing them.
        spill_dir: Keep the blobs in a file there from the start (``None``: in memory until :meth:`to_disk`).
        guard: A ``core.footprint.DiskGuard`` checked before every append on disk (``None``: no check).
        field: The field held, for messages.
        locate: Names a global row for messages (``"demo_3 step 12"``; ``None``: the row number).
    """

    def __init__(
        self,
        first_row: int,
        frame_shape: tuple,
        dtype,
        codec,
        spill_dir: str | None = None,
        guard=None,
        field: str = "frames",
        locate=None,
    ):
        import threading

        self.first_row, self.frame_shape, self.dtype, self.codec = int(first_row), tuple(frame_shape), dtype, codec
        self.buffers: list[np.ndarray] = []  # in memory: one uint8 array per episode, its frames' blobs end to end
        self.buf_of_row: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []  # each episode's blobs' checksums (uint64)
        self.nbytes = 0
        self.field, self.locate = field, locate
        self.spill_dir: str | None = None
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._file: IO[bytes] | None = None
        self._map: np.ndarray | None = None
        self.guard = guard
        self._lock = threading.Lock()
        self._local = threading.local()  # each batch-building thread's read buffer
        self.prefetch: bool | None = None  # announce a batch's reads first (None: spill_reads.PREFETCH)
        self.file_name: str | None = None  # the file read, when it is a cache entry's (not an unlinked one)
        if spill_dir is not None:
            import os
            import tempfile

            os.makedirs(spill_dir, exist_ok=True)
            self._file = tempfile.TemporaryFile(  # noqa: SIM115 - lives as long as the frames it holds
                dir=spill_dir, prefix="gpu_resampler-compressed-"
            )
            self.spill_dir = spill_dir

    def __getstate__(self):
        """The state a spawned DataLoader worker gets: the blobs in host memory as they are (compressed), the spill
        file as a duplicate of its descriptor (it is unlinked: there is no path to reopen; the worker reads the same
        file); the lock, the threads' read buffers, the mapping and the index are made again in the worker, which
        never appends (no disk guard)."""
        from multiprocessing.reduction import DupFd

        state = {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_local", "_map", "_index")}
        state["guard"] = None
        if self._file is not None:
            self._file.flush()  # what the worker reads is written
            state["_file"] = DupFd(self._file.fileno())
        return state

    def __setstate__(self, state):
        import os
        import threading

        file = state.pop("_file")
        self.__dict__.update(state)
        self._index, self._map = None, None
        self._lock, self._local = threading.Lock(), threading.local()
        # the parent's read-write descriptor, opened as the parent opened it; nothing here writes (no appends)
        mode = "rb" if self.file_name is not None else "r+b"  # an entry's file is only read
        self._file = None if file is None else os.fdopen(file.detach(), mode)

    @classmethod
    def from_entry(
        cls, entry, field: str, first_row: int, info: FieldInfo, codec, in_memory: bool, locate=None
    ) -> CompressedRows:
        """A field's compressed frames of a checked cache entry (``stored_tiers``): loaded into host memory
        (``in_memory``; the entry's check hashed every frame), or read from the entry's file per batch, every frame
        checked when read, as a spilled tier's.

        Args:
            entry: The entry, opened (``stored_tiers.OpenedTiers``): its index and the blobs' open file are read,
                never the directory again.
            field: The camera field.
            first_row: The first compressed row (global).
            info: The field's ``FieldInfo``.
            codec: The ``storage.codec.FrameCodec`` the entry was written with.
            in_memory: Load the blobs into host memory rather than read them from the file.
            locate: Names a global row for messages.

        Returns:
            The :class:`CompressedRows` holding every compressed row of ``field``.

        Raises:
            StoreError: the index holds another number of rows than the entry's compressed rows of the field, or
                the blobs' file another size than its offsets say.
        """
        from robo_loaders_plugin.storage.integrity import StoreError

        offsets, sums = entry.index[field]
        blobs, file = entry.take_blobs(field)
        comp = cls(first_row, info.shape, info.dtype, codec, field=field, locate=locate)
        total = int(np.sum(entry.manifest["lengths"], dtype=np.int64))
        if (
            len(offsets) != len(sums) + 1
            or len(entry.raw[field]) != first_row
            or first_row + len(sums) != total
            or int(offsets[-1]) != os.fstat(file.fileno()).st_size
        ):
            file.close()
            raise StoreError(
                f"{blobs}: its index of {len(sums)} frames from row {first_row} does not match the entry's raw rows "
                f"({len(entry.raw[field])}) or the file's size; the cache entry is damaged: run again to build it "
                "again"
            )
        comp.sums, comp.starts, comp.nbytes = [sums], [offsets], int(offsets[-1])
        comp.buf_of_row = [np.zeros(len(sums), dtype=np.int64)]
        if in_memory:
            with file:
                comp.buffers = [np.fromfile(file, dtype=np.uint8)]
        else:
            comp._file = file  # lives as long as the tier (close)
            comp.spill_dir, comp.file_name = entry.directory, blobs
        return comp

    @property
    def on_disk(self) -> bool:
        """Whether the blobs are in a file on disk (``spill_dir``, or after :meth:`to_disk`), not in memory."""
        return self._file is not None

    def to_disk(self, spill_dir: str, guard=None) -> None:
        """Move the blobs held in memory into a file in ``spill_dir`` (the same rows, the same bytes) and keep
        appending there: the frames compress worse than planned and host memory would exceed its budget. Does
        nothing when they are on disk already.

        Args:
            spill_dir: The directory of the (unlinked) file; created when missing.
            guard: A ``core.footprint.DiskGuard`` checked before the move and before every later append (``None``:
                no check).

        Raises:
            ResourceRefused: the guard's disk would fall below its reserve.
        """
        import os
        import tempfile

        if self._file is not None:
            return
        os.makedirs(spill_dir, exist_ok=True)
        if guard is not None:
            guard.check(self.nbytes)
        self._file = tempfile.TemporaryFile(  # noqa: SIM115 - lives as long as the frames it holds
            dir=spill_dir, prefix="gpu_resampler-compressed-"
        )
        self.spill_dir = spill_dir
        self.guard = guard
        pos = 0
        for i, buf in enumerate(self.buffers):
            self._file.write(buf.tobytes())
            self.starts[i] = self.starts[i] + pos
            self.buf_of_row[i] = np.zeros_like(self.buf_of_row[i])
            pos += len(buf)
        self.buffers = []
        self._index = self._map = None

    def append(self, frames: np.ndarray) -> int:
        """Compress an episode's frames, one blob per frame, after the rows appended before (episodes must be
        appended in row order).

        Args:
            frames: The episode's frames, ``(steps,) + frame shape``.

        Returns:
            Their compressed bytes.

        Raises:
            ResourceRefused: on disk, the guard's disk would fall below its reserve.
        """
        from robo_loaders_plugin.storage.integrity import checksum

        blobs = [self.codec.compress(f) for f in frames]
        offsets = part_offsets([len(b) for b in blobs])
        self.sums.append(np.fromiter(map(checksum, blobs), dtype=np.uint64, count=len(blobs)))
        if self._file is not None:
            if self.guard is not None:
                self.guard.check(int(offsets[-1]), self.nbytes)
            self._file.write(b"".join(blobs))
            self.buf_of_row.append(np.zeros(len(blobs), dtype=np.int64))
            self.starts.append(offsets + self.nbytes)
            self._map = None
        else:
            self.buffers.append(np.frombuffer(b"".join(blobs), dtype=np.uint8))
            self.buf_of_row.append(np.full(len(blobs), len(self.buffers) - 1, dtype=np.int64))
            self.starts.append(offsets)
        self.nbytes += int(offsets[-1])
        self._index = None
        return int(offsets[-1])

    def _indexed(self):
        """Every row's (buffer, begin, end, checksum), built once after the last append (which is flushed to the
        spill file first, so that what the index names can be read)."""
        with self._lock:
            if self._index is None:
                bufs = np.concatenate(self.buf_of_row) if self.buf_of_row else np.zeros(0, np.int64)
                begin = np.concatenate([o[:-1] for o in self.starts]) if self.starts else np.zeros(0, np.int64)
                end = np.concatenate([o[1:] for o in self.starts]) if self.starts else np.zeros(0, np.int64)
                sums = np.concatenate(self.sums) if self.sums else np.zeros(0, np.uint64)
                if self._file is not None:
                    self._file.flush()
                self._index = (bufs, begin, end, sums)
            return self._index

    def _rows(self):
        """The index and the buffers its rows are in: the blobs in memory, or the spill file mapped."""
        index = self._indexed()
        with self._lock:
            if self._file is not None and self._map is None:
                import mmap

                self._map = np.frombuffer(mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
            return index, ([self._map] if self._file is not None else self.buffers)

    def close(self) -> None:
        """Drop the compressed rows and close the spill file now (it is unlinked already: its space returns)."""
        with self._lock:
            self.buffers, self.buf_of_row, self.starts, self.sums = [], [], [], []
            self._index, self._map = None, None
            self._local = type(self._local)()  # the read buffers go too (the threads may outlive the tier)
            if self._file is not None:
                self._file.close()
                self._file = None

    def decode_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Decompress the frame of global row ``rows[j]`` into ``out[j]``, for every ``j`` (thread-safe: the
        threads building batches call it at once).

        Args:
            rows: The dataset's rows (global, from ``first_row`` on), appended already.
            out: A numpy array of ``(len(rows),) + frame shape``, C-contiguous per frame, written in place.

        Raises:
            StoreError: on disk, a frame does not match its checksum or cannot be decompressed (the file changed
                after it was written).
        """
        from robo_loaders_plugin.storage.codec import FrameCodec

        local = np.asarray(rows, dtype=np.int64) - self.first_row
        if self._file is not None:  # the spill file: read in its order, every frame checked
            from robo_loaders_plugin.backends.gpu_resampler.spill_reads import decode_spilled

            _, begin, end, sums = self._indexed()
            decode_spilled(
                self._file.fileno(),
                np.asarray(rows),
                begin[local],
                end[local],
                sums[local],
                out,
                buffer=self._buffer,
                damaged=self._damaged,
                reader=self._pread,
                prefetch=self.prefetch,
            )
            return
        (bufs, begin, end, _), buffers = self._rows()  # host memory: this process's own
        decompress = FrameCodec.decoder_into(out)
        for j, (b, s, e) in enumerate(zip(bufs[local].tolist(), begin[local].tolist(), end[local].tolist())):
            decompress(buffers[b][s:e], out[j])

    def _pread(self, fd: int, buf: memoryview, offset: int) -> int:
        """``spill_reads.pread``; a method so that a test can record the reads."""
        from robo_loaders_plugin.backends.gpu_resampler.spill_reads import pread

        return pread(fd, buf, offset)

    def _buffer(self, n: int) -> np.ndarray:
        """The calling thread's read buffer, at least ``n`` bytes (kept: no page faults on every batch)."""
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < n:
            buf = self._local.buf = np.empty(n, dtype=np.uint8)
        return buf

    def _damaged(self, row: int, undecodable=None, detail: str = ""):
        """The error for a frame read from disk: damaged (its checksum fails), or refused by Blosc2 though its
        checksum holds (``undecodable``: Blosc2's exception)."""
        from robo_loaders_plugin.storage.integrity import StoreError

        held = f"the cache's file {self.file_name}" if self.file_name else f"an unlinked file in {self.spill_dir}"
        where = f"gpu_resampler's compressed tier on disk ({held}): {self.field} of " + (
            self.locate(row) if self.locate is not None else f"row {row}"
        )
        anew = "restart the run, which writes the tier anew"
        if self.file_name:  # a cache entry's: marked for rebuilding (its manifest goes), so a restart builds it
            from robo_loaders_plugin.backends.gpu_resampler.stored_tiers import discard

            discard(os.path.dirname(os.path.dirname(self.file_name)))
            anew = "restart the run, which builds the entry again (it is marked for it)"
        if undecodable is not None:
            return StoreError(
                f"{where} cannot be decompressed though its checksum holds (Blosc2: {undecodable}); {anew}"
            )
        return StoreError(
            f"{where} is damaged (checksum mismatch on read{detail}): the file changed after it was "
            f"written, damaged on disk or written by another process; {anew}"
        )


class TieredFrames(TensorFrames):
    """Every episode's fields held in tiers (``footprint.TierPlan``): camera frames of episodes ``[0, device)``
    on the training GPU, ``[device, raw)`` in host memory uncompressed (pinned when the GPU trains), ``[raw, N)``
    compressed in host memory; the other fields whole in the first tier. A gather reads each row from its tier
    and keeps the native order: rows in host memory are gathered into a (pinned) staging buffer and uploaded with
    one copy, compressed rows are decompressed into it (by the threads building batches, ahead of training).

    Args:
        lengths: Steps per episode, in row order.
        infos: Every field's dtype and step shape (``frames``: camera frames, the tiered ones).
        plan: The tier plan (episode boundaries).
        output_device: Where batches are wanted (a CUDA device enables the device tier).
        codec: The compressed tier's ``storage.codec.FrameCodec``.
        host_limit: Host bytes the compressed tier may not push the total beyond (checked while filling:
            frames that compress worse than the plan assumed stop with both sizes).
        spill_dir: Keep the compressed tier in a file there (on local disk, mapped) instead of in host memory:
            the plan's last resort when even compressed the frames exceed the memory budget.
        overflow_dir: Where the compressed tier moves when, while filling, it outgrows ``host_limit`` (frames
            that compress worse than the plan assumed); ``None``: the fill stops with both sizes instead.
        names: Each episode's name, for messages (``None``: ``<unit> <position>``).
        kept: The tiers come from an entry of the cache (``stored_tiers.OpenedTiers``) instead of :meth:`fill`:
            its ``raw`` maps each field to its uncompressed rows (the entry's files, mapped), copied once checked
            (to the GPU or pinned memory when training on CUDA, else to host memory); the compressed rows are the
            entry's (in host memory, or read from its file when ``spill_dir`` is given or they exceed
            ``host_limit``). Use :meth:`from_entry`.
    """

    def __init__(
        self,
        lengths,
        infos: dict[str, FieldInfo],
        plan,
        output_device: torch.device,
        codec=None,
        host_limit: int | None = None,
        spill_dir: str | None = None,
        overflow_dir: str | None = None,
        names=None,
        kept=None,
    ):
        from robo_loaders_plugin.storage.codec import FrameCodec

        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.infos = dict(infos)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.output_device = output_device
        self.plan = plan
        total = self.total_rows = int(self.lengths.sum())
        cuda = output_device.type == "cuda"
        bound = np.concatenate([self.starts, [total]])
        self.dev_rows, self.raw_rows = int(bound[plan.device]), int(bound[plan.raw])
        first = output_device if plan.device and cuda else torch.device("cpu")
        self.storage = first
        self.pinned = cuda and first.type == "cpu"  # the untiered fields: gathered as TensorFrames does
        self.codec = codec or FrameCodec("lz4hc", 5)
        self.host_limit = host_limit
        self.overflow_dir = overflow_dir
        self.names = list(names) if names is not None else None
        self.spilled_while_filling = ""
        self.tensors, self.parts = {}, {}
        mapped = kept.raw if kept is not None else None
        in_memory = spill_dir is None and (kept is None or self._kept_blobs_fit(kept))

        def held(k: str, lo: int, hi: int, shape: tuple, dt, device: torch.device, pin: bool) -> torch.Tensor:
            """Rows ``[lo, hi)`` of field ``k``: allocated for :meth:`fill`, or the entry's mapped rows copied
            (to the GPU, to pinned memory, or to the process's own memory on the CPU).

            Why copied on the CPU too: the entry's raw files are checked once, at the start (whole-file xxh3);
            served where they lie, a file written in place afterwards (another process) was served unchecked,
            every sample after the write differing from the source (a reviewer's reproduction). The plan counts
            these rows in host memory as a fresh build holds them, so the copy takes what a build would. A whole
            file bound for host memory is read into it and checked there (``OpenedTiers.copy_raw``: the bytes
            served are the bytes checked); the GPU tier and its host remainder are copied from the map."""
            out = torch.empty((hi - lo,) + shape, dtype=dt, device=device, pin_memory=pin)
            if mapped is None or hi == lo:
                return out
            if device.type == "cpu" and (lo, hi) == (0, len(mapped[k])) and k in kept.raw_files:
                kept.copy_raw(k, out.numpy())
                return out
            kept.check_raw(k)  # a file whose checksum the start left to its copy, checked whole first
            with warnings.catch_warnings():  # read-only mapped rows: only read (copied)
                warnings.simplefilter("ignore", UserWarning)
                rows = torch.from_numpy(mapped[k][lo:hi])
            return out.copy_(rows)

        for k, v in self.infos.items():
            if kept is not None and mapped is not None and len(mapped[k]) != (self.raw_rows if v.frames else total):
                # a plan of another boundary than the entry's: its raw files lack rows, or its compressed rows
                # start elsewhere; either would serve other rows' bytes
                raise ValueError(
                    f"the cache entry {kept.directory} holds {len(mapped[k])} raw rows of {k!r}, the plan "
                    f"{self.raw_rows if v.frames else total}: map it with its own boundary (stored_tiers.entry_plan)"
                )
            dt = _torch_dtype(v.dtype)
            if not v.frames:
                self.tensors[k] = held(k, 0, total, tuple(v.shape), dt, first, cuda and first.type == "cpu")
                continue
            dev = held(k, 0, self.dev_rows, tuple(v.shape), dt, output_device, False) if self.dev_rows else None
            raw = (
                held(k, self.dev_rows, self.raw_rows, tuple(v.shape), dt, torch.device("cpu"), cuda)
                if self.raw_rows > self.dev_rows
                else None
            )
            comp = None
            if total > self.raw_rows and kept is not None:
                comp = CompressedRows.from_entry(
                    kept, k, self.raw_rows, v, self.codec, in_memory=in_memory, locate=self.locate
                )
            elif total > self.raw_rows:
                guard = None
                if spill_dir is not None:
                    from robo_loaders_plugin.core.footprint import DiskGuard

                    guard = DiskGuard(spill_dir, f"gpu_resampler's compressed frames in {spill_dir}")
                comp = CompressedRows(
                    self.raw_rows, v.shape, v.dtype, self.codec, spill_dir, guard, field=k, locate=self.locate
                )
            self.parts[k] = (dev, raw, comp)
        self.host_bytes = sum(t.numel() * t.element_size() for t in self.tensors.values() if t.device.type == "cpu")
        self.host_bytes += sum(p[1].numel() * p[1].element_size() for p in self.parts.values() if p[1] is not None)
        self.filled = np.full(len(self.lengths), kept is not None, dtype=bool)
        if kept is not None and spill_dir is None and not in_memory:
            blobs = kept.blob_bytes
            why = (
                f"the frames compress worse than planned (~{format_bytes(blobs)}, estimated "
                f"~{format_bytes(plan.compressed_bytes)})"
                if blobs > plan.compressed_bytes
                else f"the compressed frames (~{format_bytes(blobs)})"
            )
            self.spilled_while_filling = (
                f"{why}: beside the raw rows they exceed host memory's budget ({format_bytes(self.host_limit or 0)}),"
                f" so the compressed tier is read per batch from the kept entry's file in {kept.directory}"
            )

    @classmethod
    def from_entry(
        cls, entry, lengths, plan, output_device: torch.device, host_limit=None, spill_dir=None, names=None
    ) -> TieredFrames:
        """The tiers of a checked cache entry (``stored_tiers``), mapped, not filled: its raw rows served from the
        mapped files (on the CPU) or copied where the plan puts them, its compressed rows in host memory or, when
        the plan spills (``spill_dir``) or they exceed ``host_limit``, read from the entry's file per batch.

        Args:
            entry: The entry, opened under its build lock (``stored_tiers.OpenedTiers``).
            lengths: Steps per episode, in row order (the entry's, checked).
            plan: The tier plan the entry was built for (its ``raw`` boundary).
            output_device: Where batches are wanted.
            host_limit: Host bytes the tiers may take.
            spill_dir: The plan's spill directory (``None``: the compressed rows in host memory when they fit).
            names: Each episode's name, for messages.

        Returns:
            The :class:`TieredFrames`, every episode filled.
        """
        return cls(
            lengths,
            entry.infos,
            plan,
            output_device,
            host_limit=host_limit,
            spill_dir=spill_dir,
            names=names,
            kept=entry,
        )

    def _kept_blobs_fit(self, entry) -> bool:
        """Whether an entry's compressed frames fit host memory beside the raw rows within ``host_limit``."""
        if self.host_limit is None:
            return True
        return sum(a.nbytes for a in entry.raw.values()) + entry.blob_bytes <= self.host_limit

    @functools.cached_property
    def _raw_arrays(self) -> dict:
        """The numpy views of the uncompressed host tier (they share its memory: filled in place)."""
        return {k: p[1].numpy() for k, p in self.parts.items() if p[1] is not None}

    def __getstate__(self):
        """As :meth:`TensorFrames.__getstate__`, the uncompressed host tier too (its numpy views left out)."""
        state = super().__getstate__()
        state.pop("_raw_arrays", None)
        return state

    def share_host(self) -> None:
        """:meth:`TensorFrames.share_host`, and the uncompressed host tier's tensors too."""
        super().share_host()
        self.parts = {
            k: (dev, None if raw is None else in_shared_memory(raw), comp) for k, (dev, raw, comp) in self.parts.items()
        }
        self.__dict__.pop("_raw_arrays", None)
        host_moved()

    def locate(self, row: int) -> str:
        """A global row named for messages: its episode and step (``demo_3 step 12``).

        Args:
            row: The row (episodes end to end).

        Returns:
            The words.
        """
        ep = int(np.searchsorted(self.starts, row, side="right")) - 1
        name = self.names[ep] if self.names is not None else f"{self.plan.unit} {ep}"
        return f"{name} step {int(row - self.starts[ep])}"

    def fill(self, ep: int, arrays: dict) -> None:
        """Copy one episode's fields into their tiers: camera frames into the device, host-raw or compressed tier
        its rows belong to, the other fields whole into the first tier. Episodes must be filled in order (the
        compressed tier appends). When the compressed tier outgrows ``host_limit`` it moves to ``overflow_dir``
        (said in the log), or the fill stops.

        Args:
            ep: The episode's index.
            arrays: ``{field: array of the episode's steps}`` for every field.

        Raises:
            EpisodeFieldMismatch: a field's shape or dtype is not the one declared.
            ResourceRefused: the compressed tier outgrew ``host_limit`` without ``overflow_dir``, or a disk it is
                written to would fall below its reserve.
        """
        s, n = int(self.starts[ep]), int(self.lengths[ep])
        for k, info in self.infos.items():
            a = np.ascontiguousarray(arrays[k])
            check_episode_field(ep, k, a, n, info)
            with warnings.catch_warnings():  # read-only source arrays (a mapped file) are only read here
                warnings.simplefilter("ignore", UserWarning)
                if k in self.tensors:
                    self.tensors[k][s : s + n].copy_(torch.from_numpy(a))
                    continue
                dev, raw, comp = self.parts[k]
                if s < self.dev_rows:
                    assert dev is not None  # rows below dev_rows are the GPU tier's (it exists when dev_rows > 0)
                    dev[s : s + n].copy_(torch.from_numpy(a))
                elif s < self.raw_rows:
                    assert raw is not None
                    raw[s - self.dev_rows : s - self.dev_rows + n].copy_(torch.from_numpy(a))
                else:
                    assert comp is not None
                    comp.append(a)
                    self._check_host(ep)
        self.filled[ep] = True

    def close(self) -> None:
        """Release every tier now (GPU memory, pinned host memory, the compressed rows and their spill file)
        rather than at garbage collection."""
        for _, _, comp in self.parts.values():
            if comp is not None:
                comp.close()
        self.tensors, self.parts = {}, {}
        self.__dict__.pop("_raw_arrays", None)  # the mapped rows' views go too
        host_moved()

    @property
    def compressed_bytes(self) -> int:
        """Bytes of the compressed tier so far, every camera field (in memory or on disk)."""
        return sum(p[2].nbytes for p in self.parts.values() if p[2] is not None)

    def _check_host(self, ep: int) -> None:
        """Frames that compress worse than the plan assumed would take host memory beyond its budget: the
        compressed tier moves to a file on local disk (mapped; the same bytes) and the fill goes on there, said in
        the log; without a directory to spill to, the fill stops with both sizes."""
        if self.host_limit is None or any(p[2] is not None and p[2].on_disk for p in self.parts.values()):
            return
        used = self.host_bytes + self.compressed_bytes
        if used <= self.host_limit:
            return
        raw = sum(int(self.lengths[e]) for e in range(self.plan.raw, ep + 1)) * sum(
            int(np.prod(i.shape)) * np.dtype(i.dtype).itemsize for i in self.infos.values() if i.frames
        )
        ratio = raw / max(1, self.compressed_bytes)
        if self.overflow_dir is None:
            from robo_loaders_plugin.core.footprint import ResourceRefused

            raise ResourceRefused(
                f"gpu_resampler: the compressed tier outgrew its budget while filling episode {ep}: host memory "
                f"{format_bytes(used)} > {format_bytes(self.host_limit)} (the frames compress {ratio:.2f}:1, worse "
                f"than the plan's estimate); raise max_memory, or use compressed_cache (it spills to disk)",
                [("host RAM", used, self.host_limit)],
            )
        from robo_loaders_plugin.core.footprint import DiskGuard

        for p in self.parts.values():
            if p[2] is not None:
                p[2].to_disk(
                    self.overflow_dir,
                    DiskGuard(self.overflow_dir, f"gpu_resampler's compressed frames in {self.overflow_dir}"),
                )
        self.spilled_while_filling = (
            f"the frames compress {ratio:.2f}:1, worse than planned: host memory would "
            f"reach {format_bytes(used)} > {format_bytes(self.host_limit)}, so the "
            f"compressed tier moved to a file on local disk in {self.overflow_dir}"
        )
        logger.warning(f"gpu_resampler: spilled while filling episode {ep}: {self.spilled_while_filling}")

    def _host_span(self, field: str):
        """See :meth:`TensorFrames._host_span`: a camera's uncompressed host tier (the entry's mapped rows or the
        filled ones); the untiered fields as :class:`TensorFrames` holds them."""
        if field not in self.parts:
            return super()._host_span(field)
        if self.parts[field][1] is None:
            return None
        return self._raw_arrays[field], self.dev_rows, self.raw_rows

    def _gather_rows(self, field, rows: np.ndarray, steps_shape: tuple, pool) -> torch.Tensor:
        """``field`` at held rows ``rows`` (:meth:`TensorFrames.gather`), each row read from its tier: device rows
        with ``index_select``, host rows gathered (raw) or decompressed (compressed) into a staging buffer (pinned
        when training on CUDA) that is uploaded with one copy, in the order asked. Fields that are not camera
        frames as :class:`TensorFrames` reads them. On the CPU, when every row is in host memory, the batch array
        is taken from ``pool`` (recycled) when one is given.
        """
        if field not in self.parts:
            return super()._gather_rows(field, rows, steps_shape, pool)
        info = self.infos[field]
        dev, raw, comp = self.parts[field]
        g = rows
        shape = (g.size,) + tuple(info.shape)
        cuda = self.output_device.type == "cuda"
        if not cuda and raw is not None and g.size and self.dev_rows <= int(g.min()) <= int(g.max()) < self.raw_rows:
            # every row uncompressed in host memory, the batch on the CPU: one take into the batch array
            arr = pool.empty(shape, info.dtype) if pool is not None else np.empty(shape, dtype=info.dtype)
            take_rows(self._raw_arrays[field], g - self.dev_rows, arr, checked=True)
            return torch.from_numpy(arr.reshape(steps_shape + arr.shape[1:]))
        in_dev = g < self.dev_rows
        host = ~in_dev
        if not host.any():  # every row on the GPU
            assert dev is not None  # a tier exists whenever one of its rows is asked for
            idx = torch.from_numpy(g).to(self.output_device, non_blocking=True)
            out = torch.index_select(dev, 0, idx)
            return out.reshape(steps_shape + tuple(info.shape))
        # host rows into a staging buffer (pinned for the upload; the batch itself on the CPU)
        at = np.flatnonzero(host)
        if pool is not None and not cuda and at.size == g.size:  # the batch array itself, recycled (no page faults)
            staged = torch.from_numpy(pool.empty((at.size,) + tuple(info.shape), info.dtype))
        else:
            staged = torch.empty((at.size,) + tuple(info.shape), dtype=_torch_dtype(info.dtype), pin_memory=cuda)
        rows = g[at]
        in_raw = rows < self.raw_rows
        if in_raw.all():
            assert raw is not None  # a tier exists whenever one of its rows is asked for
            host_gather(raw, rows - self.dev_rows, staged)
        else:
            r = np.flatnonzero(in_raw)
            if r.size:
                assert raw is not None
                part = host_gather(
                    raw, rows[r] - self.dev_rows, torch.empty((r.size,) + tuple(info.shape), dtype=raw.dtype)
                )
                staged[torch.from_numpy(r)] = part
            c = np.flatnonzero(~in_raw)
            assert comp is not None
            view = staged.numpy()
            if c.size == at.size:
                comp.decode_into(rows, view)
            else:
                tmp = np.empty((c.size,) + tuple(info.shape), dtype=info.dtype)
                comp.decode_into(rows[c], tmp)
                view[c] = tmp
        if not cuda:
            if at.size == g.size:
                return staged.reshape(steps_shape + tuple(info.shape))
            out = torch.empty(shape, dtype=staged.dtype)
            out[torch.from_numpy(at)] = staged
            return out.reshape(steps_shape + tuple(info.shape))
        out = torch.empty(shape, dtype=staged.dtype, device=self.output_device)
        out[torch.from_numpy(at).to(self.output_device)] = staged.to(self.output_device, non_blocking=True)
        d = np.flatnonzero(in_dev)
        if d.size:
            assert dev is not None
            out[torch.from_numpy(d).to(self.output_device)] = torch.index_select(
                dev, 0, torch.from_numpy(g[d]).to(self.output_device)
            )
        return out.reshape(steps_shape + tuple(info.shape))


BUILD_EPISODES = 2  # host memory kept free while filling: the largest episode decoded, and copies of it in flight


def plan_tiers_checked(
    size, device: torch.device, options, where: str, alternatives=(), quiet: bool = False, batches=None
):
    """``gpu_resampler``'s tiers for a dataset (``footprint.plan_tiers``) under its budgets, checked against the
    machine before any data is read: the GPU holds episodes up to ``max_device_memory`` (default: half of its free
    memory), host memory the rest up to ``max_memory`` (default: what the machine has available, with headroom),
    raw first, then with frames compressed; :data:`BUILD_EPISODES` of the largest episode are kept out of the
    host budget for the episode being read while the tiers fill.

    Args:
        size: The dataset's ``core.data_size.DataSize`` (from metadata).
        device: The training device (a CUDA device enables the GPU tier).
        options: The backend's options (``max_device_memory``, ``max_memory``, ``cache_dir``: where a compressed tier
            that RAM cannot hold goes).
        where: How the user sets options (``train.data_backend_kwargs``, ...).
        alternatives: What would fit instead, for a refusal.
        quiet: Do not log a spill (a first check before the plan is made again in the rows' order).
        batches: The batches in flight (``core.in_flight.BatchesInFlight``; ``None``: none counted). On the CPU they
            are host memory: within the default budget they are kept out of it as the episode being read while
            filling is (the larger of the two: one is held while filling, the other while serving); a given
            ``max_memory`` is the data's budget and they come on top of it, in the footprint checked against the
            machine. On CUDA they are GPU memory.

    Returns:
        ``(plan, host_limit)``: the ``footprint.TierPlan`` (its footprint's ``bound`` says how it is bounded) and
        the host bytes the tiers may fill (the budget less the episode being read).

    Raises:
        core.footprint.ResourceRefused: ``max_memory`` is below the least any plan holds (every frame compressed in
            a file on disk: the fields that are not frames, and the episode being read while filling), naming that
            least; or the plan does not fit the machine, naming both sizes and what would fit.
    """
    from robo_loaders_plugin.core.footprint import check_fits

    plan, tiers_limit, available, spilled = plan_tiers_for(size, device, options, where, alternatives, batches=batches)
    check_fits(plan.footprint, available, backend="gpu_resampler", option_prefix=where, alternatives=list(alternatives))
    if spilled and not quiet:
        logger.info(f"gpu_resampler: spilled: {spilled}")
    return plan, tiers_limit  # what the tiers may fill: the episode being read is kept out


def plan_tiers_for(size, device: torch.device, options, where: str, alternatives=(), committed=None, batches=None):
    """The tiers :func:`plan_tiers_checked` checks, on the machine as measured now less what ``committed`` holds
    (other components of a mixture), not yet checked against it.

    Args:
        size: The dataset's ``core.data_size.DataSize``.
        device: The training device.
        options: The backend's options.
        where: How the user sets options.
        alternatives: What would fit instead, for a refusal.
        committed: A ``core.footprint.Footprint`` held beside these tiers (``None``: nothing).
        batches: The batches in flight, as for :func:`plan_tiers_checked`.

    Returns:
        ``(plan, host_limit, available, spilled)``: as :func:`plan_tiers_checked`, the machine as measured (before
        ``committed`` is taken off) and why the compressed tier went to disk (empty: it did not).

    Raises:
        core.footprint.ResourceRefused: ``max_memory`` is below the least any plan holds.
    """
    import dataclasses

    from robo_loaders_plugin.backends.gpu_resampler.footprint import plan_tiers
    from robo_loaders_plugin.core.footprint import HEADROOM, Available, ResourceRefused

    measured = Available.measure(device=device if device.type == "cuda" else None)
    available = measured.less(committed) if committed is not None else measured
    device_budget = None
    if device.type == "cuda":
        device_budget = options.max_device_memory
        if device_budget is None:
            device_budget = int(DEFAULT_VRAM_FRACTION * (available.device_bytes or 0))
    given = getattr(options, "max_memory", None)
    host_limit = given if given is not None else int(HEADROOM * available.host_bytes)
    # the episode being read and compressed while the tiers fill is held too (decoded, plus the decoder's and the
    # compressor's copies): at L480 (1.66 GB episodes) max_memory 8GB held 11.4 GB without this reserve
    filling, flying, device_batches = _transient(size, device, batches)
    # the batches in flight while serving (never at once with the filling): within the default budget, kept out of
    # it as the filling is; a given max_memory is the data's budget (as compressed_cache's), the batches on top of
    # it, counted in the footprint checked against the machine
    in_budget = flying if given is None else 0
    tiers_limit = max(0, host_limit - max(filling, in_budget))
    plan = plan_tiers(size, device_budget=device_budget, host_budget=tiers_limit)
    said = (
        f"{where}.max_memory={format_bytes(given)}"
        if given is not None
        else f"{HEADROOM:.0%} of the available memory ({format_bytes(host_limit)})"
    )
    spilled = ""
    if plan.footprint.host_bytes > tiers_limit:  # even compressed they do not fit: the compressed tier on disk
        from robo_loaders_plugin.storage.cache import location

        root = location(getattr(options, "cache_dir", None))
        measured = Available.measure(disk_dir=root, device=device if device.type == "cuda" else None)
        available = measured.less(committed) if committed is not None else measured
        plan = plan_tiers(size, device_budget=device_budget, host_budget=tiers_limit, spill_dir=root)
        spilled = (
            f"even compressed (~{format_bytes(plan.compressed_bytes)}, estimated) the frames exceed {said}: "
            f"the compressed tier is a file on local disk in {root}, mapped"
        )
    if filling >= in_budget:
        kept_out = (
            f", {format_bytes(filling)} of it kept for the {plan.unit} being read while filling" if filling else ""
        )
    else:  # served batches weigh more than the episode being read: the larger is kept out of the budget
        kept_out = ", less the batches in flight"
    if plan.raw < plan.episodes:
        bound = f"{plan.frames_clause()}, host memory within {said}{kept_out}"
    else:
        bound = f"{plan.frames_clause()} within {said}{kept_out}"
    if device_budget is not None:
        bound += f", at most {format_bytes(device_budget)} on {device}"
    if batches is not None:
        joined = ": " if filling < in_budget else "; plus "
        bound += f"{joined}{batches.describe()}" + (f" on {device}" if device_batches else "")
    plan = dataclasses.replace(plan, footprint=dataclasses.replace(plan.footprint, bound=bound))
    tiers_host = plan.footprint.host_bytes  # the tiers alone: the episode being read is transient
    # no disk here: the spilled tier is the kept entry's compressed file, and the entry checks the disk for all it
    # writes when it is built (stored_tiers, before reading the source); a reuse writes nothing, so counting the
    # spill file here refused a start that only maps what an earlier run wrote
    fp = dataclasses.replace(
        plan.footprint,
        host_bytes=tiers_host + max(filling, flying),
        device_bytes=plan.footprint.device_bytes + device_batches,
        disk_bytes=0,
        disk_dir=None,
    )
    plan = dataclasses.replace(plan, footprint=fp)
    if given is not None and tiers_host + filling > given:
        # the least any plan holds: every frame compressed in a file on disk, the other fields, the episode being read
        least = tiers_host + filling
        parts = [f"{format_bytes(filling)} for the {plan.unit} being read while filling (twice the largest)"]
        if tiers_host:
            parts.insert(0, f"{format_bytes(tiers_host)} for the fields that are not frames")
        raise ResourceRefused(
            f"backend 'gpu_resampler' cannot hold this dataset within {where}.max_memory={format_bytes(given)}: "
            f"{size.describe()}; even with every camera frame compressed in a file on disk it needs at least "
            f"{format_bytes(least)} ({least} bytes) of host memory: {' and '.join(parts)}. Give max_memory at least "
            f"that, or use what would fit: {'; '.join(list(alternatives))}. Estimated from the dataset's metadata "
            "before reading any data.",
            [("host RAM (max_memory)", least, given)],
        )
    return plan, tiers_limit, measured, spilled


def _transient(size, device: torch.device, batches) -> tuple[int, int, int]:
    """``(filling, host batches, device batches)``: the bytes held besides the tiers, the episode being read only
    while they fill, the batches in flight only while serving (in GPU memory when training on CUDA)."""
    filling = BUILD_EPISODES * int(np.max(size.episode_frame_bytes(), initial=0))
    flying = batches.host_bytes if batches is not None else 0
    return (filling, 0, flying) if device.type == "cuda" else (filling, flying, 0)


def planned_tiers(size, device: torch.device, options, where: str, alternatives, committed, batches=None):
    """The tiers' plan as ``BackendSpec.footprints`` gives it (:func:`plan_tiers_for`): the episode being read
    while the tiers fill is held only while building and the batches in flight are the mixture's (counted once,
    not per component), so what stays held beside other datasets is the tiers alone.

    Args:
        size: The dataset's ``core.data_size.DataSize``.
        device: The training device.
        options: The backend's options.
        where: How the user sets options.
        alternatives: What would fit instead.
        committed: A ``core.footprint.Footprint`` held beside these tiers.
        batches: The batches in flight (``None``: none counted).

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        core.footprint.ResourceRefused: ``max_memory`` is below the least any plan holds.
    """
    import dataclasses

    from robo_loaders_plugin.core.footprint import Planned

    plan, _, measured, _ = plan_tiers_for(size, device, options, where, alternatives, committed, batches)
    filling, flying, device_batches = _transient(size, device, batches)
    fp = plan.footprint
    held = dataclasses.replace(
        fp,
        host_bytes=max(0, fp.host_bytes - max(filling, flying)),
        device_bytes=max(0, fp.device_bytes - device_batches),
    )
    return Planned(plan.footprint, measured, tuple(alternatives), held)
