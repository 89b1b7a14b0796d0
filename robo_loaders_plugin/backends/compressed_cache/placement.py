"""Where ``compressed_cache`` keeps its store (RAM shared by the host's processes, or file-backed in the cache
directory on disk), decided from the dataset's sizes and the machine before any data is read.
"""

from __future__ import annotations

import dataclasses
import math
import os

from robo_loaders_plugin.core.data_size import EXPECTED_LOSSLESS_RATIO, DataSize
from robo_loaders_plugin.core.footprint import HEADROOM, Available, Footprint, Planned
from robo_loaders_plugin.core.in_flight import BatchesInFlight
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.store_cache import keyed, recorded_fingerprint

logger = get_logger(__name__)


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
    ratio: float | None = None,
    batches: BatchesInFlight | None = None,
) -> StorePlan:
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
        ratio: The ratio the frames pack at, measured on a few of them (``storage.frame_layout.sampled_ratio``):
            the expected size on disk (``None``: ``core.data_size.EXPECTED_LOSSLESS_RATIO`` assumed). RAM placement
            never depends on it (the worst case must fit).
        batches: The batches in flight beside the store (``core.in_flight``), in host memory whichever the
            placement (``None``: none counted).

    Returns:
        The :class:`StorePlan`.
    """
    from robo_loaders_plugin.storage import cache

    upper = size.store_upper_bytes()
    expected = size.store_expected_bytes() if ratio is None else size.store_expected_bytes(ratio)
    limit = max_memory
    build_s = size.build_seconds(codec, workers)
    host = size.other_bytes + (batches.host_bytes if batches is not None else 0)
    flying = f"; plus {batches.describe()}" if batches is not None else ""
    if cache_dir is None:
        available = available or Available.measure(disk_dir=cache.default_root())
        if (limit is None or upper <= limit) and available.fits_shm(upper, host):
            bound = (
                f"a RAM file of at most {format_bytes(upper)} (every frame uncompressed; the codec makes it "
                f"smaller) in {available.shm_dir}, shared by the host's processes{flying}"
            )
            return StorePlan(True, None, "", Footprint(host_bytes=host, shm_bytes=upper, build_s=build_s, bound=bound))
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
        available = available or Available.measure(disk_dir=cache.cache_root(cache_dir, f"{option_prefix}.cache_dir"))
    where = available.disk_dir
    at = f"an assumed {EXPECTED_LOSSLESS_RATIO}:1" if ratio is None else f"{ratio:.2f}:1, measured on sampled frames"
    if ratio == math.inf:
        at = "no size, the least the store needs however well they pack"
    bound = (
        f"a file-backed cache on local disk in {where}, mapped: the page cache holds the frames training "
        f"touches and gives them back under memory pressure; about {format_bytes(expected)} (frames at {at}; at "
        f"most {format_bytes(upper)}), the build stops before the disk runs out{flying}"
    )
    return StorePlan(
        False,
        cache_dir,
        why,
        Footprint(
            host_bytes=host,
            disk_bytes=0 if reusable else expected,
            disk_dir=where,
            build_s=None if reusable else build_s,
            bound=bound,
        ),
    )


def place_store(
    size,
    *,
    kind: str,
    key_desc: dict,
    source_path: str,
    options,
    option_prefix: str,
    committed=None,
    ratio: float | None = None,
    batches: BatchesInFlight | None = None,
):
    """Where ``compressed_cache`` keeps its store (:func:`compressed_cache_plan`) on the machine as measured now,
    less what ``committed`` holds, not yet checked: the plan :func:`plan_store` checks, and a mixture sums.

    Args:
        size: The dataset's ``core.data_size.DataSize`` (from metadata).
        kind: The cache entry kind (``robomimic``, ``lerobot``).
        key_desc: The cache key (as :func:`open_or_build` gets it).
        source_path: The source file or directory (for the stat-only reuse check).
        options: The backend's options (``cache_dir``, ``max_memory``, ``codec``, ``build_workers``).
        option_prefix: How the user sets options.
        committed: A ``core.footprint.Footprint`` held beside this store (other components of a mixture).
        ratio: The ratio the frames pack at, measured on a few (:func:`plan_store`; ``None``: the assumed ratio,
            what a footprint from metadata takes).
        batches: The batches in flight beside the store (``None``: none counted).

    Returns:
        ``(plan, root, available)``: the :class:`StorePlan`, the cache directory it would use, and the machine as
        measured (before ``committed`` is taken off).
    """
    root = (
        cache.cache_root(options.cache_dir, f"{option_prefix}.cache_dir") if options.cache_dir else cache.default_root()
    )
    measured = Available.measure(disk_dir=root)
    available = measured.less(committed) if committed is not None else measured
    workers = options.build_workers or min(8, os.cpu_count() or 1)

    def placed(reusable: bool) -> StorePlan:
        return compressed_cache_plan(
            size,
            cache_dir=options.cache_dir,
            max_memory=options.max_memory,
            codec=options.codec,
            workers=workers,
            option_prefix=option_prefix,
            available=available,
            reusable=reusable,
            ratio=ratio,
            batches=batches,
        )

    plan = placed(False)
    if not plan.in_ram and cache.holds_current(root, kind, keyed(key_desc), source_path, recorded_fingerprint, ".rlc"):
        plan = placed(True)
    return plan, root, measured


def planned_store(plan: StorePlan, available: Available, alternatives, batches: BatchesInFlight | None) -> Planned:
    """The store's plan as ``BackendSpec.footprints`` gives it: what stays held beside other datasets is the store,
    not the batches in flight (a mixture's batches are counted once, not once per component).

    Args:
        plan: The :class:`StorePlan` (:func:`place_store`).
        available: The machine as measured.
        alternatives: What would fit instead.
        batches: The batches in flight the plan counted (``None``: none).

    Returns:
        A ``core.footprint.Planned``.
    """
    fp = plan.footprint
    held = None if batches is None else dataclasses.replace(fp, host_bytes=fp.host_bytes - batches.host_bytes)
    return Planned(fp, available, tuple(alternatives), held)


def plan_store(
    size,
    *,
    kind: str,
    key_desc: dict,
    source_path: str,
    options,
    option_prefix: str,
    alternatives,
    frame_ratio=None,
    batches: BatchesInFlight | None = None,
):
    """Where ``compressed_cache`` keeps its store (:func:`place_store`), checked against what the machine has
    before any data is read (a store built on disk: what it needs however well its frames pack, then its estimate
    at the ratio of a few sampled frames); a store spilled to disk is said in the log.

    Args:
        size: The dataset's ``core.data_size.DataSize`` (from metadata).
        kind: The cache entry kind (``robomimic``, ``lerobot``).
        key_desc: The cache key (as :func:`open_or_build` gets it).
        source_path: The source file or directory (for the stat-only reuse check).
        options: The backend's options (``cache_dir``, ``max_memory``, ``codec``, ``build_workers``).
        option_prefix: How the user sets options.
        alternatives: What would fit instead, for the refusal.
        frame_ratio: Measures the ratio the frames pack at (a few sampled and compressed), called only for a store
            to build on disk, once the disk was found to hold what no ratio makes smaller (``None``: the assumed
            ratio).
        batches: The batches in flight beside the store (``core.in_flight``; ``None``: none counted).

    Returns:
        ``(plan, cache_dir)``: the :class:`StorePlan` and the ``cache_dir`` to pass to :func:`open_or_build`
        (``None`` for a RAM store; the default cache directory for a spilled one).

    Raises:
        core.footprint.ResourceRefused: the store fits neither RAM nor the disk.
    """
    from robo_loaders_plugin.core.footprint import check_fits

    def placed(ratio: float | None = None):
        return place_store(
            size,
            kind=kind,
            key_desc=key_desc,
            source_path=source_path,
            options=options,
            option_prefix=option_prefix,
            ratio=ratio,
            batches=batches,
        )

    def check(plan: StorePlan, available) -> None:
        check_fits(
            plan.footprint,
            available,
            backend="compressed_cache",
            option_prefix=option_prefix,
            alternatives=alternatives,
        )

    plan, root, available = placed()
    if frame_ratio is not None and not plan.in_ram and plan.footprint.disk_bytes:  # a build on disk: measured
        least, _, measured_now = placed(math.inf)  # what no ratio makes smaller, checked before any frame is read
        check(least, measured_now)
        plan, root, available = placed(frame_ratio())
    check(plan, available)
    if plan.in_ram:
        return plan, None
    if plan.spilled:
        logger.info(
            f"compressed_cache: spilled to disk: {plan.spilled}; the cache is a file-backed store in {root} "
            "(mapped; the page cache keeps the frames training touches), byte-identical to a RAM one"
        )
    return plan, root
