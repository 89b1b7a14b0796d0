"""The built-in backends' footprints (``core.footprint``), computed from a dataset's sizes before any data is read,
and the placement decisions they imply: where ``compressed_cache`` keeps its store, which ``gpu_resampler`` tier
holds which episodes, how many episodes the ``datapipe``/``video_stream`` buffers hold.

Framework-neutral: each adapter describes its dataset as a :class:`DataSize` from metadata only (robomimic: HDF5
dataset shapes, dtypes and ``num_samples``; LeRobot: ``meta/info.json`` features and ``meta/episodes`` lengths),
and the functions here say what the backend will need and how it stays bounded.

Lossless estimates: how well camera frames compress is a property of the pixels, which the metadata does not
give. Decisions that must never overcommit RAM use the frames' uncompressed size (a RAM store is placed only
where the worst case fits); disk estimates use :data:`EXPECTED_LOSSLESS_RATIO` (camera images with sensor noise
compress about 1.5-1.7:1 with LZ4, renders 2-5:1: docs/scale.md), and every writer checks the disk as it writes
(``core.footprint.DiskGuard``), so a source that compresses worse stops with both sizes instead of filling it.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from robo_loaders_plugin.core.footprint import (HEADROOM, Available, Footprint, estimate_seconds)
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes

logger = get_logger(__name__)

EXPECTED_LOSSLESS_RATIO = 1.5  # LZ4 on camera-like 480p frames measured 1.6-1.7:1 (docs/scale.md); renders compress more
BLOB_OVERHEAD = 32 + 64        # Blosc2 chunk header, its offset and checksum (8 + 8), and slack, per compressed frame
# per episode and field: its arrays 64-byte aligned (the rows or the offsets, and the checksums) and a last short
# checksum block; 12 fields' worth (the store's writer still stops at max_memory if a store holds more)
EPISODE_OVERHEAD = 12 * (2 * 64 + 8)
DEFAULT_CACHE_MEMORY = 10**9   # bytes (1GB): the datapipe/video_stream episode buffers, when cache_episodes is not given


@dataclasses.dataclass(frozen=True)
class DataSize:
    """The sizes a backend's footprint depends on, from metadata.

    Attributes:
        lengths: Steps (frames, rows) of each episode, in the order the backend stores them.
        frame_step_bytes: ``{camera field: decoded bytes per step}``.
        other_step_bytes: Bytes per step of every other field the backend holds.
        video_pixels_per_step: Pixels decoded per step to read the cameras from video (0: no video).
        source_bytes: Bytes of the source files (what a build reads).
        unit: What the framework calls an episode (robomimic: ``demo``), for messages.
    """

    lengths: np.ndarray
    frame_step_bytes: dict
    other_step_bytes: int
    video_pixels_per_step: int = 0
    source_bytes: int = 0
    unit: str = "episode"

    @property
    def steps(self) -> int:
        """Every episode's steps, summed."""
        return int(np.sum(self.lengths))

    @property
    def frame_bytes(self) -> int:
        """Every camera frame, decoded."""
        return self.steps * sum(self.frame_step_bytes.values())

    @property
    def other_bytes(self) -> int:
        """Every field that is not a camera frame, over every step."""
        return self.steps * int(self.other_step_bytes)

    def episode_frame_bytes(self) -> np.ndarray:
        """Each episode's camera frames, decoded: what a tier or buffer holds per episode (int64, one per episode,
        in :attr:`lengths`' order)."""
        return np.asarray(self.lengths, np.int64) * sum(self.frame_step_bytes.values())

    def episode_bytes(self) -> np.ndarray:
        """Each episode's camera frames decoded plus its other fields (int64, one per episode, in :attr:`lengths`'
        order)."""
        return np.asarray(self.lengths, np.int64) * (sum(self.frame_step_bytes.values()) + int(self.other_step_bytes))

    def store_upper_bytes(self) -> int:
        """A compressed store's size if no frame compressed at all (the worst case)."""
        blobs = self.steps * len(self.frame_step_bytes)
        return self.frame_bytes + blobs * BLOB_OVERHEAD + self._other_stored() + EPISODE_OVERHEAD * len(self.lengths)

    def store_expected_bytes(self, ratio: float = EXPECTED_LOSSLESS_RATIO) -> int:
        """A compressed store's expected size: frames compressed at ``ratio``, plus the per-frame blob overhead,
        the other fields raw and each episode's index entries (a disk estimate; never used where RAM must not be
        overcommitted, which takes :meth:`store_upper_bytes`).

        Args:
            ratio: The lossless compression ratio assumed for camera frames (uncompressed / compressed).

        Returns:
            Bytes.
        """
        blobs = self.steps * len(self.frame_step_bytes)
        return (int(self.frame_bytes / ratio) + blobs * BLOB_OVERHEAD + self._other_stored()
                + EPISODE_OVERHEAD * len(self.lengths))

    def _other_stored(self) -> int:
        """The other fields as a store holds them: their rows, and a checksum of 8 bytes per block of about 4 kB
        (``storage.store.RAW_BLOCK_BYTES``), counted as one per 2 kB for blocks that end short."""
        return self.other_bytes + 8 * (self.other_bytes // 2048 + 1)

    def build_seconds(self, codec: str, workers: int, decode_video: bool = True) -> float:
        """The estimated build time: reading the source, decoding its videos and compressing the frames once.

        Args:
            codec: The Blosc2 codec compressing the frames.
            workers: Cores compressing and decoding.
            decode_video: Whether the build decodes the source's video (false: frames are read as they are).

        Returns:
            Seconds (rough: ``core.footprint.estimate_seconds``).
        """
        return estimate_seconds(read_bytes=self.source_bytes, compress_bytes=self.frame_bytes, codec=codec,
                                decode_pixels=self.steps * self.video_pixels_per_step if decode_video else 0,
                                workers=workers)

    def describe(self) -> str:
        """The sizes in one phrase for messages: ``12 demos, 600 steps, 2 camera fields: 25.4 MB of frames
        decoded``."""
        cams = len(self.frame_step_bytes)
        return (f"{len(self.lengths)} {self.unit}s, {self.steps} steps, {cams} camera field{'s' * (cams != 1)}: "
                f"{format_bytes(self.frame_bytes)} of frames decoded")


# -- compressed_cache ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StorePlan:
    """Where ``compressed_cache`` keeps its store, and why.

    Attributes:
        in_ram: A RAM file shared by the host's processes (``/dev/shm``); else a file-backed store on disk, mapped.
        cache_dir: The cache directory of a store on disk (``None``: the default one).
        spilled: Why a store without ``cache_dir`` goes to disk (empty: it was not spilled).
        footprint: What it needs.
    """

    in_ram: bool
    cache_dir: str | None
    spilled: str
    footprint: Footprint


def compressed_cache_plan(size: DataSize, *, cache_dir: str | None, max_memory, codec: str, workers: int,
                          option_prefix: str, available: Available | None = None,
                          reusable: bool = False) -> StorePlan:
    """Place ``compressed_cache``'s store: in RAM when its worst case fits ``max_memory`` and ``/dev/shm`` (and the
    host's memory), else file-backed in the cache directory on local disk (mapped: the page cache keeps the
    frames training touches, and gives them back under memory pressure); with ``cache_dir``, there.

    Args:
        size: The dataset's sizes.
        cache_dir: The backend's ``cache_dir`` option.
        max_memory: The backend's ``max_memory`` option in bytes (``None``: not given): the RAM the store may take.
        codec: The frame codec (for the build-time estimate).
        workers: Threads compressing frames.
        option_prefix: How the user sets options (for messages).
        available: What the machine has (default: measured now).
        reusable: A store of this source and options is already on disk (nothing new to write).

    Returns:
        The :class:`StorePlan`.
    """
    from robo_loaders_plugin.storage import cache

    upper, expected = size.store_upper_bytes(), size.store_expected_bytes()
    limit = max_memory
    build_s = size.build_seconds(codec, workers)
    if cache_dir is None:
        available = available or Available.measure(disk_dir=cache.default_root())
        if (limit is None or upper <= limit) and available.fits_shm(upper, size.other_bytes):
            bound = (f"a RAM file of at most {format_bytes(upper)} (every frame uncompressed; the codec makes it "
                     f"smaller) in {available.shm_dir}, shared by the host's processes")
            return StorePlan(True, None, "", Footprint(host_bytes=size.other_bytes, shm_bytes=upper, build_s=build_s,
                                                       bound=bound))
        if limit is not None and upper > limit:
            why = f"{option_prefix}.max_memory={format_bytes(limit)} cannot hold up to {format_bytes(upper)}"
        else:
            shm = available.shm_bytes or 0
            why = (f"{available.shm_dir} ({format_bytes(shm)} free) and the host's memory "
                   f"({format_bytes(available.host_bytes)} available) cannot hold up to {format_bytes(upper)} "
                   f"with {1 - HEADROOM:.0%} to spare")
    else:
        why = ""
        available = available or Available.measure(disk_dir=cache.cache_root(cache_dir,
                                                                              f"{option_prefix}.cache_dir"))
    where = available.disk_dir
    bound = (f"a file-backed cache on local disk in {where}, mapped: the page cache holds the frames training "
             f"touches and gives them back under memory pressure; about {format_bytes(expected)} (at most "
             f"{format_bytes(upper)}), the build stops before the disk runs out")
    return StorePlan(False, cache_dir, why, Footprint(host_bytes=size.other_bytes,
                                                      disk_bytes=0 if reusable else expected, disk_dir=where,
                                                      build_s=None if reusable else build_s, bound=bound))


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
            parts.append(f"{self.unit}s {self.device}-{self.raw - 1} in host memory"
                         + (" (pinned)" if device_name.startswith("cuda") else ""))
        if self.episodes > self.raw:
            where = f"in a file on local disk in {self.spill_dir} (mapped)" if self.spill_dir else "in host memory"
            parts.append(f"{self.unit}s {self.raw}-{self.episodes - 1} with frames compressed {where} (~"
                         f"{format_bytes(self.compressed_bytes)}, decompressed per batch)")
        return "; ".join(parts)


def plan_tiers(size: DataSize, *, device_budget: int | None, host_budget: int | None,
               ratio: float = EXPECTED_LOSSLESS_RATIO, compress_codec: str = "lz4hc", workers: int = 1,
               spill_dir: str | None = None) -> TierPlan:
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
    before = np.concatenate([[0], np.cumsum(rest)]).astype(np.int64)          # bytes of episodes [d, i)
    blobs = np.concatenate([np.cumsum((np.asarray(size.lengths[d:]) * len(size.frame_step_bytes))[::-1])[::-1],
                            [0]]) * BLOB_OVERHEAD
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
    fp = Footprint(host_bytes=host, device_bytes=device_bytes, build_s=build or None,
                   disk_bytes=compressed if spill_dir and k < len(rest) else 0, disk_dir=spill_dir)
    return TierPlan(d, r, n, compressed, fp, spill_dir if k < len(rest) else None, size.unit)


# -- datapipe and video_stream episode buffers -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BufferPlan:
    """How many units (episodes, or parts of episodes) a pipeline's episode cache keeps, from a byte budget.

    Attributes:
        capacity: Units kept loaded (the cache's capacity).
        shuffle_buffer: Units open at once (items drawn from them).
        unit_bytes: The largest unit's bytes as held.
        footprint: What it needs (host RAM: ``capacity`` units, plus the batches in flight).
    """

    capacity: int
    shuffle_buffer: int
    unit_bytes: int
    footprint: Footprint


def buffer_plan(unit_bytes: np.ndarray, *, cache_memory, cache_episodes: int | None, shuffle_buffer: int,
                shuffle_given: bool, batch_bytes: int, prefetch: int, option_prefix: str,
                unit: str = "units", threads: int | None = None) -> BufferPlan:
    """Size a pipeline's episode cache: ``cache_episodes`` when given (kept working), else as many of the largest
    units as ``cache_memory`` holds; the shuffle buffer is at most half of it (the open units and those loaded
    ahead), unless given. Memory: the cache, plus the batches in flight: ``prefetch`` prefetched, one being
    assembled per thread (``pipeline.batches.PipelineBatches`` keeps one per thread) and the one training holds.

    Args:
        unit_bytes: Bytes of each unit as the cache holds it (decoded or compressed).
        cache_memory: The byte budget option in bytes (``None``: :data:`DEFAULT_CACHE_MEMORY`).
        cache_episodes: The option, when given.
        shuffle_buffer: The shuffle buffer option or its default.
        shuffle_given: Whether the user gave ``shuffle_buffer``.
        batch_bytes: Bytes of one batch.
        prefetch: Batches prefetched.
        option_prefix: How the user sets options (for messages).
        unit: What a unit is, plural, for the bound (``episodes``, ``demos``, or ``units`` for parts of episodes).
        threads: Threads assembling batches, when the factory knows them (``None``: the training script sets them,
            e.g. lerobot-train's ``--num_workers``; the bound then names them instead of counting them).

    Returns:
        The :class:`BufferPlan`; its capacity is at most the number of units (at least 1).
    """
    largest = int(np.max(unit_bytes)) if len(unit_bytes) else 0
    if cache_episodes is not None:
        capacity = max(int(cache_episodes), 2 * int(shuffle_buffer))
        said = f"cache_episodes={cache_episodes}"
        shuffle = int(shuffle_buffer)
    else:
        limit = cache_memory if cache_memory is not None else DEFAULT_CACHE_MEMORY
        fit = max(2, limit // max(1, largest))
        shuffle = int(shuffle_buffer) if shuffle_given else max(1, min(int(shuffle_buffer), fit // 2))
        capacity = max(fit, 2 * shuffle)
        said = f"cache_memory={format_bytes(limit)}"
    capacity = min(capacity, max(1, len(unit_bytes)))
    held = int(np.sum(np.sort(np.asarray(unit_bytes, np.int64))[::-1][:capacity]))
    if threads is None:  # the training script's num_workers: named, counted as one
        flying, count = 2 + int(prefetch), f"{int(prefetch)} prefetched + 1 per num_workers thread + 1 held by training"
    else:
        flying = int(prefetch) + max(1, int(threads)) + 1
        count = f"{flying}"
    host = held + flying * int(batch_bytes)
    flight = (f"{count} batches in flight ({format_bytes(flying * int(batch_bytes))}"
              f"{' with 1 thread' if threads is None else ''})" if batch_bytes else
              f"{count} batches in flight (not counted: the training script sets their size)")
    bound = (f"at most {capacity} {unit} of up to {format_bytes(largest)} held ({said}; {format_bytes(held)}) plus "
             f"{flight}, whatever the dataset's size")
    return BufferPlan(capacity, shuffle, largest, Footprint(host_bytes=host, bound=bound))


def conversion_estimate(size: DataSize, *, video: bool, ratio: float = EXPECTED_LOSSLESS_RATIO,
                        video_ratio: float = 20.0) -> int:
    """Bytes a conversion into robo-shards will write: frames at ``ratio`` (lossless) or ``video_ratio`` (video
    members), everything else raw, plus tar headers (2,048 bytes per member: each camera and 8 more per episode).

    Args:
        size: The source's sizes.
        video: Camera frames are stored as video members (else lossless frames).
        ratio: The lossless compression ratio assumed.
        video_ratio: The video compression ratio assumed (decoded bytes / encoded).

    Returns:
        Bytes (an estimate; writers check the disk as they write).
    """
    frames = size.frame_bytes / (video_ratio if video else ratio)
    return int(frames + size.other_bytes + 2048 * (len(size.lengths) * (len(size.frame_step_bytes) + 8)))


def check_conversion_disk(size: DataSize, out_dir: str, *, video: bool, command: str, alternatives=(),
                          option_prefix: str = "") -> int:
    """Refuse, before any data is read, a conversion into ``out_dir`` whose estimated output the disk cannot hold
    (with headroom, leaving the writers' reserve free: ``core.footprint.disk_reserve``), naming both sizes; what
    ``out_dir`` already holds (a conversion being resumed) is counted as written.

    Args:
        size: The source's ``DataSize`` (from metadata).
        out_dir: The output directory (its nearest existing ancestor's filesystem is measured).
        video: Camera frames stored as video members (else lossless frames).
        command: What converts, for the message (``robo-loaders convert robomimic``, or a backend converting on
            first use).
        alternatives: What would fit instead.
        option_prefix: How the user sets options, when a backend converts on first use.

    Returns:
        The estimated bytes still to write.

    Raises:
        core.footprint.ResourceRefused: the output does not fit.
    """
    from robo_loaders_plugin.core.footprint import check_fits
    from robo_loaders_plugin.storage.cache import path_bytes

    done = path_bytes(out_dir) if os.path.isdir(out_dir) else 0
    need = max(0, conversion_estimate(size, video=video) - done)
    kind = "video members" if video else f"lossless frames at an estimated {EXPECTED_LOSSLESS_RATIO}:1"
    bound = (f"{size.describe()}; the shards ({kind}) need about {format_bytes(need)} more in {out_dir}; the "
             "conversion stops before the disk runs out")
    fp = Footprint(disk_bytes=need, disk_dir=out_dir, bound=bound)
    available = Available.measure(disk_dir=out_dir)
    check_fits(fp, available, backend=command, option_prefix=option_prefix,
               alternatives=alternatives, subject=f"{command} cannot write {out_dir}")
    worst = max(0, conversion_estimate(size, video=video, ratio=1.0) - done)
    if not video and available.disk_bytes is not None and worst > HEADROOM * available.disk_usable:
        # the estimate fits, frames that do not compress would not (camera noise: L480 packed 1.25:1, not 1.5:1)
        kept = f" less the {format_bytes(available.disk_reserve)} kept free" if available.disk_reserve else ""
        logger.warning(f"{command}: {out_dir} has room for the estimate ({format_bytes(need)} at "
                       f"{EXPECTED_LOSSLESS_RATIO}:1) but not for frames that do not compress ({format_bytes(worst)}, "
                       f"{format_bytes(available.disk_bytes)} free{kept}); if it runs short the conversion stops "
                       "with both sizes before the disk is full, keeping its completed work units for the same "
                       "command to resume")
    return need



def source_bytes(path: str) -> int:
    """Bytes of a source file or directory: what a build reads (``DataSize.source_bytes``).

    Args:
        path: A file, or a directory whose files (recursively) are summed.

    Returns:
        Bytes.
    """
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
