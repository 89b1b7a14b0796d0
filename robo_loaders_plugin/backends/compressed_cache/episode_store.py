"""The episode store: one file holding every episode's arrays, frames compressed one by one.

Why one file: a file mapped read-only is shared by every process that maps it (DataLoader workers started by
fork *or* spawn all see the same page-cache pages), so the cache exists once in RAM however many workers run,
and a dataset pickles as a path. Without ``cache_dir`` the file lives in ``/dev/shm`` (RAM), shared by the
processes of the host, and is deleted when the last of them is done with it (``storage.ramfile``); with
``cache_dir`` it persists and is reused when its fingerprint matches.

Layout (little-endian)::

    b"RLPSTORE" | data region (arrays and frame blobs, 64-byte aligned) | JSON header | u64 header offset |
    u64 header length | u32 crc32 of header | b"RLPSTEND"

The header lists, per episode and field, either a raw array (dtype, shape, offset) or a frame table (dtype,
frame shape as served, offset of an int64 table of N+1 blob offsets, and ``layout`` when the frames are stored
channels last: ``storage.frame_layout``), each with a table of checksums: one per frame blob, one per block of whole
rows of a raw array (about :data:`RAW_BLOCK_BYTES`). No pickle anywhere.

Why checksums per frame and per block, beside the whole-file CRC32 checked before a store is reused: the file is
mapped, so bytes that change while a run reads it (another process writing to it, a failing disk) reach the run
directly; a frame damaged that way decoded into wrong pixels, or into Blosc2's anonymous ``Cannot decompress``.
Every read now checks what it read, after copying or decoding it (:meth:`EpisodeStore.decode_frames`,
:meth:`EpisodeStore.check_blocks`), and a mismatch is a :class:`StoreError` naming the file, the episode, the field
and the frame or steps. The same check for RAM stores: a file in ``/dev/shm`` is as writable by the user's other
processes as one on disk, and one code path is the simplest to trust.

Every process that builds or maps a store holds a shared ``flock`` on it (:func:`open_locked`): from the creation of
the temporary file, through its publication, for as long as a mapping lives, so ``lslocks``/``fuser`` show who
uses a cache file. Whether a cache may be deleted is decided by its entry's ``use``/``build`` locks
(``storage.cache``, ``storage.ramfile``), which a process takes before it opens the file.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import json
import math
import mmap
import os
import shutil
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from robo_loaders_plugin.core.files import try_lock
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.storage import frame_layout
from robo_loaders_plugin.storage.codec import FrameCodec, use_single_thread
from robo_loaders_plugin.storage.integrity import CHECKSUM, StoreError, checksum
from robo_loaders_plugin.storage.ramfile import MemoryBudgetExceeded

MAGIC = b"RLPSTORE"
END_MAGIC = b"RLPSTEND"
# 2: a checksum table per frames field and per raw field (format 1 had none); 3: channels-first camera frames stored
# channels last (``storage.frame_layout``), the field's ``layout`` says so
FORMAT_VERSION = 3
RAW_BLOCK_BYTES = 4096  # a raw array is checked in blocks of whole rows of about this size (one row when larger)
_FOOTER = struct.Struct("<QQI8s")
_ALIGN = 64
_BLOSC_HEADER = 16  # a Blosc2 chunk starts with version, flags, typesize, then u32 nbytes, blocksize, cbytes
_HEADER_WORDS = struct.Struct("<4I")  # the header as 4 words: [1] nbytes (decoded size), [3] cbytes (blob size)
_FEW_BLOBS = 8  # check_blobs of at most this many blobs unpacks their headers in Python (~1 us each, numpy ~20 us)


_DAMAGED = (
    "the file changed after it was built, written by another process or damaged on disk; stop the run "
    "and delete the file, the next run builds it again"
)


_LOCK_WAIT_S = 10.0
# Locks of stores this process has just published (path -> fd), kept until it opens them: between
# StoreWriter.finish and the EpisodeStore that takes its own lock, another process's sweep would find the file free.
_published: dict[str, int] = {}


def names_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not deleted or replaced since).

    Args:
        fd: An open file descriptor.
        path: The path it was opened by.

    Returns:
        True when ``path`` exists and is the same file (device and inode).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def open_locked(path: str, create: bool = False) -> int:
    """Open ``path`` (``create``: a new file, for writing) holding a shared flock, the mark of a store in use.

    The RAM sweep deletes only files it can lock exclusively, so the file is safe once this returns. A sweep can
    delete it between our open and our lock (it was free then); checking afterwards that ``path`` still names the
    file we hold closes that gap: a new file is created again, an existing one is reported gone.

    Args:
        path: The store file (or its temporary file).
        create: Create it, exclusively, for writing (else open an existing one read-only).

    Returns:
        The file descriptor, holding a shared flock (the caller closes it to release the lock).

    Raises:
        StoreError: an existing file is gone, or another process held an exclusive lock on it for longer than
            ten seconds.
        FileNotFoundError: ``create`` and the directory does not exist.
    """
    deadline = time.monotonic() + _LOCK_WAIT_S
    while True:
        try:
            fd = os.open(path, (os.O_WRONLY | os.O_CREAT | os.O_EXCL) if create else os.O_RDONLY, 0o644)
        except FileNotFoundError:
            if create:
                raise
            raise StoreError(f"cache file {path} is gone (deleted while the dataset was in use?)") from None
        except FileExistsError:  # only while a sweep removes a file of the same name; it is gone in an instant
            fd = None
        if fd is not None:
            try:
                if try_lock(fd, shared=True) and names_file(fd, path):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        if time.monotonic() > deadline:
            raise StoreError(
                f"{path}: another process has held an exclusive lock on it for {_LOCK_WAIT_S:.0f} s "
                "(robo-loaders takes one only for an instant, to delete an unused RAM cache); find "
                f"that process with 'fuser -v {path}'"
            )
        time.sleep(0.01)


def drop_publish_lock(path: str) -> None:
    """Release the lock :meth:`StoreWriter.finish` kept on ``path``; called once the caller holds its own. Does
    nothing when this process kept none.

    Args:
        path: The store file.
    """
    fd = _published.pop(os.path.abspath(path), None)
    if fd is not None:
        os.close(fd)


def _is_shm(directory: str) -> bool:
    real = os.path.realpath(directory)
    return real == "/dev/shm" or real.startswith("/dev/shm/")


class StoreWriter:
    """Streams episodes into a temporary file and publishes it atomically with :meth:`finish`.

    The temporary file is locked from its creation and the lock is handed on at publication (to the next
    :class:`EpisodeStore` of that path in this process), so no sweep deletes a store being built or just built.
    A write that fails (``OSError``) removes the temporary file at once, since a full ``/dev/shm`` also starves
    every other process that uses it; a full disk is reported as a :class:`StoreError` saying what to do.
    On any other error the caller must call :meth:`abort`."""

    def __init__(self, path: str, codec: FrameCodec, max_bytes: int | None = None, workers: int = 1, guard=None):
        """``guard``: a ``core.footprint.DiskGuard`` checked before each episode is written (a store on disk
        stops, removing its partial file, before the disk falls below its reserve)."""
        self.path = path
        self.codec = codec
        self.max_bytes = max_bytes
        self.guard = guard
        # pid and thread for humans and for the builder's SIGTERM cleanup (storage.ramfile); random so that a
        # recycled pid (another PID namespace) never shares a temporary file
        self._tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
        self._crc = 0
        self._pos = 0
        self._episodes: list[dict] = []
        self.raw_nbytes = 0
        self.compressed_nbytes = 0
        self.decoded_frame_nbytes = 0
        self._frames_seen = False  # whether a field was stored as compressed frames (the budget's hint names a codec)
        self._fd: Any = None  # the temporary file's descriptor, carrying its lock (None once finished or aborted)
        self._f: Any = None  # the file object over it while writing
        self._pool: Any = None  # the threads compressing frames (None: the calling thread)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with self._writing():
            self._fd = open_locked(self._tmp, create=True)
            # the fd outlives the file object: it carries the lock (both are closed when the store is finished)
            self._f = open(self._fd, "wb", closefd=False)  # noqa: SIM115
            self._emit(MAGIC)
            self._pos = len(MAGIC)
        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(workers)

    @contextlib.contextmanager
    def _writing(self):
        """Failed I/O: remove the temporary file now; a full disk becomes a StoreError the user can act on."""
        try:
            yield
        except OSError as exc:
            written = self._pos
            self.abort()
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise StoreError(self._out_of_space(exc, written)) from exc

    def _out_of_space(self, exc: OSError, written: int) -> str:
        where = os.path.dirname(os.path.abspath(self.path))
        while ".tmp-" in os.path.basename(where):  # a cache entry's build directory, removed with the build: the
            where = os.path.dirname(where)  # directory the user chose is the one to name (a reviewer's find)
        try:
            usage = shutil.disk_usage(where)
            room = f"now {format_bytes(usage.free)} free of {format_bytes(usage.total)}, the partial file removed"
        except OSError:
            room = "free space unknown"
        msg = (
            f"{where} is full ({exc.strerror or os.strerror(exc.errno or 0)}): writing the cache {self.path} failed "
            f"after {format_bytes(written)} ({room}). "
        )
        if _is_shm(where):
            return msg + (
                "/dev/shm is RAM, and Docker gives a container only 64 MB of it by default. Set the "
                "backend option cache_dir to a directory on disk (robomimic: "
                "train.data_backend_kwargs.cache_dir; LeRobot: --dataset.backend_kwargs="
                "'{\"cache_dir\": ...}'), which also keeps the cache between runs, or give the container "
                "a larger /dev/shm (docker run --shm-size=16g; Kubernetes: a memory-backed emptyDir "
                "mounted on /dev/shm)"
            )
        return msg + (
            "Free space there, or set the backend option cache_dir to a directory on a disk with room for the cache"
        )

    def _emit(self, data) -> None:
        """Write to the data region, keeping its CRC32 (checked when a persisted cache is reused)."""
        self._f.write(data)
        self._crc = zlib.crc32(data, self._crc)

    # -- writing -----------------------------------------------------------------------------------------------
    def _align(self):
        pad = (-self._pos) % _ALIGN
        if pad:
            self._emit(b"\0" * pad)
            self._pos += pad

    def _write(self, data) -> int:
        self._align()
        off = self._pos
        # an array's bytes through numpy: memoryview refuses to cast a view with a zero in its shape (an observation
        # of no values per step, (N, 0), which robomimic serves)
        mv = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else data)
        mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
        self._emit(mv)
        self._pos += mv.nbytes
        self._check_budget()
        return off

    def _check_budget(self):
        if self.max_bytes is not None and self._pos > self.max_bytes:
            raise MemoryBudgetExceeded(
                f"the compressed cache needs more than max_memory={format_bytes(self.max_bytes)} "
                f"(already {format_bytes(self._pos)} after {len(self._episodes)} episodes); raise max_memory, "
                "select fewer obs keys or demos"
                # a codec only makes frames smaller (a store without frames was told to choose one: a reviewer's)
                + (", or choose a stronger codec (codec='zstd')" if self._frames_seen else "")
            )

    def add_episode(self, name: str, fields: Mapping[str, np.ndarray], compressed: Iterable[str] = ()) -> None:
        """Append one episode: each field either raw (one aligned array) or, for ``compressed`` fields, one blob
        per frame compressed by ``workers`` threads, with its table of offsets.

        Args:
            name: The episode's name (``demo_3``, ``episode_7``), kept in the header.
            fields: ``{field: array with one row per step}``; the episode's length is the first field's rows.
            compressed: The fields stored as compressed frames (camera frames); channels-first frames are stored
                channels last (``storage.frame_layout``: they pack better), the field's ``layout`` says so.

        Raises:
            StoreError: a field is a scalar, or the disk (or ``/dev/shm``) is full (the temporary file is removed).
            MemoryBudgetExceeded: the data written exceeds ``max_bytes``.
            core.footprint.ResourceRefused: the guard's disk would fall below its reserve (the build is aborted).
        """
        compressed = set(compressed)
        if self.guard is not None:  # compressed sizes are not known yet: the raw size bounds them
            try:
                self.guard.check(sum(np.asarray(a).nbytes for a in fields.values()), self._pos)
            except BaseException:
                self.abort()
                raise
        with self._writing():
            entry: dict[str, Any] = {"name": name, "length": None, "fields": {}}
            for key, arr in fields.items():
                arr = np.ascontiguousarray(arr)
                if arr.ndim == 0:
                    raise StoreError(f"episode {name!r}: field {key!r} is a scalar, expected one row per step")
                if entry["length"] is None:
                    entry["length"] = int(arr.shape[0])
                desc: dict[str, Any] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
                if key in compressed:
                    self._frames_seen = True
                    layout = frame_layout.stored_layout(arr.shape[1:])
                    if layout is not None:
                        desc["layout"] = layout
                    frames = [frame_layout.to_stored(arr[i], layout) for i in range(arr.shape[0])]
                    blobs = (
                        list(self._pool.map(self.codec.compress, frames))
                        if self._pool
                        else [self.codec.compress(f) for f in frames]
                    )
                    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
                    self._align()
                    start = self._pos
                    for i, blob in enumerate(blobs):
                        offsets[i] = self._pos - start
                        self._emit(blob)
                        self._pos += len(blob)
                    offsets[-1] = self._pos - start
                    self._check_budget()
                    sums = np.fromiter(map(checksum, blobs), dtype="<u8", count=len(blobs))
                    desc.update(kind="frames", offset=start, table=self._write(offsets), sums=self._write(sums))
                    self.compressed_nbytes += int(offsets[-1])
                    self.decoded_frame_nbytes += arr.nbytes
                else:
                    per = max(1, RAW_BLOCK_BYTES // max(1, arr[:1].nbytes))
                    desc.update(
                        kind="raw", offset=self._write(arr), block_rows=per, sums=self._write(_block_sums(arr, per))
                    )
                    self.raw_nbytes += arr.nbytes
                entry["fields"][key] = desc
            self._episodes.append(entry)

    def finish(self, meta: Mapping) -> str:
        """Write the header and footer, sync, and publish the file atomically at ``path``; its lock is kept until
        this process opens it (:func:`drop_publish_lock`), so no sweep deletes it meanwhile.

        Args:
            meta: Metadata recorded in the header (the source fingerprint, the framework, ...); JSON-serializable.

        Returns:
            ``path``.

        Raises:
            StoreError: the disk (or ``/dev/shm``) is full (the temporary file is removed).
            MemoryBudgetExceeded: the data region exceeds ``max_bytes``.
        """
        with self._writing():
            self._align()
            self._check_budget()  # the budget covers the whole data region (what a reusing run compares it to)
            hoff = self._pos
            header = json.dumps(
                {
                    "format": FORMAT_VERSION,
                    "checksum": CHECKSUM,
                    "codec": self.codec.as_dict(),
                    "meta": dict(meta),
                    "episodes": self._episodes,
                    "data_crc32": self._crc,
                    "data_nbytes": hoff,
                    "stats": {
                        "raw_nbytes": self.raw_nbytes,
                        "compressed_nbytes": self.compressed_nbytes,
                        "decoded_frame_nbytes": self.decoded_frame_nbytes,
                    },
                },
                sort_keys=True,
            ).encode()
            self._f.write(header)
            self._f.write(_FOOTER.pack(hoff, len(header), zlib.crc32(header), END_MAGIC))
            self._f.close()  # flushes
            os.fsync(self._fd)
            self._close_pool()
            os.replace(self._tmp, self.path)
        drop_publish_lock(self.path)
        _published[os.path.abspath(self.path)], self._fd = self._fd, None
        return self.path

    def abort(self) -> None:
        """Discard the build and its temporary file. Never raises: it runs on error paths, where a second error
        would hide the first; calling it again (or after :meth:`finish`) does nothing."""
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.shutdown(cancel_futures=True)
        if self._f is not None:
            with contextlib.suppress(Exception):
                self._f.close()  # its flush fails again on a full disk
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)  # while still locked: a sweep never sees it free
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _close_pool(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _block_sums(arr: np.ndarray, per: int) -> np.ndarray:
    """The checksum of each block of ``per`` rows of a raw array (the last block may be shorter)."""
    flat = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")
    step = per * (arr[:1].nbytes if len(arr) else 0)
    n = -(-len(arr) // per)
    return np.fromiter((checksum(flat[i * step : (i + 1) * step]) for i in range(n)), dtype="<u8", count=n)


class EpisodeStore:
    """Read-only view of a store file; pickles as its path and re-maps lazily in each process."""

    def __init__(self, path: str):
        self.path = path
        self._mm: Any = None  # the mapping (None once closed)
        self._buf: Any = None  # the mapped file as uint8 (None once closed)
        self._view: Any = None  # a memoryview of it (None once closed)
        self._open()

    def _open(self):
        fd = open_locked(self.path)  # the mapping keeps this lock: mmap holds its own duplicate of fd
        try:
            size = os.fstat(fd).st_size
            with open(fd, "rb", closefd=False) as f:
                if size < len(MAGIC) + _FOOTER.size or f.read(len(MAGIC)) != MAGIC:
                    raise StoreError(f"{self.path}: not a robo-loaders cache file (bad magic)")
                f.seek(size - _FOOTER.size)
                hoff, hlen, crc, end = _FOOTER.unpack(f.read(_FOOTER.size))
                if end != END_MAGIC or hoff + hlen + _FOOTER.size != size:
                    raise StoreError(f"{self.path}: truncated or corrupt cache file (bad footer)")
                f.seek(hoff)
                header = f.read(hlen)
                if zlib.crc32(header) != crc:
                    raise StoreError(f"{self.path}: corrupt cache file (header checksum mismatch)")
                self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        drop_publish_lock(self.path)  # ours holds the file now
        self.header = json.loads(header)
        if self.header.get("format") != FORMAT_VERSION or self.header.get("checksum") != CHECKSUM:
            raise StoreError(
                f"{self.path}: cache format {self.header.get('format')} is not {FORMAT_VERSION} "
                f"(frames checked with {CHECKSUM}; format 3 stores camera frames channels last); delete it and it "
                "will be rebuilt"
            )
        self._buf = np.frombuffer(self._mm, dtype=np.uint8)
        self._view = memoryview(self._buf)  # slices of it cost less than numpy's, on the per-frame path
        self.episodes = self.header["episodes"]
        swapped = [k for k, d in (self.episodes[0]["fields"] if self.episodes else {}).items() if d["dtype"][0] == ">"]
        if swapped:  # built before sources were read in this machine's byte order: torch cannot batch its arrays
            raise StoreError(
                f"{self.path}: holds {swapped[0]!r} big-endian, as an earlier version stored a file's big-endian "
                "arrays (its batches failed); delete it and it will be rebuilt"
            )
        self.meta = self.header["meta"]
        self.stats = self.header["stats"]
        self.file_nbytes = size
        self._frame_tables_of: dict[str, tuple] = {}  # _frame_tables of every episode, per field
        self._first_rows = None
        use_single_thread()

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        EpisodeStore.__init__(self, state["path"])

    def close(self):
        """Unmap the file (which releases this process's lock on it). Views still alive keep the mapping until they
        go; reading through this object afterwards is not possible."""
        if self._view is not None:
            with contextlib.suppress(BufferError):
                self._view.release()
        self._buf = self._view = None
        self._frame_tables_of = {}
        if self._mm is not None:
            with contextlib.suppress(BufferError):  # views still alive; the mapping goes with them
                self._mm.close()
            self._mm = None

    def verify(self) -> None:
        """Check the data region's CRC32 (one sequential read): a persisted cache is trusted only after this."""
        crc, n = 0, int(self.header.get("data_nbytes", -1))
        if n < 0 or "data_crc32" not in self.header:
            raise StoreError(f"{self.path}: no data checksum in the header")
        view = memoryview(self._mm)
        for off in range(0, n, 1 << 24):
            crc = zlib.crc32(view[off : min(n, off + (1 << 24))], crc)
        view.release()
        if crc != self.header["data_crc32"]:
            raise StoreError(f"{self.path}: corrupt cache file (data checksum mismatch)")

    def field(self, ep: int, key: str) -> dict:
        """A field's entry in the header: ``dtype``, ``shape``, ``kind`` (``raw`` or ``frames``) and offsets.

        Args:
            ep: The episode's position in the store.
            key: The field.

        Returns:
            The entry.

        Raises:
            StoreError: the episode has no such field.
        """
        try:
            return self.episodes[ep]["fields"][key]
        except KeyError:
            raise StoreError(f"{self.path}: episode {self.episodes[ep]['name']!r} has no field {key!r}") from None

    def raw(self, ep: int, key: str) -> np.ndarray:
        """Zero-copy read-only view of a raw field, in the mapped file, unchecked (the serving path,
        ``backends.compressed_cache.frames.CompressedFrames``, checks the blocks its rows lie in: :meth:`check_blocks`).

        Args:
            ep: The episode's position in the store.
            key: A field stored raw.

        Returns:
            The array, in its stored dtype and shape.

        Raises:
            StoreError: the episode has no such field.
        """
        d = self.field(ep, key)
        dt = np.dtype(d["dtype"])
        n = int(np.prod(d["shape"])) * dt.itemsize
        return self._buf[d["offset"] : d["offset"] + n].view(dt).reshape(d["shape"])

    def locate(self, row: int) -> tuple[str, int]:
        """Which episode and step a row of the store's global numbering is (episodes end to end, in the store's
        order: the numbering of :meth:`blob_layout` and ``backends.compressed_cache.frames.CompressedFrames``).

        Args:
            row: The global row.

        Returns:
            ``(episode name, step)``.
        """
        if self._first_rows is None:
            self._first_rows = np.concatenate([[0], np.cumsum([e["length"] for e in self.episodes])]).astype(np.int64)
        ep = int(np.searchsorted(self._first_rows, row, side="right")) - 1
        return self.episodes[ep]["name"], int(row - self._first_rows[ep])

    def _damaged(self, what: str, detail: str = "") -> StoreError:
        return StoreError(f"{self.path}: {what} is damaged (checksum mismatch on read{detail}): {_DAMAGED}")

    def blob_bounds(self, key: str, episodes=None) -> tuple[np.ndarray, np.ndarray]:
        """Absolute (start, end) file offsets of every frame blob of ``key`` in ``episodes`` (default: all), in
        that order, each blob's declared size checked (:meth:`check_blobs`).

        Args:
            key: A frames field.
            episodes: Episode positions (default: every episode).

        Returns:
            ``(starts, ends)``, int64 arrays of one entry per frame.

        Raises:
            StoreError: a blob's Blosc2 header disagrees with the store's tables or the field's frame size.
        """
        starts, ends, expected = self.blob_layout(key, episodes)
        self.check_blobs(key, starts, ends, expected)
        return starts, ends

    def blob_layout(self, key: str, episodes=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where every frame blob of ``key`` is, from the store's offset tables only (no blob is touched).

        Why apart from the check: checking reads the first bytes of every blob, a page of the mapped file per frame:
        at a million frames that is seconds in every process opening the store, before its first batch. A reader
        locates blobs here at open and checks each one once, before its first decode (:meth:`check_blobs`).

        Args:
            key: A frames field.
            episodes: Episode positions (default: every episode).

        Returns:
            ``(starts, ends, expected)``: absolute file offsets of each blob and its frame's decoded size in bytes.
        """
        counts, table_at, offsets, _, sizes = self._frame_tables(key, episodes)
        ends = counts + 1  # each table holds its episode's n + 1 offsets
        absolute = self._words(table_at, ends) + np.repeat(offsets, ends)
        is_last = np.zeros(absolute.size, dtype=bool)
        is_last[np.cumsum(ends) - 1] = True
        return absolute[~is_last], absolute[~np.roll(is_last, 1)], np.repeat(sizes, counts)

    def _frame_tables(self, key: str, episodes=None) -> tuple:
        """Per episode of ``episodes`` (default: all), from the header in one pass: ``key``'s frame count, where its
        offset table and checksum table are (8-byte word indices of the mapped file), its blobs' base offset and
        one decoded frame's bytes.

        Why whole arrays: a loop of numpy calls per episode cost ~12 us an episode, ~0.4 ms per store and camera at a
        mixture's first read of each of its hundreds of stores (issue 44); the tables are then read with one gather
        (:meth:`_words`).

        Raises:
            StoreError: an episode has no such field, or a table is not on an 8-byte boundary (the writer aligns
                every table to 64 bytes).
        """
        cached = self._frame_tables_of.get(key) if episodes is None else None
        if cached is not None:
            return cached
        eps = range(len(self.episodes)) if episodes is None else episodes
        try:
            descs = [self.episodes[ep]["fields"][key] for ep in eps]
        except KeyError:
            descs = [self.field(ep, key) for ep in eps]  # raises naming the episode
        if not descs:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty, empty, empty
        step, dtype = descs[0]["shape"][1:], descs[0]["dtype"]
        flat: list[int] = []
        one_shape = True
        for d in descs:
            shape = d["shape"]
            flat += (shape[0], d["table"], d["offset"], d["sums"])
            one_shape = one_shape and shape[1:] == step and d["dtype"] == dtype
        cols = np.array(flat, dtype=np.int64).reshape(-1, 4)
        if np.any(cols[:, 1::2] % 8):
            raise StoreError(f"{self.path}: {key}: frame tables not aligned to 8 bytes (not written by this version)")
        sizes: np.ndarray
        if one_shape:
            sizes = np.full(len(descs), math.prod(step) * np.dtype(dtype).itemsize, dtype=np.int64)
        else:
            sizes = np.array([math.prod(d["shape"][1:]) * np.dtype(d["dtype"]).itemsize for d in descs], np.int64)
        tables = (cols[:, 0], cols[:, 1] // 8, cols[:, 2], cols[:, 3] // 8, sizes)
        if episodes is None:
            self._frame_tables_of[key] = tables
        return tables

    def _words(self, at: np.ndarray, counts: np.ndarray, dtype="<i8") -> np.ndarray:
        """``counts[i]`` 8-byte words of the mapped file from word ``at[i]``, for every ``i``, end to end: one
        gather (a copy, so a table damaged after this cannot make damaged data pass).

        Raises:
            StoreError: a table would end past the file (a header not written by this version's writer).
        """
        words = self._buf[: self._buf.size // 8 * 8].view(dtype)
        if at.size and int((at + counts).max()) > words.size:
            raise StoreError(f"{self.path}: a table lies past the end of the file: {_DAMAGED}")
        first = np.cumsum(counts) - counts
        return words[np.repeat(at - first, counts) + np.arange(int(counts.sum()))]

    def frame_sums(self, key: str, episodes=None) -> np.ndarray:
        """The checksum of every frame blob of ``key`` in ``episodes`` (default: all), in :meth:`blob_layout`'s
        order, for :meth:`decode_frames`.

        Args:
            key: A frames field.
            episodes: Episode positions (default: every episode).

        Returns:
            uint64 array of one entry per frame.
        """
        counts, _, _, sums_at, _ = self._frame_tables(key, episodes)
        return self._words(sums_at, counts, "<u8")

    def check_blobs(
        self, key: str, starts: np.ndarray, ends: np.ndarray, expected: np.ndarray, frames=None, sums=None
    ) -> None:
        """Check blobs' declared sizes up front, so that a damaged header is named before any batch and the hot path
        decodes small frames without checking each header again (``FrameCodec.decoder``): the Blosc2
        header of each blob read with numpy (its uncompressed and compressed sizes), the blobs that disagree then
        parsed by Blosc2 for the error (a call per frame took ~1.5 s per million frames).

        Args:
            key: The field (for messages).
            starts, ends: Absolute file offsets of the blobs (from :meth:`blob_layout`).
            expected: Each blob's decoded size in bytes.
            frames: Each blob's global row (:meth:`locate`), to name the frame in the error (``None``: not named).
            sums: Each blob's checksum (:meth:`frame_sums`): a blob that disagrees and fails it is reported as
                damaged after the store was built (``None``: not checked).

        Raises:
            StoreError: a blob's header disagrees with its bounds, or (with ``sums``) it was damaged after the
                store was built.
            CodecError: a blob's header announces another frame size, or cannot be read.
        """
        if len(starts) <= _FEW_BLOBS:  # a read of a few frames: Python beats numpy here
            check_blobs_across((self,), (key,), np.zeros(len(starts), np.int64), starts, ends, expected, frames, sums)
            return
        ok = (ends - starts) >= _BLOSC_HEADER
        header = np.where(ok, starts, 0)[:, None] + np.arange(_BLOSC_HEADER)
        fields = self._buf[np.minimum(header, len(self._buf) - 1)].view("<u4").astype(np.int64)  # (n, 4)
        ok &= (fields[:, 1] == expected) & (fields[:, 3] == ends - starts)
        for j in np.flatnonzero(~ok).tolist():
            self._bad_blob(key, starts, ends, expected, j, frames, sums)

    def _bad_blob(self, key: str, starts, ends, expected, j: int, frames, sums) -> None:
        """Raise the error for blob ``j`` of :meth:`check_blobs`, whose header disagrees with its bounds."""
        where = f"{self.path}: {key}"
        if frames is not None:
            name, step = self.locate(int(frames[j]))
            where = f"{self.path}: {name} {key} frame {step}"
            if sums is not None and checksum(self._buf[starts[j] : ends[j]]) != int(sums[j]):
                raise self._damaged(f"{name} {key} frame {step}")
        FrameCodec.check_size(self._buf[starts[j] : ends[j]], int(expected[j]), where=where)
        cbytes = int(self._buf[starts[j] + 12 : starts[j] + 16].view("<u4")[0]) if ends[j] - starts[j] >= 16 else 0
        raise StoreError(
            f"{where}: corrupt compressed frame (its header says {cbytes} compressed "
            f"bytes, the store holds {int(ends[j] - starts[j])})"
        )

    def decode_frames(
        self, starts, ends, out: np.ndarray, rows, *, sums, frames=None, key: str = "frames", layout=None
    ) -> None:
        """Decompress blob ``[starts[j], ends[j])`` into ``out[rows[j]]`` and check it against ``sums[j]``. Each
        blob's size was checked once before (:meth:`check_blobs`, through :meth:`blob_bounds` or a reader's first
        decode of it); a large frame's decode checks its header's size again, on a copy of the blob
        (``FrameCodec.decompress_into``: the mapped bytes may change under the read). Frames stored channels last
        (``layout``) are decompressed into a scratch of a few frames and copied into their rows as served
        (``frame_layout.ServedRows``).

        Why the checksum after decoding, not before: bytes that change between a check and the decode would be
        decoded unseen; checked afterwards, any change before or during the decode is seen.

        Args:
            starts: Blob start offsets.
            ends: Blob end offsets.
            out: The output array; ``out[r]`` is C-contiguous and of one frame's size.
            rows: For each blob, its position in ``out``.
            sums: Each blob's checksum (:meth:`frame_sums`).
            frames: Each blob's global row (:meth:`locate`), to name a damaged frame (``None``: its position in
                this call).
            key: The field, to name a damaged frame.
            layout: How the field's frames are stored (:meth:`frame_layout`; ``None``: as served).

        Raises:
            StoreError: a blob does not match its checksum, or cannot be decompressed (damaged after the store was
                built); the message names the file, the episode, the field and the frame.
        """
        served = frame_layout.ServedRows(out, layout)
        self.decode_into(
            served, FrameCodec.decoder_into(out, shared=True), starts, ends, rows, sums=sums, frames=frames, key=key
        )
        served.flush()

    def decode_into(self, served, decompress, starts, ends, rows, *, sums, frames=None, key: str = "frames") -> None:
        """:meth:`decode_frames`' loop, into an output set up by the caller: the frames land in ``served``'s rows
        at its next ``flush()``.

        Why apart: a mixture's joined read (``frames.JoinedStores``) decodes the frames of several stores
        into one output, set up and put back in its layout once for all of them.

        Args:
            served: The output's ``frame_layout.ServedRows``.
            decompress: ``FrameCodec.decoder_into`` of the output (``shared=True``: a mapped file).
            starts: Blob start offsets.
            ends: Blob end offsets.
            rows: For each blob, its row of the output.
            sums: Each blob's checksum (:meth:`frame_sums`).
            frames: Each blob's global row (:meth:`locate`), to name a damaged frame.
            key: The field, to name a damaged frame.

        Raises:
            StoreError: as :meth:`decode_frames`.
        """
        decode_across((self,), (key,), served, decompress, [0] * len(rows), starts, ends, rows, sums, frames)

    def _frame_error(self, key: str, frames, j: int, blob=None, expected=None, exc=None) -> StoreError:
        """The error for frame ``j`` of a read: damaged (its checksum fails), or, when Blosc2 refused a blob whose
        checksum holds, that refusal (the store was written so)."""
        what = f"{key} frame at position {j} of this read"
        if frames is not None:
            name, step = self.locate(int(frames[j]))
            what = f"{name} {key} frame {step}"
        if exc is None or checksum(blob) != expected:
            return self._damaged(what, "" if exc is None else f"; Blosc2 could not decompress it: {exc}")
        return StoreError(
            f"{self.path}: {what} cannot be decompressed though its checksum holds (Blosc2: {exc}); "
            "delete the file, the next run builds it again"
        )

    def raw_blocks(self, key: str) -> tuple:
        """Where the checked blocks of a raw field are, in every episode (for :meth:`check_blocks`).

        Args:
            key: A raw field.

        Returns:
            ``(base, per, starts, ends, sums)``, lists indexed by episode (``base``: each episode's first block in
            the field's global block numbering, N+1 entries; ``per``: its rows per block) or by block (absolute file
            offsets, checksum): Python lists, since a read checks a few blocks at a time.

        Raises:
            StoreError: an episode without the field, or a checksum table misaligned or past the end of the file.
        """
        entries = [self.field(ep, key) for ep in range(len(self.episodes))]
        row_bytes_of: dict = {}  # (row shape, dtype) -> bytes a row: the same for nearly every episode
        offset, rows, per, sums_at, row_bytes = (np.empty(len(entries), np.int64) for _ in range(5))
        for i, d in enumerate(entries):
            shape = d["shape"]
            kind = (tuple(shape[1:]), d["dtype"])
            if (rb := row_bytes_of.get(kind)) is None:
                rb = row_bytes_of[kind] = int(np.prod(kind[0], dtype=np.int64)) * np.dtype(kind[1]).itemsize
            offset[i], rows[i], per[i], sums_at[i], row_bytes[i] = d["offset"], shape[0], d["block_rows"], d["sums"], rb
        # one pass in numpy, not a loop per episode: 10,000 episodes' 7 fields took ~1 s of a first batch (issue 45)
        n = -(-rows // per)
        base = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        j = np.arange(int(base[-1]), dtype=np.int64) - np.repeat(base[:-1], n)  # each block's number in its episode
        block_bytes = np.repeat(per * row_bytes, n)
        starts = np.repeat(offset, n) + j * block_bytes
        ends = np.minimum(starts + block_bytes, np.repeat(offset + rows * row_bytes, n))
        if np.any(sums_at % 8) or np.any(sums_at < 0):
            raise StoreError(f"{self.path}: {key}: checksum tables not aligned to 8 bytes (not written by this one)")
        sums = self._words(sums_at // 8, n, "<u8")  # copied out: a table damaged after this cannot pass damaged data
        return base.tolist(), per.tolist(), starts.tolist(), ends.tolist(), sums.tolist()

    def check_blocks(self, key: str, layout, blocks) -> None:
        """Check raw blocks against their checksums (after their rows were copied out: a change before or during
        the copy is seen).

        Args:
            key: The raw field, to name a damaged block.
            layout: :meth:`raw_blocks` of ``key``.
            blocks: Block numbers to check (ints).

        Raises:
            StoreError: a block does not match its checksum; the message names the file, the episode, the field
                and the steps the block holds.
        """
        base, per, starts, ends, sums = layout
        buf = self._view
        for b in blocks:
            if checksum(buf[starts[b] : ends[b]]) != sums[b]:
                ep = bisect.bisect_right(base, b) - 1
                first = (b - base[ep]) * per[ep]
                last = min(first + per[ep], int(self.episodes[ep]["length"])) - 1
                steps = f"step {first}" if first == last else f"steps {first}-{last}"
                raise self._damaged(f"{self.episodes[ep]['name']} {key} {steps}")

    def frame_layout(self, ep: int, key: str) -> str | None:
        """How a frames field's frames are stored in an episode (``storage.frame_layout``).

        Args:
            ep: The episode's position in the store.
            key: The field.

        Returns:
            ``frame_layout.CHANNELS_LAST``, or ``None``: as served.

        Raises:
            StoreError: the episode has no such field, or its layout is unknown or does not fit its frames.
        """
        d = self.field(ep, key)
        try:
            return frame_layout.checked_layout(d.get("layout"), d["shape"][1:])
        except ValueError as exc:
            raise StoreError(f"{self.path}: {self.episodes[ep]['name']}/{key}: {exc}; delete the file") from None

    def frame_info(self, ep: int, key: str) -> tuple[np.dtype, tuple, bool]:
        """How a field is stored in an episode.

        Args:
            ep: The episode's position in the store.
            key: The field.

        Returns:
            ``(dtype, step shape, stored as compressed frames?)``.

        Raises:
            StoreError: the episode has no such field.
        """
        d = self.field(ep, key)
        return np.dtype(d["dtype"]), tuple(d["shape"][1:]), d["kind"] == "frames"


def check_blobs_across(stores, keys, owner, starts, ends, expected, frames, sums) -> None:
    """:meth:`EpisodeStore.check_blobs` of blobs of several stores, in one loop over the blobs (a mixture's joined
    read, ``frames.JoinedStores``; a store's own read of a few blobs is the case of one store).

    Why one loop: a pretraining mixture's batch reads blobs of ~30 stores per camera, one or two of each, nearly all
    read for the first time in a long pass, and one loop serves one store and many alike. cProfile put the calls
    per store at a fifth of the batch, but its per-call overhead inflates them: without it, in one thread at 400
    components, a batch took 3.53 ms this way against 3.70 with a call per store (within the machine's noise). The
    check itself is the same: each blob's Blosc2 header read and compared
    with the bounds and decoded size its store's table gives, a disagreeing blob reported by its store's own error
    (damaged after the build when its checksum fails too; the file, episode, field and frame named).

    Args:
        stores: The ``EpisodeStore`` of each part.
        keys: Each part's field.
        owner: (n,) each blob's part.
        starts: (n,) absolute file offsets of the blobs in their stores.
        ends: (n,) their ends.
        expected: (n,) each blob's decoded size in bytes.
        frames: (n,) each blob's row in its store (:meth:`EpisodeStore.locate`), to name it (``None``: not named).
        sums: (n,) each blob's checksum (``None``: a blob that disagrees is not told apart as damaged after the
            build).

    Raises:
        StoreError: as :meth:`EpisodeStore.check_blobs`.
        CodecError: as :meth:`EpisodeStore.check_blobs`.
    """
    unpack = _HEADER_WORDS.unpack_from
    parts = owner.tolist()
    views = {p: stores[p]._view for p in set(parts)}
    for j, (p, s, e, x) in enumerate(zip(parts, starts.tolist(), ends.tolist(), expected.tolist())):
        buf = views[p]
        if e - s < _BLOSC_HEADER or e > len(buf) or unpack(buf, s)[1::2] != (x, e - s):
            one = slice(j, j + 1)
            stores[p]._bad_blob(
                keys[p],
                starts[one],
                ends[one],
                expected[one],
                0,
                None if frames is None else frames[one],
                None if sums is None else sums[one],
            )


def decode_across(stores, keys, served, decompress, owner, starts, ends, rows, sums, frames) -> None:
    """:meth:`EpisodeStore.decode_into` of blobs of several stores, in one loop: a mixture's joined read, as
    :func:`check_blobs_across`, and a store's own read as the case of one store.
    Each frame is decompressed into its row and then checked against its checksum, as a store's own read does.

    Args:
        stores: The ``EpisodeStore`` of each part.
        keys: Each part's field, to name a damaged frame.
        served: The output's ``frame_layout.ServedRows``.
        decompress: ``FrameCodec.decoder_into`` of the output (``shared=True``: mapped files).
        owner: Each blob's part (a list).
        starts: Blob start offsets (a list).
        ends: Blob end offsets (a list).
        rows: For each blob, its row of the output (a list).
        sums: Each blob's checksum (a list).
        frames: Each blob's row in its store, to name a damaged frame (``None``: named by its position in the read).

    Raises:
        StoreError: a frame does not match its checksum (or Blosc2 refused it); the message names the file, the
            episode, the field and the frame.
    """
    views = {p: stores[p]._view for p in set(owner)}
    for j, (p, s, e, r, c) in enumerate(zip(owner, starts, ends, rows, sums)):
        blob = views[p][s:e]
        try:
            decompress(blob, served.slot(r))
        except Exception as exc:  # noqa: BLE001 - Blosc2's RuntimeError names nothing: name the frame
            raise stores[p]._frame_error(keys[p], frames, j, blob, c, exc) from None
        if checksum(blob) != c:
            raise stores[p]._frame_error(keys[p], frames, j)
