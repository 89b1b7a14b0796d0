"""Building (or reusing) an episode store: the part every framework adapter shares.

The adapter supplies its source (for the fingerprint), a description of every option the content depends on, and a
function that writes the episodes; this module decides where the file goes (a cache directory, ``storage.cache``,
or RAM shared by the processes of the host, ``storage.ramfile``), reuses a file only while its source is unchanged
(``storage.fingerprint``) and its data checksum holds, enforces ``max_memory``, and publishes atomically or leaves
nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from robo_loaders_plugin.core.errors import StaleSourceError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes, plural
from robo_loaders_plugin.storage import cache, ramfile
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.fingerprint import Fingerprint
from robo_loaders_plugin.storage.store import (
    FORMAT_VERSION,
    EpisodeStore,
    MemoryBudgetExceeded,
    StoreError,
    StoreWriter,
)

logger = get_logger(__name__)

SOURCE_KEY = "source_fingerprint"


def _write(
    path: str, write: Callable[[StoreWriter], None], codec: FrameCodec, max_bytes, workers, meta: dict, guard=None
):
    writer = StoreWriter(path, codec, max_bytes=max_bytes, workers=workers, guard=guard)
    try:
        write(writer)
        writer.finish(meta)
    except BaseException:
        writer.abort()
        raise


VERIFIED_METHOD = "store-data-crc32-v1"


def _verified_stamp(path: str) -> str:
    """Where the stamp of a verified store lives: ``.verified/`` beside it (hidden: not a cache entry)."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), ".verified", os.path.basename(path) + ".json")


def _stamp_doc(path: str) -> dict:
    from robo_loaders_plugin.storage.fingerprint import stat_files

    return {"method": VERIFIED_METHOD, "files": [list(f) for f in stat_files(path)]}


def verified_before(path: str) -> bool:
    """Whether the store at ``path`` passed :meth:`EpisodeStore.verify` as it is now (same size, mtime, inode and
    ctime: the fingerprints' rule, ``storage.fingerprint``).

    Why: the check reads the whole file (a million 64x64 frames: gigabytes) at every start that reuses a cache;
    a file whose stat is unchanged since it passed holds the same bytes, as a source with an unchanged stat is not
    digested again.

    Args:
        path: The store file.

    Returns:
        True when a stamp records this very version of the file.
    """
    import json

    try:
        with open(_verified_stamp(path)) as f:
            return json.load(f) == _stamp_doc(path)
    except (OSError, ValueError):
        return False


def mark_verified(path: str) -> None:
    """Record that the store at ``path`` passed its data check; never an error (a missing stamp only means the
    next reuse checks again).

    Args:
        path: The store file, as it is now.
    """
    from robo_loaders_plugin.core.files import atomic_write_json

    try:
        os.makedirs(os.path.dirname(_verified_stamp(path)), exist_ok=True)
        atomic_write_json(_verified_stamp(path), _stamp_doc(path))
    except OSError:
        pass


def recorded_fingerprint(path: str) -> Fingerprint | None:
    """The source fingerprint a store recorded when it was built, to reuse it only while its source is unchanged.

    Args:
        path: The store file.

    Returns:
        The :class:`Fingerprint`, or ``None`` when the store cannot be opened or records none.
    """
    try:
        d = EpisodeStore(path).meta.get(SOURCE_KEY)
        return Fingerprint.from_dict(d) if d else None
    except (StoreError, StaleSourceError):
        return None


def keyed(key_desc: dict) -> dict:
    """The cache key of a store: the adapter's key with the store format, so that a store written in another
    format gets another entry and is never read as this one.

    Args:
        key_desc: The adapter's key (the source and every option the content depends on).

    Returns:
        The key with ``store_format``.
    """
    return dict(key_desc, store_format=FORMAT_VERSION)


def retire_earlier_formats(root: str, kind: str, key_desc: dict) -> list[str]:
    """Remove the entries of this source and options written in an earlier store format that nothing uses.

    Why: the format is part of the cache key (:func:`keyed`), so a new format builds a new entry and never finds
    the old one, which would hold its disk (53 GB of channels-first frames at L480) until the size limit pruned it.

    Args:
        root: The cache root.
        kind: The entry kind.
        key_desc: The adapter's key (without ``store_format``).

    Returns:
        The paths removed (entries in use or being built are kept).
    """
    removed = []
    for old in range(1, FORMAT_VERSION):
        prefix = f"{kind}-{cache.short_hash(dict(key_desc, store_format=old))}-"
        for e in cache.entries(root):
            if e.name.startswith(prefix) and e.name.endswith(".rlc") and e.remove():
                removed.append(e.path)
    return removed


def open_or_build(
    *,
    kind: str,
    source,
    key_desc: dict,
    write: Callable[[StoreWriter], None],
    codec: FrameCodec,
    cache_dir: str | None,
    max_memory,
    build_workers: int | None,
    meta: dict,
    option_prefix: str,
    description: str,
    disk_estimate: int | None = None,
):
    """Open the store of this source and these options, reusing one while its source is unchanged and its data
    checksum holds, or build it: in RAM shared by the host's processes (``storage.ramfile``) without
    ``cache_dir``, else in the cache directory. A store that cannot be used is rebuilt, with a log line; in the
    cache directory, this source's stores of an earlier format are removed first (:func:`retire_earlier_formats`),
    with a log line each.

    Args:
        kind: The cache entry kind (``robomimic``, ``lerobot``), first part of its name.
        source: The source; has ``fingerprint(recorded=None)``.
        key_desc: Names the source and every option the content depends on (one entry per distinct value).
        write: ``write(writer)`` adds every episode to the :class:`StoreWriter`.
        codec: The frame codec.
        cache_dir: The cache directory of a store on disk (``None``: a RAM store). A persisted store's data is
            verified once per version of its file; a RAM one at every reuse.
        max_memory: The ``max_memory`` option in bytes (converted when the options were resolved; ``None``: no
            limit): the build stops beyond it, and a reused store larger than it is refused.
        build_workers: Threads compressing frames (``None``: the CPU count, at most 8).
        meta: Metadata recorded in the store (the source fingerprint is added).
        option_prefix: How the user sets options, for messages.
        description: What is built, for the cache's log lines.
        disk_estimate: The footprint's estimate of a store on disk, for the message when a build stops before the
            disk falls below its reserve (``core.footprint.DiskGuard``; ``None``: not said).

    Returns:
        ``(store, hold, reused)``: the open :class:`EpisodeStore`; ``hold`` keeps the file alive (RAM) or in use
        (cache) while it lives; whether it was reused rather than built.

    Raises:
        MemoryBudgetExceeded: the build exceeded ``max_memory``, or a reused store is larger than it.
        CacheError: another process's build did not finish within the lock timeout.
        core.footprint.ResourceRefused: a build on disk would leave less than the disk's reserve free.
    """
    max_bytes = max_memory
    workers = build_workers or min(8, os.cpu_count() or 1)
    key_desc_given, key_desc = key_desc, keyed(key_desc)

    def usable(path: str) -> bool:
        try:
            store = EpisodeStore(path)
            if not (cache_dir and verified_before(path)):  # a persisted cache: checked once per version of its file
                store.verify()
                if cache_dir:
                    mark_verified(path)
            return True
        except StoreError as exc:
            logger.warning(f"ignoring unusable cache {path} ({exc}); rebuilding")
            return False

    def build(path: str, fp: Fingerprint) -> None:
        guard = None
        if cache_dir:
            from robo_loaders_plugin.core.footprint import DiskGuard

            guard = DiskGuard(path, f"building the compressed cache {path}", disk_estimate)
        with ramfile.building(path) if not cache_dir else contextlib.nullcontext():
            _write(path, write, codec, max_bytes, workers, dict(meta, **{SOURCE_KEY: fp.as_dict()}), guard)

    if not cache_dir:  # RAM, one copy per host shared by every rank and run that needs it (storage.ramfile)
        root = ramfile.ram_root()
        ramfile.sweep_stale(root)
        entry, use, reused, _ = cache.obtain(
            root,
            kind,
            key_desc,
            source.fingerprint,
            recorded_fingerprint,
            usable,
            build,
            description,
            suffix=".rlc",
            housekeeping=False,
        )
        hold = ramfile.RamHold(entry, use)
    else:
        root = cache.cache_root(cache_dir, f"{option_prefix}.cache_dir")
        for path in retire_earlier_formats(root, kind, key_desc_given):
            logger.info(
                f"removed {path}: the compressed cache of this source and these options in an earlier store format "
                f"(written by an earlier robo-loaders, camera frames channels first); it is built again in format "
                f"{FORMAT_VERSION} (camera frames channels last, which pack smaller)"
            )
        entry, hold, reused, _ = cache.obtain(
            root, kind, key_desc, source.fingerprint, recorded_fingerprint, usable, build, description, suffix=".rlc"
        )
    store = EpisodeStore(entry.path)
    if cache_dir and not reused:  # just written (its CRC computed as it was): the next run need not read it back
        mark_verified(entry.path)
    data_nbytes = store.header["data_nbytes"]
    if reused and max_bytes is not None and data_nbytes > max_bytes:
        # max_memory is not part of the cache key (it does not change the content), so a cache built by a run with a
        # larger budget is found here: this run's budget still holds
        store.close()
        hold.release()
        budget, held = format_bytes(max_bytes), format_bytes(data_nbytes)
        if budget == held:  # rounded alike: the exact counts say which is larger
            budget, held = f"{budget} ({max_bytes} bytes)", f"{held} ({data_nbytes} bytes)"
        raise MemoryBudgetExceeded(
            f"{option_prefix}.max_memory={budget}, but the cache of this source and these options, "
            f"built by an earlier or concurrent run, holds {held} ({entry.path}); raise "
            "max_memory (the cache is shared, not copied), or build a smaller one of its own: fewer obs keys or "
            "demos, or a stronger codec (codec='zstd')"
        )
    return store, hold, reused


def summarize(store: EpisodeStore, n_episodes: int, n_samples: int, reused: bool, episode: str = "episode") -> str:
    """The build summary of a compressed store, for the backend's log line: episodes, samples, the file's size and
    the frames' compression.

    Args:
        store: The open store.
        n_episodes: Episodes served.
        n_samples: Samples served.
        reused: Whether the store was reused rather than built.
        episode: What the framework calls an episode (robomimic: ``demo``).

    Returns:
        One line.
    """
    st = store.stats
    where = f"{'reused ' if reused else ''}{store.path}"
    codec = store.header.get("codec", {}).get("codec", "?")
    if st["decoded_frame_nbytes"]:
        frames = (
            f"{codec}: frames {format_bytes(st['decoded_frame_nbytes'])} -> "
            f"{format_bytes(st['compressed_nbytes'])}, {st['decoded_frame_nbytes'] / st['compressed_nbytes']:.2f}x"
        )
    else:  # every field under FRAME_MIN_BYTES a step: nothing was compressed as frames
        frames = "no camera frames"
    return (
        f"{plural(n_episodes, episode)}, {plural(n_samples, 'sample')}, cache {format_bytes(store.file_nbytes)} "
        f"({frames}; low-dim {format_bytes(st['raw_nbytes'])}) at {where}"
    )
