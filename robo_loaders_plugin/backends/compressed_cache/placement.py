"""Where ``compressed_cache`` keeps its store (RAM shared by the host's processes, or file-backed in the cache
directory on disk), decided from the dataset's sizes and the machine before any data is read: its own rule
(:meth:`~robo_loaders_plugin.sdk.FrameStore.place`) over the SDK's placement, because a store of compressed frames
must fit RAM however badly they compress, while on disk it is expected at the ratio a few sampled frames pack at.
"""

from __future__ import annotations

import math
import os

from robo_loaders_plugin.core.data_size import EXPECTED_LOSSLESS_RATIO, DataSize
from robo_loaders_plugin.core.footprint import HEADROOM, Available, Footprint, check_fits
from robo_loaders_plugin.core.in_flight import BatchesInFlight
from robo_loaders_plugin.core.options import ROBOMIMIC_OPTIONS
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.sdk import Placement, PlaceRequest
from robo_loaders_plugin.storage import cache

# what fits when this backend does not (its refusal names these), per framework
ALTERNATIVES = {
    "robomimic": (
        "backend 'datapipe' (robo-shards on disk, a bounded episode buffer)",
        "backend 'video_stream' (video shards, ~20x smaller on disk, a bounded buffer)",
        f"{ROBOMIMIC_OPTIONS}.cache_dir on a disk with room",
    ),
    "lerobot": (
        "backend 'video_stream' (decodes the dataset's own videos, writes nothing, a bounded buffer)",
        "backend 'datapipe' with its shards on a disk with room (option shards or cache_dir)",
    ),
}


def compressed_cache_plan(
    size: DataSize,
    *,
    cache_dir: str | None,
    max_memory,
    codec: str,
    workers: int,
    option_prefix: str,
    available: Available | None = None,
    reusable: bool = False,
    reusable_in_ram: bool = False,
    ratio: float | None = None,
    batches: BatchesInFlight | None = None,
    keep: bool = False,
) -> Placement:
    """Place ``compressed_cache``'s store: with ``cache_dir``, file-backed there; without it and with ``keep``,
    file-backed in the default cache root when a store of this source and options is there already, or the disk has
    room for its worst case within the cache's size limit (kept between runs: the next start maps it instead of
    reading every episode again); else in RAM when its worst case fits ``max_memory`` and ``/dev/shm`` (and the
    host's memory), else file-backed in the cache root on local disk. A store on disk is mapped: the page cache
    keeps the frames training touches, and gives them back under memory pressure.

    Args:
        size: The dataset's sizes.
        cache_dir: The backend's ``cache_dir`` option.
        max_memory: The backend's ``max_memory`` option in bytes (``None``: not given): the RAM the store may take.
        codec: The frame codec (for the build-time estimate).
        workers: Threads compressing frames.
        option_prefix: How the user sets options (for messages).
        available: What the machine has (default: measured now).
        reusable: A store of this source and options is already on disk (nothing new to write).
        reusable_in_ram: One is already in this user's RAM directory, held by another run of the host: a store
            placed in RAM takes it as it is (nothing new to hold; ``max_memory`` is checked against it when found).
        ratio: The ratio the frames pack at, measured on a few of them (``storage.frame_layout.sampled_ratio``):
            the expected size on disk (``None``: ``core.data_size.EXPECTED_LOSSLESS_RATIO`` assumed). RAM placement
            never depends on it (the worst case must fit).
        batches: The batches in flight beside the store (``core.in_flight``), in host memory whichever the
            placement (``None``: none counted).
        keep: The backend's ``keep`` option: keep the store on disk between runs where the disk allows.

    Returns:
        The :class:`~robo_loaders_plugin.sdk.Placement`.
    """
    upper = size.store_upper_bytes()
    expected = size.store_expected_bytes() if ratio is None else size.store_expected_bytes(ratio)
    limit = max_memory
    build_s = size.build_seconds(codec, workers)
    host = size.other_bytes + (batches.host_bytes if batches is not None else 0)
    flying = f"; plus {batches.describe()}" if batches is not None else ""
    kept = ""
    if cache_dir is None:
        available = available or Available.measure(disk_dir=cache.default_root())
        kept = _kept_on_disk(available, upper, reusable) if keep else ""
    if cache_dir is None and kept != "kept":
        assert available is not None  # measured above
        if (limit is None or upper <= limit) and reusable_in_ram:
            bound = (
                f"the RAM file another run of this host built and holds in {available.shm_dir} (at most "
                f"{format_bytes(upper)}), shared{kept}{flying}"
            )
            return Placement(True, Footprint(host_bytes=host, bound=bound))
        if (limit is None or upper <= limit) and available.fits_shm(upper, host):
            bound = (
                f"a RAM file of at most {format_bytes(upper)} (every frame uncompressed; the codec makes it "
                f"smaller) in {available.shm_dir}, shared by the host's processes, rebuilt every run{kept}{flying}"
            )
            return Placement(True, Footprint(host_bytes=host, shm_bytes=upper, build_s=build_s, bound=bound))
        if limit is not None and upper > limit:
            why = f"{option_prefix}.max_memory={format_bytes(limit)} cannot hold up to {format_bytes(upper)}"
        else:
            shm = available.shm_bytes or 0
            why = (
                f"{available.shm_dir} ({format_bytes(shm)} free) and the host's memory "
                f"({format_bytes(available.host_bytes)} available) cannot hold up to {format_bytes(upper)} "
                f"with {1 - HEADROOM:.0%} to spare"
                + (
                    f" beside the batches in flight ({format_bytes(host - size.other_bytes)})"
                    if host > size.other_bytes
                    else ""
                )
            )
    else:
        why = ""
        if cache_dir is not None:
            available = available or Available.measure(
                disk_dir=cache.cache_root(cache_dir, f"{option_prefix}.cache_dir")
            )
    assert available is not None
    where = available.disk_dir
    at = f"an assumed {EXPECTED_LOSSLESS_RATIO}:1" if ratio is None else f"{ratio:.2f}:1, measured on sampled frames"
    if ratio == math.inf:
        at = "no size, the least the store needs however well they pack"
    between_runs = ", kept between runs of this source and these options" if kept == "kept" else ""
    bound = (
        f"a file-backed cache on local disk in {where}{between_runs}, mapped: the page cache holds the frames training "
        f"touches and gives them back under memory pressure; about {format_bytes(expected)} (frames at {at}; at "
        f"most {format_bytes(upper)}), the build stops before the disk runs out{flying}"
    )
    return Placement(
        False,
        Footprint(
            host_bytes=host,
            disk_bytes=0 if reusable else expected,
            disk_dir=where,
            build_s=None if reusable else build_s,
            bound=bound,
        ),
        why,
    )


def _kept_on_disk(available: Available, upper: int, reusable: bool) -> str:
    """Whether a store placed without ``cache_dir`` is kept in the default cache root: ``"kept"`` when a store of
    this source and options is there (nothing to write), or the disk has room for the store's worst case (every
    frame uncompressed: a build never stops on a full disk) within the cache's size limit (so it does not push the
    root past it); else why not, for the log line of the RAM store that is rebuilt every run instead."""
    where = available.disk_dir
    if where is None:
        return ""
    if reusable:
        return "kept"
    limit = cache.size_limit()
    if not available.fits_disk(upper):
        return f" (not kept on disk: {where} has no room for {format_bytes(upper)})"
    if limit is not None and upper > limit:
        return (
            f" (not kept on disk: {format_bytes(upper)} exceeds the cache's size limit {format_bytes(limit)}, "
            f"${cache.ENV_SIZE})"
        )
    return "kept"


def place(request: PlaceRequest, options) -> Placement:
    """Where the store goes (:func:`compressed_cache_plan`) on the machine ``request`` measured: a store to build
    on disk is first checked at the least it needs however well its frames pack, and only then are a few frames
    sampled for its expected size (``request.sample_frames``; a mixture's plan, from metadata only, assumes
    :data:`~robo_loaders_plugin.core.data_size.EXPECTED_LOSSLESS_RATIO`).

    Args:
        request: The sizes, the machine, the batches in flight, whether a store is on disk already.
        options: The backend's options (``cache_dir``, ``max_memory``, ``codec``, ``level``, ``filter``,
            ``build_workers``).

    Returns:
        The :class:`~robo_loaders_plugin.sdk.Placement`.

    Raises:
        core.footprint.ResourceRefused: a store to build on disk that no compression ratio makes fit.
    """

    def placed(ratio: float | None = None) -> Placement:
        return compressed_cache_plan(
            request.size,
            cache_dir=options.cache_dir,
            max_memory=options.max_memory,
            codec=options.codec,
            workers=options.build_workers or min(8, os.cpu_count() or 1),
            option_prefix=request.option_prefix,
            available=request.available,
            reusable=request.reusable,
            reusable_in_ram=request.reusable_in_ram,
            ratio=ratio,
            batches=request.batches,
            keep=options.keep,
        )

    plan = placed()
    if request.sample_frames is not None and not plan.in_ram and plan.footprint.disk_bytes:  # a build on disk
        check_fits(
            placed(math.inf).footprint,  # what no ratio makes smaller, checked before any frame is read
            request.available,
            backend=request.backend,
            option_prefix=request.option_prefix,
            alternatives=ALTERNATIVES.get(request.framework, ()),
        )
        from robo_loaders_plugin.storage.codec import FrameCodec
        from robo_loaders_plugin.storage.frame_layout import sampled_ratio

        plan = placed(sampled_ratio(request.sample_frames(), FrameCodec(options.codec, options.level, options.filter)))
    return plan
