"""Where a run's ``gpu_resampler`` tiers come from: the entry kept in the cache (``stored_tiers``, mapped), or,
when the disk cannot hold that entry, the episodes read into memory as before the tiers were kept.

Why a module of its own: both frameworks' factories (``robomimic``, ``lerobot``) take their tiers here, and it uses
both ``stored_tiers`` (the entry) and ``tiers`` (``TieredFrames``), which uses ``stored_tiers`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo

logger = get_logger(__name__)


def kept_or_filled(
    *,
    key: dict,
    source,
    size,
    plan,
    host_limit: int | None,
    episodes: Callable[[], Iterator[dict]],
    infos_of: Callable[[dict], dict[str, FieldInfo]],
    options,
    where: str,
    device,
    names,
):
    """The tiers of a dataset for a run: from the cache entry (``stored_tiers.stored_tiers``: mapped, or built then
    mapped), or, when the disk cannot hold the entry and the plan keeps every tier in memory, filled in memory as
    before the tiers were kept (one line says they were not kept and why: INFO, or WARNING when ``cache_dir`` was
    set, since that directory was chosen and cannot hold them): a run that worked in RAM is not refused for a full
    disk. A plan that spills the compressed tier to disk needs the disk anyway: its refusal stands.

    Args:
        key: As ``stored_tiers.stored_tiers``.
        source: As ``stored_tiers.stored_tiers``.
        size: As ``stored_tiers.stored_tiers``.
        plan: As ``stored_tiers.stored_tiers``.
        host_limit: As ``stored_tiers.stored_tiers``.
        episodes: As ``stored_tiers.stored_tiers`` (called again to fill in memory).
        infos_of: As ``stored_tiers.stored_tiers``.
        options: The backend's options (``cache_dir``).
        where: How the user sets options, for messages.
        device: The training device.
        names: Each episode's name, for messages.

    Returns:
        ``(frames, held, hold, reused)``: the ``tiers.TieredFrames``; where they came from, for the log line; the
        entry's hold (``None``: nothing kept); whether the entry was found from an earlier start (``None``: nothing
        kept), for ``Serving.reused``.

    Raises:
        ResourceRefused: the disk cannot hold a plan that spills, or the tiers outgrow their budget while filling.
        SourceError: an episode holds a field another way than the first (naming the source and the episode).
        CacheError: the cache root cannot be created, or another process's build did not finish in time.
    """
    from robo_loaders_plugin.backends.gpu_resampler.tensors import EpisodeFieldMismatch

    try:
        return _kept_or_filled(key, source, size, plan, host_limit, episodes, infos_of, options, where, device, names)
    except EpisodeFieldMismatch as exc:
        raise exc.named(f"gpu_resampler tiers of {source.path}", names) from None


def _kept_or_filled(key, source, size, plan, host_limit, episodes, infos_of, options, where, device, names):
    from robo_loaders_plugin.backends.gpu_resampler.stored_tiers import RawCopyRefused, stored_tiers
    from robo_loaders_plugin.backends.gpu_resampler.tiers import TieredFrames
    from robo_loaders_plugin.core.footprint import ResourceRefused

    lengths = np.asarray(size.lengths, dtype=np.int64)
    # a CPU run reads every kept raw file whole into host memory and checks it there (OpenedTiers.copy_raw): the
    # start's checksum of the same files read each twice (~0.3 s at 400 components); a refused copy discards the
    # entry, which is then built again here, once, with the start checking every file
    on_copy = getattr(device, "type", str(device)) == "cpu"
    for attempt in (0, 1):
        try:
            entry, hold, reused, kept_plan = stored_tiers(
                key=key,
                source=source,
                size=size,
                plan=plan,
                episodes=episodes,
                infos_of=infos_of,
                options=options,
                where=where,
                host_limit=host_limit,
                raw_checked_when_copied=on_copy and attempt == 0,
            )
        except ResourceRefused as exc:
            if plan.spill_dir is not None or not any(s[0] == "disk" for s in exc.shortfalls):
                raise
            explicit = getattr(options, "cache_dir", None) is not None
            (logger.warning if explicit else logger.info)(
                f"gpu_resampler: the tiers are held in memory only, not kept for the next start ({exc})"
            )
            filled = _filled(lengths, plan, host_limit, episodes, infos_of, device, names)
            return filled, "not kept (disk full)", None, None
        try:
            frames = TieredFrames.from_entry(
                entry, lengths, kept_plan, device, host_limit=host_limit, spill_dir=kept_plan.spill_dir, names=names
            )
        except RawCopyRefused as exc:
            if attempt:
                raise
            logger.info(f"gpu_resampler: {exc.path} ({exc.field}) {exc.what}; rebuilding the kept tiers")
            if hold is not None:
                hold.release()
            continue
        finally:
            entry.close()  # the blobs' files no tier took
        return frames, f"{'mapped from' if reused else 'built in'} {entry.directory}", hold, bool(reused)
    raise AssertionError("unreachable: the second attempt returns or raises")


def _filled(lengths, plan, host_limit, episodes, infos_of, device, names):
    """Every episode read into in-memory tiers (``TieredFrames.fill``), none kept on disk; frames that compress
    worse than planned have no disk to move to, so the fill stops with both sizes."""
    from robo_loaders_plugin.backends.gpu_resampler.tiers import TieredFrames

    each = episodes()
    first = next(each)
    frames = TieredFrames(lengths, infos_of(first), plan, device, host_limit=host_limit, names=names)
    frames.fill(0, first)
    del first  # not held beside the tiers (an L480 episode is 1.66 GB decoded)
    for unit, fields in enumerate(each, start=1):
        frames.fill(unit, fields)
        del fields
    return frames
