"""Writing robo-shards: :class:`ShardWriter` appends episodes to tar shards, :func:`publish` writes the index.

Why everything goes through a temporary file: a shard is written to ``<name>.tmp-<pid>``, fsynced and renamed, and
the index is published only once its shards exist, so a killed or failed writer never leaves anything a reader
would take for data. A failed writer removes its temporary file (:meth:`ShardWriter.abort`); a full disk becomes a
:class:`ShardError` saying how much space is free and needed instead of an ``OSError`` and a disk left full.
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import os
import tarfile
import zlib
from collections.abc import Iterable, Mapping

import numpy as np

from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.storage import frame_layout
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.integrity import with_checksum
from robo_loaders_plugin.storage.shards.format import (
    DEFAULT_SHARD_BYTES,
    EP_RE,
    FORMAT,
    VERSION,
    ShardError,
    _atomic_json,
    _sha256,
    disk_full_error,
    header_member,
    listed_episodes,
    listing_problems,
    member_name,
    part_bounds,
    part_member,
)
from robo_loaders_plugin.storage.video import VideoSegment


class ShardWriter:
    """Append episodes; shards roll over at ``shard_bytes``; ``close()`` publishes index.json and dataset.json."""

    def __init__(
        self,
        out_dir: str,
        codec: FrameCodec,
        metadata: Mapping,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        shard_prefix: str = "shard",
    ):
        self.out_dir = out_dir
        self.codec = codec
        self.metadata = dict(metadata)
        self.shard_bytes = int(shard_bytes)
        self.prefix = shard_prefix
        os.makedirs(os.path.join(out_dir, "shards"), exist_ok=True)
        self.episodes: list[dict] = []
        self.shards: list[dict] = []
        self._tar = None
        self._file = None
        self._tmp = None
        self._name = None
        self._count = 0
        from robo_loaders_plugin.core.footprint import DiskGuard

        # a conversion stops before the disk falls below its reserve (the estimate assumed a compression ratio)
        self.guard = DiskGuard(
            out_dir,
            f"converting into {out_dir}",
            leftover="The shard being written is removed; completed work units are kept, so "
            "the same command resumes once there is room.",
        )

    def _open_shard(self):
        self._name = f"shards/{self.prefix}-{len(self.shards):06d}.tar"
        self._tmp = os.path.join(self.out_dir, f"{self._name}.tmp-{os.getpid()}")
        # both stay open while members are added; _close_shard closes them
        self._file = open(self._tmp, "wb")  # noqa: SIM115
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self._count = 0

    def _close_shard(self):
        if self._tar is None:
            return
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = os.path.join(self.out_dir, self._name)
        os.replace(self._tmp, final)
        self.shards.append(
            {"name": self._name, "bytes": os.path.getsize(final), "sha256": _sha256(final), "members": self._count}
        )
        self._tar = self._file = self._tmp = None

    def _add(self, name: str, data: bytes) -> dict:
        info = tarfile.TarInfo(name)  # a regular file, never a link or a path: see verify()
        info.size = len(data)
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self._count += 1
        padded = -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        # where the member's data starts, and its CRC32, checked on every read
        return {"offset": self._tar.offset - padded, "size": len(data), "crc32": zlib.crc32(data)}

    @contextlib.contextmanager
    def _writing(self, doing: str, pending: int):
        """Any OSError while writing leaves a broken shard: remove it, and say clearly what happened."""
        try:
            yield
        except OSError as exc:
            written = 0
            with contextlib.suppress(Exception):  # the file may be past saying
                written = self._file.tell()
            where = self._tmp or self.out_dir
            self.abort()
            err = disk_full_error(
                self.out_dir, exc, f"the shard being written needs at least {format_bytes(written + pending)}", doing
            )
            raise (err or ShardError(f"{where}: cannot write ({exc}) while {doing}")) from exc

    def add_episode(self, name: str, fields: Mapping[str, np.ndarray], compressed: Iterable[str] = ()) -> None:
        """Append one episode as one record: a JSON header member, then one member per field; the shard rolls over
        first when the record would take it past ``shard_bytes`` (a record is never split across shards).

        Args:
            name: The episode's name (``[A-Za-z0-9_-]+``), unique in the dataset.
            fields: ``{field: array with one row per step}`` (stored as ``.npy`` members, or as lossless frames when
                named in ``compressed``), or already encoded
                :class:`~robo_loaders_plugin.storage.video.VideoSegment` s, stored as ``.mp4`` video members.
            compressed: The array fields stored as lossless compressed frames (camera frames). A long episode's
                frames members are cut into parts (``format.part_bounds``), listed in the field's ``parts``;
                channels-first frames are stored channels last (``storage.frame_layout``: they pack better), the
                field's ``layout`` says so.

        Raises:
            ShardError: a bad name, no fields, a field with an object dtype, a scalar, another number of rows than
                the first field, a field needing ``.npy`` format 3.0, or a write failed (a full disk says how much
                is needed; the shard being written is removed).
            core.footprint.ResourceRefused: the disk would fall below its reserve.
        """
        if not isinstance(name, str) or not EP_RE.match(name):
            raise ShardError(f"episode name {name!r} must match [A-Za-z0-9_-]+")
        if not fields:
            raise ShardError(f"episode {name}: no fields to write")
        compressed = set(compressed)
        payloads, header = {}, {"name": name, "length": None, "fields": {}}
        frame_rows = [np.asarray(a) for k, a in fields.items() if k in compressed and not isinstance(a, VideoSegment)]
        bounds = (
            part_bounds(len(frame_rows[0]), sum(a[0].nbytes for a in frame_rows if len(a)))
            if frame_rows and all(a.ndim and len(a) == len(frame_rows[0]) for a in frame_rows)
            else None
        )
        for field, arr in fields.items():
            if isinstance(arr, VideoSegment):  # encoded by the converter (it knows the codec settings)
                desc = video_desc(name, field, arr)
                if header["length"] is None:
                    header["length"] = desc["shape"][0]
                elif desc["shape"][0] != header["length"]:
                    raise ShardError(
                        f"episode {name}: video field {field!r} has {desc['shape'][0]} frames, the "
                        f"episode has {header['length']} steps"
                    )
                payloads[desc["member"]] = arr.data
                header["fields"][field] = desc
                continue
            arr = np.asarray(arr)
            if arr.dtype.hasobject:
                raise ShardError(f"episode {name}: field {field!r} has an object dtype (it would need pickle)")
            if arr.ndim == 0:
                raise ShardError(f"episode {name}: field {field!r} is a scalar; every field needs one row per step")
            arr = np.ascontiguousarray(arr)
            if header["length"] is None:
                header["length"] = int(arr.shape[0])
            elif arr.shape[0] != header["length"]:
                raise ShardError(
                    f"episode {name}: field {field!r} has {arr.shape[0]} rows, the episode has "
                    f"{header['length']} (from its first field); every field needs one row per step"
                )
            kind = "frames" if field in compressed else "raw"
            desc = {
                "kind": kind,
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "member": member_name(name, field, kind),
            }
            if kind == "frames":
                layout = frame_layout.stored_layout(arr.shape[1:])
                blobs = [self.codec.compress(frame_layout.to_stored(arr[i], layout)) for i in range(arr.shape[0])]
                desc.update(codec=self.codec.as_dict(), offsets=list(itertools.accumulate(map(len, blobs), initial=0)))
                if layout is not None:
                    desc["layout"] = layout
                if bounds is None:
                    payloads[desc["member"]] = b"".join(blobs)
                else:  # a long episode: parts a reader of some rows reads and checks alone (format.part_bounds)
                    desc["parts"] = bounds
                    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
                        payloads[part_member(desc["member"], k)] = b"".join(blobs[a:b])
            else:
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                if buf.getbuffer()[6:8].tobytes() not in (b"\x01\x00", b"\x02\x00"):
                    raise ShardError(
                        f"episode {name}: field {field!r} (dtype {arr.dtype}) needs .npy format 3.0, "
                        "which robo-shards does not read; rename its non-Latin-1 field names"
                    )
                payloads[desc["member"]] = buf.getvalue()
            header["fields"][field] = desc
        if len(payloads) != sum(len(d.get("parts") or [0, 0]) - 1 for d in header["fields"].values()):
            raise ShardError(
                f"episode {name}: two fields would be stored under the same member name (a field named "
                "like another field's part); rename one"
            )
        hdr = json.dumps(header, sort_keys=True).encode()
        size = len(hdr) + sum(len(p) for p in payloads.values())
        self.guard.check(size + 2 * tarfile.BLOCKSIZE * (len(payloads) + 1), self._written())
        with self._writing(f"writing episode {name}", size):
            if self._tar is not None and self._count and self._file.tell() + size > self.shard_bytes:
                self._close_shard()
            if self._tar is None:
                self._open_shard()
            members = {header_member(name): self._add(header_member(name), hdr)}
            for member, data in payloads.items():
                members[member] = self._add(member, data)
        self.episodes.append({"name": name, "shard": self._name, "length": header["length"], "members": members})

    def _written(self) -> int:
        """Bytes this writer has put on disk so far (closed shards and the open one)."""
        now = 0
        with contextlib.suppress(Exception):
            now = self._file.tell() if self._file is not None else 0
        return sum(s["bytes"] for s in self.shards) + now

    def finish_shards(self) -> tuple[list[dict], list[dict]]:
        """Close the open shard; return (episode entries, shard entries) without publishing an index (a
        parallel converter publishes once every work unit is done)."""
        with self._writing(f"closing {self._name}", 2 * tarfile.RECORDSIZE):
            self._close_shard()
        return self.episodes, self.shards

    def close(self, source: Mapping | None = None) -> None:
        """Close the open shard and publish ``index.json`` and ``dataset.json`` (:func:`publish`); on any error the
        shard being written is dropped (:meth:`abort`) and the error raised.

        Args:
            source: What ``dataset.json`` records of the source (its path and fingerprint; ``None``: nothing).

        Raises:
            ShardError: the shard cannot be closed, or the index cannot be published.
        """
        try:
            episodes, shards = self.finish_shards()
            publish(self.out_dir, episodes, shards, self.codec, self.metadata, source)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the shard being written. Never raises: it runs on error paths (a full disk makes closing the
        file fail too), and the temporary file must go whatever happens, or it keeps the disk full."""
        file, tmp = self._file, self._tmp
        self._tar = self._file = self._tmp = None  # not tar.close(): that would write the end-of-archive blocks
        if file is not None:
            with contextlib.suppress(Exception):
                file.close()  # closes the descriptor even when flushing the buffer fails
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def video_desc(episode: str, field: str, segment: VideoSegment) -> dict:
    """A video field's header entry: what the reader needs to decode and check it, and the loss measured when it
    was encoded (``mse`` against the source, so reports need not decode anything).

    Args:
        episode: The episode's name.
        field: The field's name.
        segment: The encoded segment.

    Returns:
        ``kind`` (``video``), ``dtype`` (uint8), ``shape``, ``member``, ``video`` (the settings) and ``mse`` (per
        value).
    """
    return {
        "kind": "video",
        "dtype": np.dtype(np.uint8).str,
        "shape": list(segment.shape),
        "member": member_name(episode, field, "video"),
        "video": segment.settings.as_dict(),
        "mse": segment.sse / max(1, segment.values),
    }


def publish(
    out_dir: str,
    episodes: list[dict],
    shards: list[dict],
    codec: FrameCodec,
    metadata: Mapping,
    source: Mapping | None = None,
) -> None:
    """Write index.json then dataset.json, atomically and checksummed, once every listed shard exists with its
    recorded size and the episodes are exactly those the metadata lists (each once): a reader never finds an index
    that names missing or partial data.

    Args:
        out_dir: The robo-shards directory.
        episodes: Every episode's entry (name, shard, length, members), in dataset order.
        shards: Every shard's entry (name, bytes, sha256, members).
        codec: The lossless frame codec, recorded in ``dataset.json``.
        metadata: The dataset's metadata (framework, its own metadata, the episodes it lists).
        source: What is recorded of the source (path and fingerprint; ``None``: nothing).

    Raises:
        ShardError: a shard is missing or has another size, an episode is listed twice or names a shard not
            listed, or the episodes differ from those the metadata lists.
    """
    problems = []
    for s in shards:
        path = os.path.join(out_dir, s["name"])
        if not os.path.exists(path):
            problems.append(f"{s['name']} does not exist")
        elif os.path.getsize(path) != s["bytes"]:
            problems.append(f"{s['name']} has {os.path.getsize(path)} bytes, not {s['bytes']}")
    names = [e["name"] for e in episodes]
    twice = sorted(n for n, count in collections.Counter(names).items() if count > 1)
    if twice:
        problems.append(f"episode(s) {twice[:5]} would be listed twice")
    shard_names = {s["name"] for s in shards}
    problems += [
        f"episode {e['name']} is in {e['shard']}, which is not among the shards"
        for e in episodes
        if e["shard"] not in shard_names
    ][:5]
    problems += listing_problems(names, listed_episodes(dict(metadata)), out_dir)
    if problems:
        raise ShardError(f"{out_dir}: cannot publish: {'; '.join(problems)}")
    _atomic_json(
        os.path.join(out_dir, "index.json"),
        with_checksum({"format": FORMAT, "version": VERSION, "episodes": episodes, "shards": shards}),
    )
    _atomic_json(
        os.path.join(out_dir, "dataset.json"),
        with_checksum(
            {
                "format": FORMAT,
                "version": VERSION,
                "codec": codec.as_dict(),
                "metadata": dict(metadata),
                "source": dict(source or {}),
            }
        ),
    )
