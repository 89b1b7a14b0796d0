"""``robo-loaders convert lerobot ROOT OUT_DIR``: a LeRobot v3 dataset as robo-shards.

Why decode at conversion: video decoding is what LeRobot training waits on. Every camera frame is decoded once,
with the same torchcodec calls and tolerance check as ``LeRobotDataset`` (``lerobot.source``), and stored
losslessly, so a sample built from the shards is byte-identical to ``LeRobotDataset[i]``. One record per episode:
its tabular columns (in the dtypes LeRobot's transform produces) as ``.npy`` members and each camera as a frames
member; ``dataset.json`` carries ``meta/info.json``, ``meta/stats.json``, the task strings and the episode table.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.build import fingerprint
from robo_loaders_plugin.backends.shards import convert as units
from robo_loaders_plugin.backends.shards.format import DEFAULT_SHARD_BYTES, ShardReader
from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.lerobot.factories import check_supported, episode_runs
from robo_loaders_plugin.lerobot.source import EpisodeVideoReader, LeRobotSourceError, arrow_table, \
    column_arrays, decode_png_column

DEFAULT_TOLERANCE_S = 1e-4  # TrainPipelineConfig.tolerance_s


def open_native(root, repo_id: str | None = None, tolerance_s: float = DEFAULT_TOLERANCE_S):
    """The plain LeRobotDataset of ``root`` (no windows, uint8 frames), read from disk only."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(root)
    if not (root / "meta" / "info.json").exists():
        raise LeRobotSourceError(f"{root}: meta/info.json not found; not a LeRobot v3 dataset root")
    return LeRobotDataset(repo_id or f"local/{root.name}", root=root, tolerance_s=tolerance_s,
                          video_backend="torchcodec", return_uint8=True)


def source_files(root) -> list:
    """(relative path, size) of every file of the dataset: what must match between a dataset and its shards.
    Sizes, not mtimes, so a copied dataset still matches its shards."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            out.append([os.path.relpath(p, root), os.path.getsize(p)])
    return sorted(out)


class EpisodeSource:
    """Everything needed to produce one episode's record, built once per converting process."""

    def __init__(self, native):
        check_supported(native)
        self.native = native
        meta = native.meta
        hf = native.hf_dataset
        self.columns = list(hf.features)
        self.image_keys = [k for k in meta.image_keys if k in self.columns]
        self.video_keys = list(meta.video_keys)
        self.table = arrow_table(hf)
        self.arrays = column_arrays(self.table, [c for c in self.columns if c not in self.image_keys], hf[0])
        self.runs = {ep: (s, e) for ep, s, e in episode_runs(self.arrays["episode_index"], meta)}
        for ep, (s, e) in self.runs.items():
            first = int(meta.episodes[ep]["dataset_from_index"])
            if not np.array_equal(self.arrays["index"][s:e], np.arange(first, first + e - s)):
                raise LeRobotSourceError(f"{native.root}: episode {ep}: the 'index' column is not "
                                         f"{first}..{first + e - s - 1}; the dataset is inconsistent")
        self.videos = EpisodeVideoReader(Path(native.root), meta, native.reader._tolerance_s)

    def frame_bytes(self, ep: int) -> int:
        s, e = self.runs[ep]
        feats = self.native.meta.features
        per_frame = sum(int(np.prod(feats[k]["shape"])) for k in self.video_keys + self.image_keys)
        return (e - s) * per_frame

    def read(self, name: str) -> tuple[dict, set]:
        ep = int(name.rsplit("_", 1)[1])
        s, e = self.runs[ep]
        fields = {k: a[s:e] for k, a in self.arrays.items()}
        cameras = {}
        for key in self.video_keys:
            cameras[key] = self.videos.episode_frames(ep, key, self.arrays["timestamp"][s:e])
        for key in self.image_keys:
            cameras[key] = decode_png_column(self.table, key, slice(s, e))
        fields.update(cameras)
        return fields, set(cameras)


def _metadata(src: EpisodeSource) -> dict:
    native, meta = src.native, src.native.meta
    root = Path(native.root)
    stats_path = root / "meta" / "stats.json"
    from importlib.metadata import version

    return {
        "framework": "lerobot",
        "lerobot_version": version("lerobot"),
        "repo_id": native.repo_id,
        "info": json.loads((root / "meta" / "info.json").read_text()),
        "stats": json.loads(stats_path.read_text()) if stats_path.exists() else None,
        "tasks": [str(t) for t in meta.tasks.index],
        "columns": src.columns,
        "video_keys": src.video_keys,
        "image_keys": src.image_keys,
        "episodes": [{"episode_index": ep, "name": f"episode_{ep}", "length": e - s,
                      "dataset_from_index": int(meta.episodes[ep]["dataset_from_index"])}
                     for ep, (s, e) in src.runs.items()],
        "tolerance_s": native.reader._tolerance_s,
        "decoder": "torchcodec",
        "source_files": source_files(root),
    }


def _worker(args):
    root, repo_id, tolerance_s, out_dir, codec_dict, lease_s = args
    from robo_loaders_plugin.codecs.frames import use_single_thread

    use_single_thread()
    src = EpisodeSource(open_native(root, repo_id, tolerance_s))
    return units.work(out_dir, FrameCodec(**codec_dict), src.read, lease_s)


def convert_lerobot(root, out_dir: str, *, repo_id: str | None = None, num_workers: int = 1,
                    shard_bytes: int = DEFAULT_SHARD_BYTES, codec: FrameCodec | None = None,
                    tolerance_s: float = DEFAULT_TOLERANCE_S, lease_s: float = 3600.0, progress: bool = True) -> dict:
    codec = codec or FrameCodec()
    root = os.path.realpath(root)
    src = EpisodeSource(open_native(root, repo_id, tolerance_s))
    meta = _metadata(src)
    names = [e["name"] for e in meta["episodes"]]
    sizes = {f"episode_{ep}": src.frame_bytes(ep) for ep in src.runs}
    fp = fingerprint({"root": root, "files": meta["source_files"], "tolerance_s": tolerance_s})
    # decoded frames compress 3-10x; plan units on 4x the target shard size of raw frame bytes
    per_unit = units.unit_bytes(sum(sizes.values()), 4 * shard_bytes, num_workers)
    units.plan(out_dir, fp, units.units_by_size(names, sizes, per_unit),
               {"codec": codec.as_dict(), "shard_bytes": shard_bytes})
    args = (root, src.native.repo_id, tolerance_s, out_dir, codec.as_dict(), lease_s)
    # in this process, convert with the source already built above instead of opening the dataset again
    worker = _worker if num_workers > 1 else lambda _: units.work(out_dir, codec, src.read, lease_s)
    total = units.run(out_dir, worker, args, num_workers, codec, meta, {"path": root, "fingerprint": fp},
                      f"convert {os.path.basename(root)}", progress)
    return {"episodes": len(names), "shards": total, "source_bytes": sum(s for _, s in meta["source_files"]),
            "frame_bytes": sum(sizes.values())}


def verify_lerobot(out_dir: str, root, repo_id: str | None = None) -> list[str]:
    """Checksums and decoding (ShardReader.verify), then every episode's columns and frames against a fresh
    decode of the source dataset."""
    reader = ShardReader(out_dir)
    problems = reader.verify()
    if problems:
        return problems
    meta = reader.dataset.get("metadata", {})
    src = EpisodeSource(open_native(root, repo_id, meta.get("tolerance_s", DEFAULT_TOLERANCE_S)))
    expected = [f"episode_{ep}" for ep in src.runs]
    if [e["name"] for e in reader.episodes] != expected:
        return [f"{out_dir}: holds episodes {[e['name'] for e in reader.episodes][:5]}..., {root} has "
                f"{expected[:5]}... ({len(reader.episodes)} vs {len(expected)})"]
    for i, name in enumerate(tqdm(expected, desc="verify", unit="episode", mininterval=0.5)):
        _, fields = reader.read_episode(i)
        want, _ = src.read(name)
        if set(fields) != set(want):
            problems.append(f"{name}: fields {sorted(fields)} != source {sorted(want)}")
            continue
        for k, a in want.items():
            if fields[k].dtype != a.dtype or fields[k].shape != a.shape or not np.array_equal(fields[k], a):
                problems.append(f"{name}/{k}: differs from the source")
    return problems
