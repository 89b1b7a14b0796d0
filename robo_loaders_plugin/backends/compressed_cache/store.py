"""The episode store: one file holding every episode's arrays, frames compressed one by one.

Why one file: a file mapped read-only is shared by every process that maps it (DataLoader workers started by
fork *or* spawn all see the same page-cache pages), so the cache exists once in RAM however many workers run,
and a dataset pickles as a path. Without ``cache_dir`` the file lives in ``/dev/shm`` (RAM) and is deleted when
the process that built it exits; with ``cache_dir`` it persists and is reused when its fingerprint matches.

Layout (little-endian)::

    b"RLPSTORE" | data region (arrays and frame blobs, 64-byte aligned) | JSON header | u64 header offset |
    u64 header length | u32 crc32 of header | b"RLPSTEND"

The header lists, per episode and field, either a raw array (dtype, shape, offset) or a frame table (dtype,
frame shape, offset of an int64 table of N+1 blob offsets). No pickle anywhere.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import threading
import zlib
from typing import Iterable, Mapping

import numpy as np

from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.codecs.frames import use_single_thread
from robo_loaders_plugin.spec import RoboLoadersError
from robo_loaders_plugin.units import format_bytes

MAGIC = b"RLPSTORE"
END_MAGIC = b"RLPSTEND"
FORMAT_VERSION = 1
_FOOTER = struct.Struct("<QQI8s")
_ALIGN = 64


class StoreError(RoboLoadersError):
    pass


class MemoryBudgetExceeded(StoreError):
    pass


def default_shm_dir() -> str:
    """RAM-backed directory for caches that do not persist (falls back to the temp dir)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


class StoreWriter:
    """Streams episodes into a temporary file and publishes it atomically with :meth:`finish`."""

    def __init__(self, path: str, codec: FrameCodec, max_bytes: int | None = None, workers: int = 1):
        self.path = path
        self.codec = codec
        self.max_bytes = max_bytes
        self._tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._f = open(self._tmp, "wb")
        self._crc = 0
        self._emit(MAGIC)
        self._pos = len(MAGIC)
        self._episodes: list[dict] = []
        self.raw_nbytes = 0
        self.compressed_nbytes = 0
        self.decoded_frame_nbytes = 0
        self._pool = None
        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(workers)

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
        mv = memoryview(data).cast("B")
        self._emit(mv)
        self._pos += mv.nbytes
        self._check_budget()
        return off

    def _check_budget(self):
        if self.max_bytes is not None and self._pos > self.max_bytes:
            raise MemoryBudgetExceeded(
                f"the compressed cache needs more than max_memory={format_bytes(self.max_bytes)} "
                f"(already {format_bytes(self._pos)} after {len(self._episodes)} episodes); raise max_memory, "
                "select fewer obs keys or demos, or choose a stronger codec (codec='zstd')")

    def add_episode(self, name: str, fields: Mapping[str, np.ndarray], compressed: Iterable[str] = ()) -> None:
        compressed = set(compressed)
        entry = {"name": name, "length": None, "fields": {}}
        for key, arr in fields.items():
            arr = np.ascontiguousarray(arr)
            if arr.ndim == 0:
                raise StoreError(f"episode {name!r}: field {key!r} is a scalar, expected one row per step")
            if entry["length"] is None:
                entry["length"] = int(arr.shape[0])
            desc = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
            if key in compressed:
                frames = [arr[i] for i in range(arr.shape[0])]
                blobs = list(self._pool.map(self.codec.compress, frames)) if self._pool else \
                    [self.codec.compress(f) for f in frames]
                offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
                self._align()
                start = self._pos
                for i, blob in enumerate(blobs):
                    offsets[i] = self._pos - start
                    self._emit(blob)
                    self._pos += len(blob)
                offsets[-1] = self._pos - start
                self._check_budget()
                desc.update(kind="frames", offset=start, table=self._write(offsets))
                self.compressed_nbytes += int(offsets[-1])
                self.decoded_frame_nbytes += arr.nbytes
            else:
                desc.update(kind="raw", offset=self._write(arr))
                self.raw_nbytes += arr.nbytes
            entry["fields"][key] = desc
        self._episodes.append(entry)

    def finish(self, meta: Mapping) -> str:
        self._align()
        hoff = self._pos
        header = json.dumps({"format": FORMAT_VERSION, "codec": self.codec.as_dict(), "meta": dict(meta),
                             "episodes": self._episodes, "data_crc32": self._crc, "data_nbytes": hoff,
                             "stats": {"raw_nbytes": self.raw_nbytes, "compressed_nbytes": self.compressed_nbytes,
                                       "decoded_frame_nbytes": self.decoded_frame_nbytes}},
                            sort_keys=True).encode()
        self._f.write(header)
        self._f.write(_FOOTER.pack(hoff, len(header), zlib.crc32(header), END_MAGIC))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self._close_pool()
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        self._close_pool()
        try:
            self._f.close()
        finally:
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)

    def _close_pool(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class EpisodeStore:
    """Read-only view of a store file; pickles as its path and re-maps lazily in each process."""

    def __init__(self, path: str):
        self.path = path
        self._mm = None
        self._buf = None
        self._open()

    def _open(self):
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
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
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise StoreError(f"cache file {self.path} is gone (deleted while the dataset was in use?)") from None
        self.header = json.loads(header)
        if self.header.get("format") != FORMAT_VERSION:
            raise StoreError(f"{self.path}: cache format {self.header.get('format')} is not {FORMAT_VERSION}; "
                             "delete it and it will be rebuilt")
        self._buf = np.frombuffer(self._mm, dtype=np.uint8)
        self.episodes = self.header["episodes"]
        self.meta = self.header["meta"]
        self.stats = self.header["stats"]
        self.file_nbytes = size
        self._tables: dict[tuple[int, str], np.ndarray] = {}
        use_single_thread()

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])

    def close(self):
        self._buf = None
        self._tables = {}
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # views still alive; the mapping goes with them
                pass
            self._mm = None

    def verify(self) -> None:
        """Check the data region's CRC32 (one sequential read): a persisted cache is trusted only after this."""
        crc, n = 0, int(self.header.get("data_nbytes", -1))
        if n < 0 or "data_crc32" not in self.header:
            raise StoreError(f"{self.path}: no data checksum in the header")
        view = memoryview(self._mm)
        for off in range(0, n, 1 << 24):
            crc = zlib.crc32(view[off:min(n, off + (1 << 24))], crc)
        view.release()
        if crc != self.header["data_crc32"]:
            raise StoreError(f"{self.path}: corrupt cache file (data checksum mismatch)")

    def field(self, ep: int, key: str) -> dict:
        try:
            return self.episodes[ep]["fields"][key]
        except KeyError:
            raise StoreError(f"{self.path}: episode {self.episodes[ep]['name']!r} has no field {key!r}") from None

    def raw(self, ep: int, key: str) -> np.ndarray:
        """Zero-copy read-only view of a raw field."""
        d = self.field(ep, key)
        dt = np.dtype(d["dtype"])
        n = int(np.prod(d["shape"])) * dt.itemsize
        return self._buf[d["offset"]:d["offset"] + n].view(dt).reshape(d["shape"])

    def _table(self, ep: int, key: str, d: dict) -> np.ndarray:
        t = self._tables.get((ep, key))
        if t is None:
            n = d["shape"][0] + 1
            t = self._buf[d["table"]:d["table"] + 8 * n].view(np.int64)
            self._tables[(ep, key)] = t
        return t

    def blob_bounds(self, key: str, episodes=None) -> tuple[np.ndarray, np.ndarray]:
        """Absolute (start, end) file offsets of every frame blob of ``key`` in ``episodes`` (default: all), in
        that order, so a batch's blobs are located with one vectorised index. Checks each blob's declared size
        once, here, so the hot path can skip it."""
        starts, ends = [], []
        for ep in (range(len(self.episodes)) if episodes is None else episodes):
            d = self.field(ep, key)
            table = self._table(ep, key, d)
            starts.append(d["offset"] + table[:-1])
            ends.append(d["offset"] + table[1:])
            frame_nbytes = int(np.prod(d["shape"][1:])) * np.dtype(d["dtype"]).itemsize
            for s, e in zip(starts[-1].tolist(), ends[-1].tolist()):
                FrameCodec.check_size(self._buf[s:e], frame_nbytes, where=f"{self.path}: {key}")
        return np.concatenate(starts), np.concatenate(ends)

    def decode_frames(self, starts, ends, out: np.ndarray, rows) -> None:
        """Decompress blob ``[starts[j], ends[j])`` into ``out[rows[j]]`` (bounds from :meth:`blob_bounds`)."""
        buf = self._buf
        decompress = FrameCodec.decompress_into_unchecked
        for s, e, r in zip(starts, ends, rows):
            decompress(buf[s:e], out[r])

    def frame_info(self, ep: int, key: str) -> tuple[np.dtype, tuple, bool]:
        d = self.field(ep, key)
        return np.dtype(d["dtype"]), tuple(d["shape"][1:]), d["kind"] == "frames"
