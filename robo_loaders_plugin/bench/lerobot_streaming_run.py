"""Child process of ``robo-loaders bench lerobot`` for the ``streaming`` baseline: LeRobot 0.6.1's own
``StreamingLeRobotDataset`` on the local root, built and iterated as ``lerobot-train --dataset.streaming=true``
does (``max_num_shards=num_workers``, ``return_uint8=True``, a DataLoader with no sampler).

Why a baseline of its own: it is what LeRobot offers for training without a full local decode, the thing the
``video_stream`` backend replaces; it is an IterableDataset (no map-style indexing), so the map-style child
(``lerobot_run``) cannot time it. It never reaches the Hub for a local root; run it with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import sys
import time


def run(a: dict) -> dict:
    """Build LeRobot's ``StreamingLeRobotDataset`` as ``lerobot-train --dataset.streaming=true`` does and time it.

    Args:
        a: The child's arguments (``repo_id``, ``root``, ``preset``, ``kwargs``, ``batch_size``, ``num_workers``,
            ``batches``).

    Returns:
        The result row, shaped as ``lerobot_run``'s (no cache, no decode split).
    """
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata
    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

    from robo_loaders_plugin.bench.lerobot_bench import raw_frame_bytes
    from robo_loaders_plugin.bench.lerobot_run import frames_per_sample
    from robo_loaders_plugin.bench.runner import baseline_pss, time_loader
    from robo_loaders_plugin.bench.shuffle_metric import episode_mix
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    torch.manual_seed(0)
    meta = LeRobotDatasetMetadata(a["repo_id"], root=a["root"])
    delta = delta_timestamps(a["preset"], meta)
    baseline = baseline_pss()
    nw = a["num_workers"]
    t = time.perf_counter()
    # lerobot-train passes max_num_shards=num_workers; 0 workers would give 0 shards (nothing to read): 1 then
    ds = StreamingLeRobotDataset(
        a["repo_id"],
        root=a["root"],
        delta_timestamps=delta,
        max_num_shards=max(1, nw),
        return_uint8=True,
        **(a.get("kwargs") or {}),
    )
    build_s = time.perf_counter() - t
    extra = dict(prefetch_factor=4, persistent_workers=True, multiprocessing_context="spawn") if nw else {}
    loader = torch.utils.data.DataLoader(
        ds, batch_size=a["batch_size"], num_workers=nw, shuffle=False, drop_last=False, **extra
    )
    episodes_per_batch = []

    def count(batch):
        episodes_per_batch.append(batch["episode_index"].numpy())
        return len(batch["index"])

    timing = time_loader(loader, a["batches"], count)
    fps_ = frames_per_sample(ds, delta)
    return dict(
        timing,
        build_s=build_s,
        num_samples=int(ds.num_frames),
        baseline_pss_bytes=baseline,
        frames_per_sample=fps_,
        decoded_frames_per_s=timing["samples_per_s"] * fps_,
        raw_decoded_frames_bytes=raw_frame_bytes(a["root"]),
        cache_bytes=0,
        episode_mix=episode_mix(episodes_per_batch),
        fetch_ms_per_sample=None,
        decode_ms_per_sample=None,
        summary=f"StreamingLeRobotDataset(max_num_shards={ds.num_shards}, buffer_size={ds.buffer_size}) "
        f"over {a['root']}, {nw} DataLoader workers",
    )


def main():
    """The child's entry point: ``python -m robo_loaders_plugin.bench.lerobot_streaming_run '<json args>' OUT.json``."""
    out = run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
