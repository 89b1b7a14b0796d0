"""``datapipe`` on robomimic: SequenceDataset's samples from lossless robo-shards (converted on first use), passes
ordered by the torchdata pipeline.
"""

from __future__ import annotations

import os

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.pipeline.options import PassOptions, open_shards
from robo_loaders_plugin.robomimic.buffered import buffer_sizing, demo_units, fit_buffer, shard_samples
from robo_loaders_plugin.robomimic.sequence import OPTION_PREFIX, sequence_options
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

# what fits when this backend does not (its refusal names these)
ALTERNATIVES = (
    "backend 'video_stream' (video shards, ~20x smaller on disk, a bounded buffer)",
    f"{OPTION_PREFIX}.cache_dir on a disk with room",
)


def datapipe_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """SequenceDataset's samples from lossless robo-shards (converted on first use), passes ordered by the
    torchdata pipeline (``datapipe``). The episode buffer is sized in bytes from metadata and checked against the
    machine before anything is read or converted.

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`RobomimicShardSamples`.

    Raises:
        RoboLoadersError: bad sequence settings, or ``shards`` converted from another framework's dataset.
        SourceError: the file is not a valid robomimic file, the filter key selects no demos, or the shards lack a
            selected demo or key.
        StaleSourceError: given ``shards`` were converted from other data (with ``check_source``).
        BackendOptionError: the shards hold video (those are ``video_stream``'s).
        core.footprint.ResourceRefused: the buffer does not fit host memory, or a conversion on first use does not
            fit the disk.
    """
    opts, path = sequence_options(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    sizing = buffer_sizing(config, source, opts, filter_by_attribute, held_ratio=1.0)
    # long demos are buffered in parts (frames.chunks) read from the shards' parts of them (format.part_bounds)
    units = demo_units(sizing.lengths, sizing.frame_step)
    passes, bound = fit_buffer(sizing, PassOptions.of(options), "datapipe", units)

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.robomimic.convert import convert_robomimic

        convert_robomimic(
            path, out_dir, num_workers=options.convert_workers, fingerprint=fingerprint, cache_dir=options.cache_dir
        )

    def measured_ratio():  # only when converting on first use
        from robo_loaders_plugin.robomimic.convert import frame_ratio

        return frame_ratio(source)

    reader, hold = open_shards(
        framework="robomimic",
        source=source,
        shards=options.shards,
        cache_dir=options.cache_dir,
        check_source=options.check_source,
        key_desc={"source": os.path.realpath(path), "v": 2},
        convert=convert,
        option_prefix=OPTION_PREFIX,
        convert_hint=f"'robo-loaders convert robomimic {path} OUT_DIR'",
        size=sizing.whole,
        frame_ratio=measured_ratio,
        backend="datapipe",
        alternatives=ALTERNATIVES,
    )
    if reader.dataset["metadata"].get("video"):
        raise BackendOptionError(
            f"{reader.dir} holds camera frames as lossy video (converted with --frames); "
            "datapipe serves lossless shards only: train from these with "
            "train.data_backend='video_stream' (source: this directory)"
        )
    return shard_samples(
        config,
        opts,
        path,
        filter_by_attribute,
        reader,
        hold,
        (passes, bound),
        "datapipe",
        refit=lambda: fit_buffer(sizing, PassOptions.of(options), "datapipe"),
        unit_step=sizing.frame_step if units is not None else None,
    )


def datapipe_footprint(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, committed):
    """What this file's episode buffer will hold, sized as :func:`datapipe_dataset` sizes it, from metadata only
    (``BackendSpec.footprints``: a mixture checks its components' sum once, before building any).

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object.
        committed: What other datasets hold beside this one (the buffer is bounded in bytes whatever they hold).

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        SourceError: not a robomimic file, or no demo selected.
    """
    from robo_loaders_plugin.robomimic.buffered import file_buffer_footprint

    return file_buffer_footprint(
        config, obs_keys, filter_by_attribute, dataset_path, options, held_ratio=1.0, parts=True
    )
