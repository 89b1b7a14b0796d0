"""The JPEG frame store: how it writes a store directory, checks it, and reads frames back. Everything else (the
cache entry, the footprint check, serving both frameworks' samples, pickling for workers, ``close()``) is the SDK's
(``extend.frame_backend``).

A store directory holds ``frames.bin`` (every camera frame's JPEG, end to end), ``index.npz`` (the JPEG offsets
per camera field, and every other field's arrays, episodes end to end) and ``meta.json`` (fields, their dtype and
step shape, episode lengths, and the SHA-256 of the two data files). ``index.npz`` is read with
``allow_pickle=False``: a data file never runs code.

What a damaged or edited copy does: the store is built in a temporary directory renamed into place when complete,
so a killed build is never reused; on reuse both files are hashed against ``meta.json`` (:meth:`JpegStore.verify`)
and a mismatch rebuilds the store; every open checks ``frames.bin``'s size against the index, so a truncated file
is an error naming it, never frames from the wrong offsets.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg

from robo_loaders_plugin.extend import (
    DataSize,
    FieldInfo,
    Footprint,
    FrameSource,
    FrameStore,
    Options,
    SourceError,
    StoreEpisodes,
    atomic_write_bytes,
    sha256_file,
)

FORMAT = "robo-loaders-jpeg/1"


def is_jpeg_able(array: np.ndarray) -> bool:
    """uint8 frames of 1 or 3 channels, channels first (C, H, W) or last (H, W, C), per step."""
    return array.dtype == np.uint8 and array.ndim == 4 and (array.shape[-1] in (1, 3) or array.shape[1] in (1, 3))


class JpegStore(FrameStore):
    """Camera frames as JPEG at ``options.quality``, every other field raw."""

    kind = "jpeg-frames-1"  # names the cache entries; the 1 changes with the format of the files
    thread_safe = True  # reads through maps, decodes into each call's own arrays: several threads at once are fine

    def build(self, directory: str, episodes: StoreEpisodes, options: Options) -> None:
        positions: dict[str, list[tuple[int, int]]] = {}  # camera field -> (start, end) of each JPEG in frames.bin
        raw: dict[str, list[np.ndarray]] = {}
        fields: dict[str, dict] = {}
        raw_bytes = jpeg_bytes = 0
        with open(os.path.join(directory, "frames.bin"), "wb") as out:
            for name, arrays in episodes:
                for key, a in arrays.items():
                    a = np.ascontiguousarray(a)
                    jpeg = key in episodes.cameras and is_jpeg_able(a)
                    chw = jpeg and a.shape[1] in (1, 3) and a.shape[-1] not in (1, 3)
                    info = {
                        "dtype": a.dtype.str,
                        "shape": list(a.shape[1:]),
                        "camera": jpeg,
                        "layout": ("chw" if chw else "hwc") if jpeg else None,
                    }
                    if fields.setdefault(key, info) != info:
                        raise SourceError(
                            f"episode {name}: field {key!r} is {a.dtype}{a.shape[1:]}, other episodes "
                            f"store {fields[key]}; every episode must store a field the same way"
                        )
                    if not jpeg:
                        raw.setdefault(key, []).append(a)
                        continue
                    for frame in a:
                        blob = (
                            encode_jpeg(
                                torch.from_numpy(frame if chw else frame.transpose(2, 0, 1).copy()),
                                quality=options.quality,
                            )
                            .numpy()
                            .tobytes()
                        )
                        start = out.tell()
                        out.write(blob)
                        positions.setdefault(key, []).append((start, start + len(blob)))
                        raw_bytes += frame.nbytes
                        jpeg_bytes += len(blob)
            out.flush()
            os.fsync(out.fileno())
        cameras = sorted(k for k, v in fields.items() if v["camera"])
        arrays = {f"raw{i}": np.concatenate(raw[k]) for i, k in enumerate(sorted(raw))}
        arrays.update(
            {f"cam{i}": np.asarray(positions[k], dtype=np.int64).reshape(-1, 2) for i, k in enumerate(cameras)}
        )
        with open(os.path.join(directory, "index.npz"), "wb") as f:
            np.savez(f, **arrays)
        meta = {
            "format": FORMAT,
            "quality": options.quality,
            "lengths": episodes.size.lengths.tolist(),
            "fields": fields,
            "raw": sorted(raw),
            "cameras": cameras,
            "raw_frame_bytes": raw_bytes,
            "jpeg_bytes": jpeg_bytes,
            "sha256": {n: sha256_file(os.path.join(directory, n)) for n in ("frames.bin", "index.npz")},
        }
        atomic_write_bytes(os.path.join(directory, "meta.json"), json.dumps(meta, indent=1).encode())

    def open(self, directory: str, options: Options) -> FrameSource:
        return JpegFrames(directory)

    def verify(self, directory: str) -> bool:
        """Both data files hash to what ``meta.json`` recorded."""
        try:
            with open(os.path.join(directory, "meta.json")) as f:
                meta = json.load(f)
            return meta.get("format") == FORMAT and all(
                sha256_file(os.path.join(directory, n)) == digest for n, digest in meta["sha256"].items()
            )
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def footprint(self, size: DataSize, options: Options) -> Footprint:
        """RAM: the raw fields and two offsets per JPEG. Disk: a JPEG of quality 95 or less stays below a quarter
        of the raw frame on camera images (measured 6x smaller at 90); above, counted raw."""
        frames = size.steps * len(size.frame_step_bytes)
        return Footprint(
            host_bytes=size.other_bytes + 16 * frames,
            disk_bytes=size.frame_bytes // (4 if options.quality <= 95 else 1) + size.other_bytes,
            build_s=size.build_seconds("zstd", 1),
            bound="camera frames read from the cache directory and decoded per batch",
        )

    def describe(self, frames: FrameSource, directory: str) -> str:
        m = frames.meta
        ratio = m["raw_frame_bytes"] / m["jpeg_bytes"] if m["jpeg_bytes"] else float("nan")
        return (
            f"camera frames as JPEG q{m['quality']} ({m['raw_frame_bytes'] / 1e6:.1f} MB -> "
            f"{m['jpeg_bytes'] / 1e6:.1f} MB, {ratio:.1f}x)"
        )


class JpegFrames(FrameSource):
    """The frame source over a store directory: raw fields by one fancy index, camera frames decoded from JPEG
    (a repeated step in a window, as padding makes, is decoded once). It is never pickled: the SDK reopens the
    store by its directory in each DataLoader worker."""

    def __init__(self, directory: str):
        self.directory = directory
        with open(os.path.join(directory, "meta.json")) as f:
            self.meta = json.load(f)
        self.lengths = np.asarray(self.meta["lengths"], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        with np.load(os.path.join(directory, "index.npz"), allow_pickle=False) as index:
            self._raw = {k: index[f"raw{i}"] for i, k in enumerate(self.meta["raw"])}
            self._pos = {k: index[f"cam{i}"] for i, k in enumerate(self.meta["cameras"])}
        path = os.path.join(directory, "frames.bin")
        size = os.path.getsize(path)
        end = max((int(p[-1, 1]) for p in self._pos.values() if len(p)), default=0)
        if size != end:
            raise SourceError(
                f"{path} is {size} bytes, its index says {end}: truncated or replaced; delete {directory} to rebuild it"
            )
        self._blobs = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        self._infos = {
            k: FieldInfo(np.dtype(v["dtype"]), tuple(v["shape"]), v["camera"]) for k, v in self.meta["fields"].items()
        }

    def close(self) -> None:
        self._blobs = np.zeros(0, np.uint8)  # unmaps frames.bin

    def info(self, field: str) -> FieldInfo:
        try:
            return self._infos[field]
        except KeyError:
            raise KeyError(f"field {field!r} is not in {self.directory} (it has {sorted(self._infos)})") from None

    def take(self, field, episodes, steps, out):
        info = self.info(field)
        g = (
            self.starts[np.broadcast_to(episodes.reshape(episodes.shape + (1,) * (steps.ndim - 1)), steps.shape)]
            + steps
        ).reshape(-1)
        flat = out.reshape((g.size,) + tuple(info.shape))
        if not info.frames:
            np.take(self._raw[field], g, axis=0, out=flat)
            return
        unique, inverse = np.unique(g, return_inverse=True)
        blobs = [torch.from_numpy(np.array(self._blobs[s:e])) for s, e in self._pos[field][unique].tolist()]
        layout = self.meta["fields"][field]["layout"]
        channels = info.shape[0] if layout == "chw" else info.shape[-1]
        frames = torch.stack(decode_jpeg(blobs, mode=ImageReadMode.GRAY if channels == 1 else ImageReadMode.RGB))
        frames = frames.numpy()
        flat[...] = (frames.transpose(0, 2, 3, 1) if layout == "hwc" else frames)[inverse]
