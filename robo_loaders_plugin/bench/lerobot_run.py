"""Child process of ``robo-loaders bench lerobot``: builds one backend the way ``lerobot-train`` (0.6.1) does and
times its batches; then a single-process pass splits the per-sample time into video decode and the rest."""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np


def train_loader(ds, batch_size: int, num_workers: int):
    """The DataLoader lerobot-train 0.6.1 builds (CPU: no pin_memory): its ``EpisodeAwareSampler`` and settings.

    Args:
        ds: The dataset (LeRobot's or a backend's).
        batch_size: Samples per batch.
        num_workers: DataLoader worker processes (spawned, persistent, prefetching 4, as lerobot-train's).

    Returns:
        The ``torch.utils.data.DataLoader``.
    """
    import torch
    from lerobot.datasets import EpisodeAwareSampler

    sampler = EpisodeAwareSampler(
        ds.meta.episodes["dataset_from_index"],
        ds.meta.episodes["dataset_to_index"],
        episode_indices_to_use=ds.episodes,
        shuffle=True,
        seed=1000,
        absolute_to_relative_idx=ds.absolute_to_relative_idx,
    )
    extra = dict(prefetch_factor=4, persistent_workers=True, multiprocessing_context="spawn") if num_workers else {}
    return torch.utils.data.DataLoader(
        ds, batch_size=batch_size, sampler=sampler, num_workers=num_workers, shuffle=False, drop_last=False, **extra
    )


def frames_per_sample(ds, delta) -> int:
    """Camera frames one sample holds: one per camera, or as many as its ``delta_timestamps`` ask for.

    Args:
        ds: The dataset (its ``meta.camera_keys``).
        delta: The ``delta_timestamps``, or ``None``.
    """
    return sum(len(delta[k]) if delta and k in delta else 1 for k in ds.meta.camera_keys)


def decode_split(ds, native: bool, samples: int = 200) -> dict:
    """Wall time per sample spent getting camera frames vs everything else (single process, random order).

    LeRobot's video queries (all cameras of a sample) for ``native``, camera-frame gathers for the others. Both are
    timed by wrapping them in place (``DatasetReader._query_videos``, or the dataset's ``frames.take``, ``gather``
    and ``gather_fields``), so the dataset is left instrumented.

    Args:
        ds: The dataset.
        native: Whether it is LeRobot's own.
        samples: How many random samples to read.

    Returns:
        ``decode_ms_per_sample``, ``fetch_ms_per_sample`` and ``single_process_samples_per_s``.
    """
    spent = [0.0]
    if native:
        from robo_loaders_plugin.lerobot.compat import time_video_queries

        time_video_queries(spent)
    else:
        frames = ds.frames
        me = threading.get_ident()
        inside = [False]  # a timed call made inside another (gather_fields calling take) is counted once

        def timed(method, fields_of):
            def call(*args):
                if inside[0] or threading.get_ident() != me or not any(frames.info(f).frames for f in fields_of(args)):
                    return method(*args)  # this thread's camera reads only: the batches' pipeline may still run
                inside[0] = True
                t = time.perf_counter()
                try:
                    return method(*args)
                finally:
                    spent[0] += time.perf_counter() - t
                    inside[0] = False

            return call

        # every way a frame source is read: take, gather, and gather_fields (a store may read every field at once);
        # a source may offer only some of them (the FrameSource contract requires take alone)
        reads = {"take": lambda a: [a[0]], "gather": lambda a: [a[0]], "gather_fields": lambda a: list(a[0])}
        for name, fields_of in reads.items():
            if callable(getattr(frames, name, None)):
                setattr(frames, name, timed(getattr(frames, name), fields_of))
    idx = np.random.default_rng(0).choice(len(ds), samples)
    t = time.perf_counter()
    for i in idx:
        ds[int(i)]
    total = time.perf_counter() - t
    return {
        "decode_ms_per_sample": spent[0] / samples * 1e3,
        "fetch_ms_per_sample": (total - spent[0]) / samples * 1e3,
        "single_process_samples_per_s": samples / total,
    }


def run(a: dict) -> dict:
    """Build one backend the way ``lerobot-train`` (0.6.1) does, time its batches through the patched ``cycle``,
    then split the per-sample time (:func:`decode_split`).

    Args:
        a: The child's arguments (``repo_id``, ``root``, ``preset``, ``backend``, ``kwargs``, ``batch_size``,
            ``num_workers``, ``batches``, ``profile_samples``).

    Returns:
        The result row: the timing, build time, sizes, frames per sample and per second, episode mix, summary and
        the decode split.
    """
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.bench.lerobot_bench import raw_frame_bytes
    from robo_loaders_plugin.bench.runner import baseline_pss, time_loader
    from robo_loaders_plugin.bench.shuffle_metric import episode_mix
    from robo_loaders_plugin.core.iteration import summary_of
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose, cycle
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    torch.manual_seed(0)
    meta = LeRobotDatasetMetadata(a["repo_id"], root=a["root"])
    delta = delta_timestamps(a["preset"], meta)
    baseline = baseline_pss()
    t = time.perf_counter()
    ds = LeRobotDataset(a["repo_id"], root=a["root"], delta_timestamps=delta, return_uint8=True)  # as make_dataset
    if a["backend"] != "native":
        ds = build_dataset(ds, choose(a["backend"], **(a.get("kwargs") or {})))
    build_s = time.perf_counter() - t
    loader = train_loader(ds, a["batch_size"], a["num_workers"])
    episodes_per_batch = []

    def count(batch):
        episodes_per_batch.append(batch["episode_index"].numpy())
        return len(batch["index"])

    # what lerobot-train's patched cycle(dataloader) yields for this backend's kind
    timing = time_loader(cycle(loader), a["batches"], count)
    del loader
    fps_ = frames_per_sample(ds, delta)
    split = decode_split(ds, a["backend"] == "native", a.get("profile_samples", 200))
    return dict(
        timing,
        build_s=build_s,
        num_samples=len(ds),
        baseline_pss_bytes=baseline,
        frames_per_sample=fps_,
        decoded_frames_per_s=timing["samples_per_s"] * fps_,
        raw_decoded_frames_bytes=raw_frame_bytes(a["root"]),
        cache_bytes=stored_bytes(ds),
        episode_mix=episode_mix(episodes_per_batch),
        summary=summary_of(ds),
        **split,
    )


def stored_bytes(ds) -> int:
    """What the backend keeps its frames in: a frame store's files (compressed_cache's RAM cache), the tensors, or
    the shards on disk (datapipe).

    Args:
        ds: The dataset built.

    Returns:
        The bytes; 0 for LeRobot's own dataset and for backends that store nothing (video_stream).
    """
    from robo_loaders_plugin.backends.gpu_resampler.tensors import TensorFrames
    from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
    from robo_loaders_plugin.sdk.serve import StoreFrames
    from robo_loaders_plugin.storage.cache import path_bytes

    if not isinstance(ds, LeRobotSamples):
        return 0
    if isinstance(ds.frames, StoreFrames):  # any store served by the SDK: its directory's files
        return path_bytes(ds.frames.directory)
    if isinstance(ds.frames, TensorFrames):
        return TensorFrames.nbytes(ds.frames.lengths, ds.frames.infos)
    from robo_loaders_plugin.backends.datapipe.lerobot import LeRobotShardSamples

    if not isinstance(ds, LeRobotShardSamples):  # video_stream: decodes the dataset's own videos, stores nothing
        return 0
    from robo_loaders_plugin.storage.shards import ShardReader

    return sum(s["bytes"] for s in ShardReader(ds.location).shards.values())


def main():
    """The child's entry point: ``python -m robo_loaders_plugin.bench.lerobot_run '<json args>' OUT.json``."""
    out = run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
