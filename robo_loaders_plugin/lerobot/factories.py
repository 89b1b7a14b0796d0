"""Backend factories for LeRobot: ``factory(native_dataset, **options)``.

LeRobot's own factory first builds its ``LeRobotDataset`` (cheap: parquet metadata, no video decoding), which
settles episode selection, ``delta_timestamps``, image transforms, tolerance and ImageNet stats exactly as
``lerobot-train`` would; a backend then serves the same samples from its own storage.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.build import check_codec_options, fingerprint, open_or_build, \
    summarize
from robo_loaders_plugin.lerobot.dataset import StoreLeRobotDataset
from robo_loaders_plugin.lerobot.source import EpisodeVideoReader, LeRobotSourceError, arrow_table, \
    column_arrays, decode_png_column
from robo_loaders_plugin.spec import BackendOptionError

OPTION_PREFIX = "--dataset.backend_kwargs"


SUPPORTED_LEROBOT = "0.6."


def check_lerobot_version() -> None:
    """The sample assembly mirrors LeRobot 0.6's DatasetReader; 0.4.x builds items differently (float32 video
    frames, no reader object), so refuse rather than risk different samples."""
    from importlib.metadata import version

    found = version("lerobot")
    if not found.startswith(SUPPORTED_LEROBOT):
        raise LeRobotSourceError(f"robo-loaders backends for LeRobot support lerobot {SUPPORTED_LEROBOT}x, found {found}; "
                                 "use --dataset.backend=native (see the README section on LeRobot 0.4.4)")


def check_supported(native) -> None:
    """What the backends that decode episodes ahead of time (compressed_cache, datapipe) can reproduce."""
    check_lerobot_version()
    meta = native.meta
    video_backend = native.reader._video_backend
    if meta.video_keys and video_backend != "torchcodec":
        raise LeRobotSourceError(f"robo-loaders decodes video with torchcodec, as LeRobot does by default; this "
                                 f"dataset uses video_backend={video_backend!r}, whose frames can differ. Use "
                                 "--dataset.video_backend=torchcodec or --dataset.backend=native")
    if meta.depth_keys:
        raise LeRobotSourceError(f"depth features {meta.depth_keys} are not supported by robo-loaders yet; "
                                 "use --dataset.backend=native")
    if meta.has_language_columns:
        raise LeRobotSourceError("datasets with language columns are not supported by robo-loaders yet; "
                                 "use --dataset.backend=native")


def native_dataset(native, **_):
    return native


def _source_fingerprint(root: Path) -> list:
    """Size and mtime of every file of the dataset: any change to data, videos or metadata rebuilds the cache."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out.append((os.path.relpath(p, root), st.st_size, st.st_mtime_ns))
    return sorted(out)


def episode_runs(ep_index: np.ndarray, meta) -> list[tuple[int, int, int]]:
    """(episode, first row, end row) for contiguous runs; checks that each selected episode is one run."""
    if len(ep_index) == 0:
        raise LeRobotSourceError("the dataset selects no frames")
    cuts = np.flatnonzero(np.diff(ep_index)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(ep_index)]])
    runs = [(int(ep_index[s]), int(s), int(e)) for s, e in zip(starts, ends)]
    seen = set()
    for ep, s, e in runs:
        if ep in seen:
            raise LeRobotSourceError(f"episode {ep}'s frames are not contiguous in the data files; compressed_cache "
                                     "needs each episode's rows together (as LeRobot writes them)")
        seen.add(ep)
        length = int(meta.episodes[ep]["length"])
        if e - s != length:
            raise LeRobotSourceError(f"episode {ep}: {e - s} rows in the data files but meta/episodes says "
                                     f"length={length}; the dataset is inconsistent")
    return runs


def compressed_cache_dataset(native, *, codec="lz4hc", level=5, filter="none", max_memory=None, cache_dir=None,
                             build_workers=None, loader="threads"):
    frame_codec = check_codec_options(codec, level, filter, max_memory, build_workers, OPTION_PREFIX)
    if loader != "threads":
        raise BackendOptionError(f"{OPTION_PREFIX}: option 'loader' applies to robomimic only (LeRobot keeps its "
                                 "own DataLoader and EpisodeAwareSampler)")
    check_supported(native)
    meta = native.meta
    video_backend = native.reader._video_backend
    hf = native.hf_dataset
    columns = list(hf.features)
    image_keys = [k for k in meta.image_keys if k in columns]
    video_keys = list(meta.video_keys)
    first = hf[0]
    table = arrow_table(hf)
    arrays = column_arrays(table, [c for c in columns if c not in image_keys], first)
    for needed in ("index", "episode_index", "timestamp", "task_index"):
        if needed not in arrays:
            raise LeRobotSourceError(f"{native.root}: column {needed!r} is missing from the data files")
    runs = episode_runs(arrays["episode_index"], meta)
    root = Path(native.root)
    fp = fingerprint({"root": os.path.realpath(root), "files": _source_fingerprint(root),
                      "episodes": native.episodes, "codec": frame_codec.as_dict(),
                      "tolerance_s": native.reader._tolerance_s, "video_backend": video_backend,
                      "v": 1})

    def write(writer):
        writer.add_episode("columns", arrays)
        reader = EpisodeVideoReader(root, meta, native.reader._tolerance_s)
        for ep, s, e in tqdm(runs, desc=f"compressed_cache [{native.repo_id}]", unit="episode", mininterval=0.5):
            fields = {}
            for key in video_keys:
                fields[key] = reader.episode_frames(ep, key, arrays["timestamp"][s:e])
            for key in image_keys:
                fields[key] = decode_png_column(table, key, slice(s, e))
            writer.add_episode(f"episode_{ep}", fields, compressed=set(fields))

    store, owner, reused = open_or_build(fp, "lerobot", write, codec=frame_codec, cache_dir=cache_dir,
                                         max_memory=max_memory, build_workers=build_workers,
                                         option_prefix=OPTION_PREFIX,
                                         meta={"source": os.path.realpath(root), "framework": "lerobot"})
    ds = StoreLeRobotDataset(native, store, columns=columns, video_keys=video_keys, image_keys=image_keys,
                             store_owner=owner)
    ds.build_summary = summarize(store, len(runs), len(ds), reused)
    return ds
