"""``compressed_cache`` on LeRobot: every episode read (video decoded) once into a compressed episode store
shared by the host's processes; LeRobot's DataLoader workers serve items from it.
"""

from __future__ import annotations

from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.placement import plan_store
from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.in_flight import indexed_in_flight
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.frames.store import StoreFrames
from robo_loaders_plugin.lerobot.dataset import (
    OPTION_PREFIX,
    LeRobotSamples,
    check_rows_match,
    native_source,
    sample_bytes,
)
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.frame_layout import sampled_ratio
from robo_loaders_plugin.storage.store_cache import open_or_build, summarize

# what fits when this backend does not (its refusal names these)
ALTERNATIVES = (
    "backend 'video_stream' (decodes the dataset's own videos, writes nothing, a bounded buffer)",
    "backend 'datapipe' with its shards on a disk with room (option shards or cache_dir)",
)


def compressed_cache_dataset(native, *, options):
    """Every episode read (video decoded) once into a compressed episode store shared by the host's processes;
    LeRobot's DataLoader workers serve its items (``compressed_cache``). The store is placed (RAM file or
    file-backed on disk) from metadata before anything is read, and reused from the cache directory while the
    source and options are unchanged.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`~robo_loaders_plugin.lerobot.dataset.LeRobotSamples` over the store.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported (``check_supported``), its rows differ from LeRobot's
            (``check_rows_match``), or a reused store holds other episodes than those selected.
        core.footprint.ResourceRefused: the store fits neither RAM nor the disk.
    """
    frame_codec = FrameCodec(options.codec, options.level, options.filter)
    source, settings, key = _metadata(native, options)
    size = source.data_size(native.episodes)
    batches = indexed_in_flight(sample_bytes(size, settings))
    plan, cache_dir = plan_store(
        size,
        kind="lerobot",
        key_desc=key,
        source_path=str(source.root),
        options=options,
        option_prefix=OPTION_PREFIX,
        alternatives=ALTERNATIVES,
        frame_ratio=lambda: sampled_ratio(source.sample_frames(native.episodes), frame_codec),
        batches=batches,
    )
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays)

    def write(writer):
        for ep, _, _ in tqdm(
            episodes.runs, desc=f"compressed_cache [{native.repo_id}]", unit="episode", mininterval=0.5
        ):
            writer.add_episode(f"episode_{ep}", *episodes.read(ep))

    store, hold, reused = open_or_build(
        kind="lerobot",
        source=source,
        key_desc=key,
        write=write,
        codec=frame_codec,
        cache_dir=cache_dir,
        max_memory=options.max_memory if plan.in_ram else None,
        build_workers=options.build_workers,
        option_prefix=OPTION_PREFIX,
        meta={"source": str(source.root), "framework": "lerobot"},
        description=f"compressed_cache of {source.root}",
        disk_estimate=plan.footprint.disk_bytes or None,
    )
    if [e["name"] for e in store.episodes] != [f"episode_{ep}" for ep, _, _ in episodes.runs]:
        raise SourceError(f"{store.path} does not hold the episodes {native.repo_id} selects; delete it")
    summary = (
        summarize(store, len(episodes.runs), sum(e - s for _, s, e in episodes.runs), reused)
        + f"; bounded: {plan.footprint.bound}"
    )
    return LeRobotSamples(
        native,
        StoreFrames(store, hold),
        episodes.runs,
        episodes.columns,
        source.video_keys,
        source.image_keys,
        backend_name="compressed_cache",
        location=store.path,
        serving=Serving(summary, hold=hold),
    )


def _metadata(native, options):
    """``(source, settings, key)``: the dataset's source and LeRobot settings (``meta/`` only) and the cache key."""
    source, settings = native_source(native)
    key = {
        "root": str(source.root),
        "episodes": native.episodes,
        "codec": FrameCodec(options.codec, options.level, options.filter).as_dict(),
        "tolerance_s": settings.tolerance_s,
        "video_backend": settings.video_backend,
        "v": 2,
    }
    return source, settings, key


def compressed_cache_footprint(native, *, options, committed):
    """What the store of this dataset will need, placed as :func:`compressed_cache_dataset` places it, with
    ``committed`` held beside it (``BackendSpec.footprints``): ``meta/`` only, nothing read or built.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built.
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported.
    """
    from robo_loaders_plugin.backends.compressed_cache.placement import place_store, planned_store

    source, settings, key = _metadata(native, options)
    size = source.data_size(native.episodes)
    batches = indexed_in_flight(sample_bytes(size, settings))
    plan, _, available = place_store(
        size,
        kind="lerobot",
        key_desc=key,
        source_path=str(source.root),
        options=options,
        option_prefix=OPTION_PREFIX,
        committed=committed,
        batches=batches,
    )
    return planned_store(plan, available, ALTERNATIVES, batches)
