"""Writing and reading robo-shards (docs/robo-shards.md).

Why tar: any tool can list, stream or extract it, and WebDataset-style readers group ``<ep>.<field>.<ext>``
members into records. Why an index beside it: training samples episodes at random, so a reader seeks straight to
an episode's members instead of scanning. Frames use the compressed cache's codec so both backends decode the same
way; everything else is JSON or ``.npy`` (never pickle).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from typing import Iterable, Mapping

import numpy as np

from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.codecs.frames import CodecError
from robo_loaders_plugin.spec import RoboLoadersError

FORMAT = "robo-shards"
VERSION = 1
DEFAULT_SHARD_BYTES = 256 * 2**20
_EP_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_MEMBER_RE = re.compile(r"^([A-Za-z0-9_-]+)\.([A-Za-z0-9_~.-]+)\.(json|npy|frames)$")


class ShardError(RoboLoadersError):
    pass


def _field_token(field: str) -> str:
    token = field.replace("/", "~")
    if not re.fullmatch(r"[A-Za-z0-9_~.-]+", token) or token.startswith(".") or ".." in token:
        raise ShardError(f"field name {field!r} cannot be stored in a shard member name")
    return token


def _atomic_json(path: str, payload) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ShardWriter:
    """Append episodes; shards roll over at ``shard_bytes``; ``close()`` publishes index.json and dataset.json."""

    def __init__(self, out_dir: str, codec: FrameCodec, metadata: Mapping, shard_bytes: int = DEFAULT_SHARD_BYTES,
                 shard_prefix: str = "shard"):
        self.out_dir = out_dir
        self.codec = codec
        self.metadata = dict(metadata)
        self.shard_bytes = int(shard_bytes)
        self.prefix = shard_prefix
        os.makedirs(os.path.join(out_dir, "shards"), exist_ok=True)
        self.episodes: list[dict] = []
        self.shards: list[dict] = []
        self._tar = None
        self._tmp = None
        self._name = None
        self._count = 0

    def _open_shard(self):
        self._name = f"shards/{self.prefix}-{len(self.shards):06d}.tar"
        self._tmp = os.path.join(self.out_dir, f"{self._name}.tmp-{os.getpid()}")
        self._file = open(self._tmp, "wb")
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.PAX_FORMAT)
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
        self.shards.append({"name": self._name, "bytes": os.path.getsize(final), "sha256": _sha256(final),
                            "members": self._count})
        self._tar = None

    def _add(self, name: str, data: bytes) -> dict:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self._count += 1
        padded = -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        return {"offset": self._tar.offset - padded, "size": len(data)}  # where the member's data starts

    def add_episode(self, name: str, fields: Mapping[str, np.ndarray], compressed: Iterable[str] = ()) -> None:
        if not _EP_RE.match(name):
            raise ShardError(f"episode name {name!r} must match [A-Za-z0-9_-]+")
        compressed = set(compressed)
        payloads, header = {}, {"name": name, "length": None, "fields": {}}
        for field, arr in fields.items():
            arr = np.ascontiguousarray(arr)
            if arr.dtype.hasobject:
                raise ShardError(f"episode {name}: field {field!r} has an object dtype (it would need pickle)")
            header["length"] = header["length"] if header["length"] is not None else int(arr.shape[0])
            token = _field_token(field)
            desc = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
            if field in compressed:
                blobs = [self.codec.compress(arr[i]) for i in range(arr.shape[0])]
                desc.update(kind="frames", member=f"{name}.{token}.frames", codec=self.codec.as_dict(),
                            offsets=np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).tolist())
                payloads[desc["member"]] = b"".join(blobs)
            else:
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                desc.update(kind="raw", member=f"{name}.{token}.npy")
                payloads[desc["member"]] = buf.getvalue()
            header["fields"][field] = desc
        hdr = json.dumps(header, sort_keys=True).encode()
        size = len(hdr) + sum(len(p) for p in payloads.values())
        if self._tar is not None and self._count and self._file.tell() + size > self.shard_bytes:
            self._close_shard()
        if self._tar is None:
            self._open_shard()
        members = {f"{name}.header.json": self._add(f"{name}.header.json", hdr)}
        for member, data in payloads.items():
            members[member] = self._add(member, data)
        self.episodes.append({"name": name, "shard": self._name, "length": header["length"], "members": members})

    def finish_shards(self) -> tuple[list[dict], list[dict]]:
        """Close the open shard; return (episode entries, shard entries) without publishing an index (a
        parallel converter publishes once every work unit is done)."""
        self._close_shard()
        return self.episodes, self.shards

    def close(self, source: Mapping | None = None) -> None:
        episodes, shards = self.finish_shards()
        publish(self.out_dir, episodes, shards, self.codec, self.metadata, source)

    def abort(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._file.close()
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)
            self._tar = None


def publish(out_dir: str, episodes: list[dict], shards: list[dict], codec: FrameCodec, metadata: Mapping,
            source: Mapping | None = None) -> None:
    """Write index.json then dataset.json, atomically, once every listed shard exists."""
    for s in shards:
        if not os.path.exists(os.path.join(out_dir, s["name"])):
            raise ShardError(f"{out_dir}: cannot publish, {s['name']} does not exist")
    _atomic_json(os.path.join(out_dir, "index.json"),
                 {"format": FORMAT, "version": VERSION, "episodes": episodes, "shards": shards})
    _atomic_json(os.path.join(out_dir, "dataset.json"),
                 {"format": FORMAT, "version": VERSION, "codec": codec.as_dict(), "metadata": dict(metadata),
                  "source": dict(source or {})})


class EncodedFrames:
    """One frames member still compressed. Why: a LeRobot sample uses each camera frame about once per pass,
    so decoding a whole episode up front would only multiply the memory of an episode buffer by the
    compression ratio; frames are decompressed when a batch needs them, like the compressed cache does."""

    def __init__(self, data: bytes, offsets: np.ndarray, dtype: np.dtype, shape: tuple, where: str):
        self.data = np.frombuffer(data, dtype=np.uint8)
        self.offsets, self.dtype, self.shape, self.where = offsets, dtype, shape, where

    @classmethod
    def from_member(cls, data: bytes, desc: dict, where: str) -> "EncodedFrames":
        offsets = np.asarray(desc["offsets"], dtype=np.int64)
        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
        if len(offsets) != shape[0] + 1 or offsets[-1] != len(data) or np.any(np.diff(offsets) <= 0):
            raise ShardError(f"{where}: frame table does not match its data")
        frames = cls(data, offsets, dtype, shape, where)
        nbytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        try:
            for j in range(shape[0]):  # header checks only (cheap): the hot path then decodes unchecked
                FrameCodec.check_size(frames.data[offsets[j]:offsets[j + 1]], nbytes, f"{where} frame {j}")
        except CodecError as exc:
            raise ShardError(str(exc)) from None
        return frames

    def __len__(self) -> int:
        return self.shape[0]

    def decode_into(self, indices, out: np.ndarray, out_rows=None) -> None:
        """Frame ``indices[j]`` into ``out[out_rows[j]]`` (``out[j]`` by default)."""
        data, offs = self.data, self.offsets
        decompress = FrameCodec.decompress_into_unchecked
        for j, i in zip(range(len(indices)) if out_rows is None else out_rows, indices):
            decompress(data[offs[i]:offs[i + 1]], out[j])

    def decode_all(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        self.decode_into(range(self.shape[0]), out)
        return out


class ShardReader:
    """Random access to a robo-shards directory; validates names and offsets against hostile or damaged input."""

    def __init__(self, out_dir: str):
        self.dir = out_dir
        for required in ("index.json", "dataset.json"):
            if not os.path.exists(os.path.join(out_dir, required)):
                raise ShardError(f"{out_dir}: {required} is missing; not a complete robo-shards dataset "
                                 "(an interrupted conversion leaves no index)")
        with open(os.path.join(out_dir, "index.json")) as f:
            self.index = json.load(f)
        with open(os.path.join(out_dir, "dataset.json")) as f:
            self.dataset = json.load(f)
        for doc in (self.index, self.dataset):
            if doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise ShardError(f"{out_dir}: not {FORMAT} version {VERSION} (found {doc.get('format')!r} "
                                 f"{doc.get('version')!r})")
        self.shards = {s["name"]: s for s in self.index["shards"]}
        self.episodes = self.index["episodes"]
        self.by_name = {e["name"]: i for i, e in enumerate(self.episodes)}
        for s in self.shards.values():
            self._shard_path(s["name"])  # validates every shard name up front

    def _shard_path(self, name: str) -> str:
        if os.path.isabs(name) or ".." in name.split("/") or not re.fullmatch(r"shards/[A-Za-z0-9_-]+\.tar", name):
            raise ShardError(f"{self.dir}: refusing shard path {name!r} (outside the dataset directory)")
        return os.path.join(self.dir, name)

    def _check_member(self, ep: dict, member: str) -> dict:
        m = _MEMBER_RE.match(member)
        if not m or m.group(1) != ep["name"]:
            raise ShardError(f"{self.dir}: episode {ep['name']!r} has a bad member name {member!r}")
        loc = ep["members"].get(member)
        shard = self.shards.get(ep["shard"])
        if loc is None or shard is None or loc["offset"] < 0 or loc["offset"] + loc["size"] > shard["bytes"]:
            raise ShardError(f"{self.dir}: member {member!r} of episode {ep['name']!r} lies outside "
                             f"{ep['shard']} (truncated shard or corrupt index)")
        return loc

    def _read(self, f, ep: dict, member: str) -> bytes:
        loc = self._check_member(ep, member)
        f.seek(loc["offset"])
        data = f.read(loc["size"])
        if len(data) != loc["size"]:
            raise ShardError(f"{self.dir}: {ep['shard']} is truncated (member {member!r})")
        return data

    def read_episode(self, i: int, decode_frames: bool = True, fields=None) -> tuple[dict, dict]:
        """(header, {field: array}); frames fields decompressed into one (N, ...) array each, or with
        ``decode_frames=False`` kept compressed as :class:`EncodedFrames` (checked, decoded on demand).
        ``fields``: read only these (those the episode has), so a loader skips members no sample uses."""
        ep = self.episodes[i]
        path = self._shard_path(ep["shard"])
        if os.path.getsize(path) != self.shards[ep["shard"]]["bytes"]:
            raise ShardError(f"{path}: size {os.path.getsize(path)} differs from the index "
                             f"({self.shards[ep['shard']]['bytes']}); truncated or replaced")
        with open(path, "rb") as f:
            header = json.loads(self._read(f, ep, f"{ep['name']}.header.json"))
            out = {}
            wanted = header["fields"] if fields is None else [k for k in fields if k in header["fields"]]
            for field in wanted:
                d = header["fields"][field]
                data = self._read(f, ep, d["member"])
                if d["kind"] == "raw":
                    out[field] = np.load(io.BytesIO(data), allow_pickle=False)
                elif d["kind"] == "frames":
                    frames = EncodedFrames.from_member(data, d, f"{path}: {d['member']}")
                    out[field] = frames.decode_all() if decode_frames else frames
                else:
                    raise ShardError(f"{path}: unknown field kind {d['kind']!r} in {ep['name']}")
        return header, out

    def verify(self) -> list[str]:
        """Check every shard's size and SHA-256 and that every episode decodes; returns the problems found."""
        problems = []
        for s in self.shards.values():
            path = self._shard_path(s["name"])
            if not os.path.exists(path):
                problems.append(f"{path}: missing")
            elif os.path.getsize(path) != s["bytes"]:
                problems.append(f"{path}: {os.path.getsize(path)} bytes, index says {s['bytes']}")
            elif _sha256(path) != s["sha256"]:
                problems.append(f"{path}: SHA-256 mismatch")
        if not problems:
            for i in range(len(self.episodes)):
                try:
                    self.read_episode(i)
                except (ShardError, ValueError, OSError) as exc:
                    problems.append(str(exc))
        return problems
