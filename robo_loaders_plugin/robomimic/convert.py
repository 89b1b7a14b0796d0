"""``robo-loaders convert robomimic IN.hdf5 OUT_DIR``: a robomimic HDF5 file as robo-shards, losslessly (every
dataset of every demo in its file dtype, camera frames compressed), with the file's metadata (``env_args``,
``total``, per-demo attributes, filter-key masks) and its source fingerprint in ``dataset.json``."""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5, datasets
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.fingerprint import Fingerprint
from robo_loaders_plugin.storage.shards import executors, manifest
from robo_loaders_plugin.storage.shards import DEFAULT_SHARD_BYTES, ShardReader, verify_dir


def _worker(args):
    in_path, out_dir, codec_dict, lease_s = args
    source = RobomimicHdf5(in_path)
    with source.open() as f:
        return manifest.work(out_dir, FrameCodec(**codec_dict), lambda demo: source.read_all(f, demo), lease_s)


def convert_robomimic(in_path: str, out_dir: str, num_workers: int = 1, shard_bytes: int = DEFAULT_SHARD_BYTES,
                      codec: FrameCodec | None = None, lease_s: float = 3600.0, progress: bool = True,
                      fingerprint: Fingerprint | None = None, executor: str = "local",
                      executor_options: Mapping | None = None) -> dict:
    """``executor``/``executor_options``: where the work units run (``storage/shards/executors.py``); for
    ``datatrove-slurm`` the result describes the submitted job instead of the published shards."""
    executors.check_options(executor, executor_options or {})
    codec = codec or FrameCodec()
    source = RobomimicHdf5(in_path)
    fp = fingerprint or source.fingerprint()
    with source.open() as f:
        meta = source.metadata(f)
        sizes = {d: source.nbytes(f, d) for d in meta["demos"]}
    # frames compress about 2x, so plan units on twice the target shard size of raw bytes
    per_unit = manifest.unit_bytes(sum(sizes.values()), 2 * shard_bytes, num_workers)
    manifest.plan(out_dir, fp.content, manifest.units_by_size(meta["demos"], sizes, per_unit),
                  {"codec": codec.as_dict(), "shard_bytes": shard_bytes})
    args = (os.path.abspath(in_path), out_dir, codec.as_dict(), lease_s)
    res = executors.execute(executor, out_dir, _worker, args, num_workers, codec, meta,
                            {"path": fp.path, "fingerprint": fp.as_dict()}, f"convert {os.path.basename(in_path)}",
                            progress, **dict(executor_options or {}))
    if isinstance(res, executors.Submitted):
        return res.as_dict()
    return {"episodes": res.episodes, "shards": res.shards}


def verify_robomimic(out_dir: str, in_path: str) -> list[str]:
    """Checksums and decoding (ShardReader.verify), then every demo's arrays against the source file."""
    problems = verify_dir(out_dir)
    if problems:
        return problems
    reader = ShardReader(out_dir)
    source = RobomimicHdf5(in_path)
    with source.open() as f:
        demos = source.demos(f, None)
        if [e["name"] for e in reader.episodes] != demos:
            return [f"{out_dir}: holds {len(reader.episodes)} episodes, {in_path} has {len(demos)} demos"]
        for i, d in enumerate(demos):
            _, fields = reader.read_episode(i)
            src = dict(datasets(f[f"data/{d}"]))
            if set(fields) != set(src):
                problems.append(f"{d}: fields {sorted(fields)} != source {sorted(src)}")
                continue
            for k, ds in src.items():
                a = ds[()]
                if fields[k].dtype != a.dtype or fields[k].shape != a.shape or not np.array_equal(fields[k], a):
                    problems.append(f"{d}/{k}: differs from the source")
    return problems
