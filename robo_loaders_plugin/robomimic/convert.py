"""``robo-loaders convert robomimic IN.hdf5 OUT_DIR``: a robomimic HDF5 file as robo-shards, losslessly (every
dataset of every demo in its file dtype, camera frames compressed), with the file's metadata (``env_args``,
``total``, per-demo attributes, filter-key masks) in ``dataset.json``."""
from __future__ import annotations

import os

import h5py
import numpy as np

from robo_loaders_plugin.backends.compressed_cache.build import fingerprint
from robo_loaders_plugin.backends.shards import convert as units
from robo_loaders_plugin.backends.shards.format import DEFAULT_SHARD_BYTES, ShardReader
from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.robomimic import hdf5_source

FRAME_MIN_BYTES = 1024


def _datasets(group, prefix=""):
    for k, v in group.items():
        if isinstance(v, h5py.Dataset):
            yield prefix + k, v
        else:
            yield from _datasets(v, f"{prefix}{k}/")


def _metadata(f) -> dict:
    demos = hdf5_source.sorted_demos(f["data"].keys())
    masks = {k: [x.decode() if isinstance(x, bytes) else str(x) for x in f[f"mask/{k}"][:]]
             for k in (f["mask"].keys() if "mask" in f else [])}
    attrs = {d: {k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                 for k, v in f[f"data/{d}"].attrs.items()} for d in demos}
    data_attrs = {k: (v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v)
                  for k, v in f["data"].attrs.items()}
    return {"framework": "robomimic", "data_attrs": data_attrs, "demo_attrs": attrs, "masks": masks,
            "demos": demos}


def _worker(args):
    in_path, out_dir, codec_dict, lease_s = args
    codec = FrameCodec(**codec_dict)
    with hdf5_source.open_hdf5(in_path) as f:
        def read_episode(name):
            fields = {}
            for key, ds in _datasets(f[f"data/{name}"]):
                try:
                    fields[key] = ds[()]
                except (OSError, RuntimeError, ValueError) as exc:
                    raise hdf5_source.DatasetFileError(f"{in_path}: cannot read data/{name}/{key} ({exc})") from exc
            compressed = {k for k, a in fields.items() if a.ndim > 1 and a[0].nbytes >= FRAME_MIN_BYTES}
            return fields, compressed

        return units.work(out_dir, codec, read_episode, lease_s)


def convert_robomimic(in_path: str, out_dir: str, num_workers: int = 1, shard_bytes: int = DEFAULT_SHARD_BYTES,
                      codec: FrameCodec | None = None, lease_s: float = 3600.0, progress: bool = True) -> dict:
    codec = codec or FrameCodec()
    with hdf5_source.open_hdf5(in_path) as f:
        meta = _metadata(f)
        sizes = {d: sum(ds.nbytes for _, ds in _datasets(f[f"data/{d}"])) for d in meta["demos"]}
    st = os.stat(in_path)
    fp = fingerprint({"file": os.path.realpath(in_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    # frames compress about 2x, so plan units on twice the target shard size of raw bytes
    per_unit = units.unit_bytes(sum(sizes.values()), 2 * shard_bytes, num_workers)
    units.plan(out_dir, fp, units.units_by_size(meta["demos"], sizes, per_unit),
               {"codec": codec.as_dict(), "shard_bytes": shard_bytes})
    args = (os.path.abspath(in_path), out_dir, codec.as_dict(), lease_s)
    total = units.run(out_dir, _worker, args, num_workers, codec, meta,
                      {"path": os.path.realpath(in_path), "fingerprint": fp}, f"convert {os.path.basename(in_path)}",
                      progress)
    return {"episodes": len(meta["demos"]), "shards": total}


def verify_robomimic(out_dir: str, in_path: str) -> list[str]:
    """Checksums and decoding (ShardReader.verify), then every demo's arrays against the source file."""
    reader = ShardReader(out_dir)
    problems = reader.verify()
    if problems:
        return problems
    with hdf5_source.open_hdf5(in_path) as f:
        demos = hdf5_source.sorted_demos(f["data"].keys())
        if [e["name"] for e in reader.episodes] != demos:
            return [f"{out_dir}: holds {len(reader.episodes)} episodes, {in_path} has {len(demos)} demos"]
        for i, d in enumerate(demos):
            _, fields = reader.read_episode(i)
            src = dict(_datasets(f[f"data/{d}"]))
            if set(fields) != set(src):
                problems.append(f"{d}: fields {sorted(fields)} != source {sorted(src)}")
                continue
            for k, ds in src.items():
                a = ds[()]
                if fields[k].dtype != a.dtype or fields[k].shape != a.shape or not np.array_equal(fields[k], a):
                    problems.append(f"{d}/{k}: differs from the source")
    return problems
