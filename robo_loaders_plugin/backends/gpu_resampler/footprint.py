"""Which of ``gpu_resampler``'s tiers holds which episodes (GPU, host memory raw, host memory compressed, a
compressed file on disk), from the dataset's sizes and the budgets, before any data is read.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robo_loaders_plugin.core.data_size import BLOB_OVERHEAD, EXPECTED_LOSSLESS_RATIO, DataSize
from robo_loaders_plugin.core.footprint import Footprint, estimate_seconds
from robo_loaders_plugin.core.units import format_bytes


# -- gpu_resampler ------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TierPlan:
    """Which episodes each ``gpu_resampler`` tier holds: episodes ``[0, device)`` on the GPU, ``[device, raw)`` in
    host memory uncompressed (pinned when training on CUDA), ``[raw, N)`` with their camera frames compressed in
    host memory (decompressed by threads into staging buffers per batch). Fields that are not camera frames are
    held whole in the first tier that exists.

    Attributes:
        device: Episodes held on the GPU.
        raw: End of the host-raw tier.
        episodes: Every episode.
        compressed_bytes: The compressed tier's estimated size.
        footprint: What the plan needs.
        spill_dir: The compressed tier is kept in a file there (local disk, mapped), not in host memory: even
            compressed the frames exceed the memory budget (``None``: in host memory).
        unit: What the framework calls an episode (robomimic: ``demo``), for messages.
    """

    device: int
    raw: int
    episodes: int
    compressed_bytes: int
    footprint: Footprint
    spill_dir: str | None = None
    unit: str = "episode"

    def frames_clause(self) -> str:
        """How the camera frames are held, the start of the footprint's bound: ``frames of 3 of 7 demos compressed``
        (``in a mapped file on disk`` when spilled), or ``every demo held uncompressed``.

        Returns:
            The clause.
        """
        if self.raw < self.episodes:
            spilled = " in a mapped file on disk" if self.spill_dir else ""
            return f"frames of {self.episodes - self.raw} of {self.episodes} {self.unit}s compressed{spilled}"
        return f"every {self.unit} held uncompressed"

    def describe(self, device_name: str) -> str:
        """Which tier holds what, for the log line (tiers holding nothing are left out).

        Args:
            device_name: The training device (``cuda:0``, ``cpu``); the host tier is said to be pinned when it
                starts with ``cuda``.

        Returns:
            The tiers, ``; ``-separated.
        """
        parts = []
        if self.device:
            parts.append(f"{self.unit}s 0-{self.device - 1} on {device_name}")
        if self.raw > self.device:
            parts.append(
                f"{self.unit}s {self.device}-{self.raw - 1} in host memory"
                + (" (pinned)" if device_name.startswith("cuda") else "")
            )
        if self.episodes > self.raw:
            where = f"in a file on local disk in {self.spill_dir} (mapped)" if self.spill_dir else "in host memory"
            parts.append(
                f"{self.unit}s {self.raw}-{self.episodes - 1} with frames compressed {where} (~"
                f"{format_bytes(self.compressed_bytes)}, decompressed per batch)"
            )
        return "; ".join(parts)


def plan_tiers(
    size: DataSize,
    *,
    device_budget: int | None,
    host_budget: int | None,
    ratio: float = EXPECTED_LOSSLESS_RATIO,
    compress_codec: str = "lz4hc",
    workers: int = 1,
    spill_dir: str | None = None,
) -> TierPlan:
    """Fill the tiers in episode order: the GPU up to ``device_budget`` (``None``: no GPU tier), then host memory
    raw, then compressed, so that raw + compressed (at ``ratio``) stays within ``host_budget``
    (``None``: unlimited). With ``spill_dir`` the compressed tier is a file on disk there (only the raw tier
    counts against ``host_budget``; the file's estimate is the footprint's disk bytes). Pure: a function of the
    sizes and budgets only (tested on the CPU with small budgets).

    Args:
        size: The dataset's sizes.
        device_budget: GPU bytes the episodes may take (``None``: no GPU tier). The non-frame fields go on the
            GPU first when they fit it; else they stay in host memory and no episode is put on the GPU.
        host_budget: Host bytes the raw and compressed tiers may take (``None``: unlimited, every episode not on
            the GPU is held raw).
        ratio: The lossless compression ratio assumed for the compressed tier.
        compress_codec: The codec compressing it (for the build-time estimate).
        workers: Threads compressing it (for the build-time estimate).
        spill_dir: Where the compressed tier is kept as a file (``None``: in host memory).

    Returns:
        The :class:`TierPlan`; its ``footprint.host_bytes`` may still exceed ``host_budget`` when even every frame
        compressed does not fit (the caller spills or refuses).
    """
    n = len(size.lengths)
    frames = size.episode_frame_bytes()
    other = size.other_bytes
    d = 0
    device_bytes = 0
    if device_budget is not None:
        used = other
        if used <= device_budget:
            device_bytes = used
            while d < n and used + frames[d] <= device_budget:
                used += frames[d]
                d += 1
            device_bytes = used
    host_other = 0 if device_budget is not None and device_bytes else other
    rest = frames[d:]
    after = np.concatenate([np.cumsum(rest[::-1])[::-1], [0]]).astype(np.int64)  # bytes of episodes [i, N)
    before = np.concatenate([[0], np.cumsum(rest)]).astype(np.int64)  # bytes of episodes [d, i)
    blobs = (
        np.concatenate([np.cumsum((np.asarray(size.lengths[d:]) * len(size.frame_step_bytes))[::-1])[::-1], [0]])
        * BLOB_OVERHEAD
    )
    need = host_other + before + (0 if spill_dir else (after / ratio).astype(np.int64) + blobs)
    if host_budget is None:
        r = n
    else:
        ok = np.flatnonzero(need <= host_budget)
        r = d + int(ok[-1]) if ok.size else d
    k = r - d
    compressed = int(after[k] / ratio) + int(blobs[k])
    host = host_other + int(before[k]) + (0 if spill_dir else compressed)
    build = estimate_seconds(compress_bytes=int(after[k]), codec=compress_codec, workers=workers)
    fp = Footprint(
        host_bytes=host,
        device_bytes=device_bytes,
        build_s=build or None,
        disk_bytes=compressed if spill_dir and k < len(rest) else 0,
        disk_dir=spill_dir,
    )
    return TierPlan(d, r, n, compressed, fp, spill_dir if k < len(rest) else None, size.unit)
