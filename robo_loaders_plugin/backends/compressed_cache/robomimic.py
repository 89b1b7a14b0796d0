"""``compressed_cache`` on robomimic: every demo read once into a compressed episode store shared by the host's
processes, served by index.
"""

from __future__ import annotations

import os

from tqdm.auto import tqdm

from robo_loaders_plugin.backends.compressed_cache.placement import plan_store
from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.in_flight import indexed_in_flight
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.frames.store import StoreFrames
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.robomimic.sequence import (
    OPTION_PREFIX,
    data_size,
    read_demo,
    sample_bytes,
    sequence_options,
    training_loop_of,
)
from robo_loaders_plugin.sources.robomimic_hdf5 import FRAME_MIN_BYTES, RobomimicHdf5
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.frame_layout import sampled_ratio
from robo_loaders_plugin.storage.store_cache import open_or_build, summarize
from robo_loaders_plugin.windows.robomimic import SequenceWindows

# what fits when this backend does not (its refusal names these)
ALTERNATIVES = (
    "backend 'datapipe' (robo-shards on disk, a bounded episode buffer)",
    "backend 'video_stream' (video shards, ~20x smaller on disk, a bounded buffer)",
    f"{OPTION_PREFIX}.cache_dir on a disk with room",
)


def compressed_cache_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """Every demo read once into a compressed episode store shared by the host's processes (``compressed_cache``).
    The store is placed (RAM file or file-backed on disk) from metadata before anything is read, and reused from
    the cache directory while the source and options are unchanged.

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`~robo_loaders_plugin.robomimic.dataset.RobomimicSamples` over the store.

    Raises:
        RoboLoadersError: bad sequence settings (:func:`sequence_options`), or a reused store holds other demos.
        SourceError: the file is not a valid robomimic file, or the filter key selects no demos.
        core.footprint.ResourceRefused: the store fits neither RAM nor the disk.
    """
    opts, path, source, demos, size, key = _metadata(config, obs_keys, filter_by_attribute, dataset_path, options)
    frame_codec = FrameCodec(options.codec, options.level, options.filter)
    batches = indexed_in_flight(sample_bytes(size, opts), training_loop_of(config))
    split = filter_by_attribute or "all demos"

    def write(writer):
        with source.open() as f:
            for demo in tqdm(demos, desc=f"compressed_cache [{split}]", unit="demo", mininterval=0.5):
                arrays = read_demo(source, f, demo, opts, source.length(f, demo))
                writer.add_episode(
                    demo,
                    arrays,
                    {n for n in opts.field_names()[len(opts.dataset_keys) :] if arrays[n][0].nbytes >= FRAME_MIN_BYTES},
                )

    plan, cache_dir = plan_store(
        size,
        kind="robomimic",
        key_desc=key,
        source_path=path,
        options=options,
        option_prefix=OPTION_PREFIX,
        alternatives=ALTERNATIVES,
        frame_ratio=lambda: measured_ratio(source, demos, size, frame_codec),
        batches=batches,
    )
    store, hold, reused = open_or_build(
        kind="robomimic",
        source=source,
        key_desc=key,
        write=write,
        codec=frame_codec,
        cache_dir=cache_dir,
        max_memory=options.max_memory if plan.in_ram else None,
        build_workers=options.build_workers,
        option_prefix=OPTION_PREFIX,
        meta={"source": os.path.realpath(path), "framework": "robomimic"},
        description=f"compressed_cache of {path} [{split}]",
        disk_estimate=plan.footprint.disk_bytes or None,
    )
    names = [e["name"] for e in store.episodes]
    if names != demos:
        raise RoboLoadersError(f"{store.path} holds demos {names[:3]}..., expected {demos[:3]}...; delete it")
    frames = StoreFrames(store, hold)
    for name in opts.field_names():
        frames.info(name)  # one dtype and step shape per key across demos, or a clear error now
    windows = SequenceWindows(frames.lengths, opts)
    summary = (
        summarize(store, len(demos), len(windows), reused, "demo") + f", batches built by {options.loader}; "
        f"bounded: {plan.footprint.bound}"
    )
    return RobomimicSamples(
        frames,
        windows,
        demos=demos,
        hdf5_path=path,
        filter_by_attribute=filter_by_attribute,
        backend_name="compressed_cache",
        location=f"{store.path} ({store.file_nbytes} bytes)",
        serving=Serving(summary, hold=hold),
    )


def measured_ratio(source: RobomimicHdf5, demos: list[str], size, codec: FrameCodec) -> float | None:
    """The ratio the selected demos' camera frames pack at, measured on a few of them (the disk estimate of a store
    spilled to disk).

    Args:
        source: The HDF5 source.
        demos: The demos served.
        size: Their ``DataSize`` (its camera fields are sampled).
        codec: The store's frame codec.

    Returns:
        Decoded bytes / compressed bytes, or ``None`` without camera frames.
    """
    with source.open() as f:
        return sampled_ratio(source.sample_frames(f, demos, size.frame_step_bytes), codec)


def _metadata(config, obs_keys, filter_by_attribute, dataset_path, options):
    """What the store is planned from, read from the file's metadata only: ``(opts, path, source, demos, size,
    key)`` (the sequence settings, the file, its source, the selected demos, their ``DataSize`` and the cache
    key)."""
    opts, path = sequence_options(config, obs_keys, dataset_path)
    frame_codec = FrameCodec(options.codec, options.level, options.filter)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = data_size(source, f, demos, opts)
    key = {
        "source": os.path.realpath(path),
        "demos": demos,
        "fields": opts.field_names(),
        "float32_dataset_keys": opts.hdf5_cache_mode in ("all", "low_dim"),
        "codec": frame_codec.as_dict(),
        "frame_min_bytes": FRAME_MIN_BYTES,
        "v": 2,
    }
    return opts, path, source, demos, size, key


def compressed_cache_footprint(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, committed):
    """What the store of this file will need, placed as :func:`compressed_cache_dataset` places it, with
    ``committed`` held beside it (``BackendSpec.footprints``): metadata only, nothing built.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        RoboLoadersError: bad sequence settings; SourceError: not a robomimic file, or no demo selected.
    """
    from robo_loaders_plugin.backends.compressed_cache.placement import place_store, planned_store

    opts, path, _, _, size, key = _metadata(config, obs_keys, filter_by_attribute, dataset_path, options)
    batches = indexed_in_flight(sample_bytes(size, opts), training_loop_of(config))
    plan, _, available = place_store(
        size,
        kind="robomimic",
        key_desc=key,
        source_path=path,
        options=options,
        option_prefix=OPTION_PREFIX,
        committed=committed,
        batches=batches,
    )
    return planned_store(plan, available, ALTERNATIVES, batches)
