"""``video_stream`` on robomimic: SequenceDataset's samples from video robo-shards ('robo-loaders convert robomimic
IN OUT --frames h264'), each demo's segment decoded once per pass.
"""

from __future__ import annotations

import os

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.pipeline.options import PassOptions, open_shards
from robo_loaders_plugin.robomimic.buffered import buffer_sizing, fit_buffer, shard_samples
from robo_loaders_plugin.robomimic.sequence import OPTION_PREFIX, rgb_keys, sequence_options
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames, VideoSegmentFrames


def video_stream_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """robomimic from video shards (``robo-loaders convert robomimic IN OUT --frames h264``): datapipe's samples
    with each episode's camera segments decoded once per load, in order (lossy frames, everything else
    byte-identical).

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``);
            ``options.source``: the video shards (default: converted on first use into the cache directory, H.264 at
            its default crf).

    Returns:
        A :class:`RobomimicShardSamples` whose camera frames are decoded from video.

    Raises:
        RoboLoadersError: bad sequence settings, or shards converted from another framework's dataset.
        SourceError: the file is not a valid robomimic file, the filter key selects no demos, or the shards lack a
            selected demo or key.
        StaleSourceError: the shards were converted from other data.
        BackendOptionError: the shards hold no video (those are ``datapipe``'s).
        core.footprint.ResourceRefused: the buffer does not fit host memory, or a conversion on first use does not
            fit the disk.
    """
    from robo_loaders_plugin.storage.video import VideoSettings

    opts, path = sequence_options(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    settings = VideoSettings()
    rgb = rgb_keys(config, obs_keys)  # only these are encoded (lossy); low_dim and depth keys stay lossless
    sizing = buffer_sizing(
        config, source, opts, filter_by_attribute, held_ratio=1.0 if options.buffer == "raw" else 1.5
    )
    passes, bound = fit_buffer(sizing, PassOptions.of(options), "video_stream")

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.robomimic.convert import convert_robomimic

        convert_robomimic(
            path, out_dir, fingerprint=fingerprint, video=settings, cache_dir=options.cache_dir, video_keys=rgb
        )

    reader, hold = open_shards(
        framework="robomimic",
        source=source,
        shards=options.source,
        cache_dir=options.cache_dir,
        check_source=True,
        convert=convert,
        option_prefix=OPTION_PREFIX,
        key_desc={"source": os.path.realpath(path), "v": 3, "video": settings.as_dict(), "video_keys": sorted(rgb)},
        convert_hint=f"'robo-loaders convert robomimic {path} OUT_DIR --frames h264'",
        size=sizing.whole,
        video=True,
        backend="video_stream",
        check_source_option=False,  # no such option: a source of another file is converted again, never served
    )
    video = reader.dataset["metadata"].get("video")
    check_lossy_keys(reader, opts, rgb, f"{OPTION_PREFIX}.source")
    if not video:
        raise BackendOptionError(
            f"{reader.dir} holds no video (converted without --frames): train from it with "
            "train.data_backend='datapipe', or convert with 'robo-loaders convert robomimic "
            f"{path} OUT_DIR --frames h264' for video_stream"
        )
    # decoded once per load, then held LZ4-compressed (decoded again per batch)
    transform = KeptCompressed(FrameCodec("lz4", 1)) if options.buffer == "lz4" else None

    def describe_frames(n_demos: int) -> str:  # the buffer never holds more demos than the split has
        return (
            f"; camera frames from {video.get('codec')} video (crf {video.get('crf')}), decoded on the CPU, "
            f"{options.buffer} buffer of {min(passes.episode_capacity, n_demos)} demos"
        )

    return shard_samples(
        config,
        opts,
        path,
        filter_by_attribute,
        reader,
        hold,
        (passes, bound),
        "video_stream",
        transform,
        decode_on_load=options.buffer == "raw",
        decode_threads=options.decode_threads,
        describe_frames=describe_frames,
    )


def check_lossy_keys(reader, opts, rgb: set[str], where: str) -> None:
    """Refuse shards that hold a key the config serves other than as an RGB image as video (lossy): shards converted
    by the CLI (``--frames`` encodes every uint8 (N, H, W, 3) array) hold a depth map packed over RGB as video, and
    serving it as ``low_dim``/``depth`` gave other values, silently (a reviewer's reproduction).

    Args:
        reader: The shards' ``ShardReader``.
        opts: The served windows' ``SequenceOptions`` (their field names).
        rgb: The config's RGB keys (:func:`~robo_loaders_plugin.robomimic.sequence.rgb_keys`).
        where: The option that named the shards, for the message.

    Raises:
        BackendOptionError: a served key that is not RGB is stored as video.
    """
    if not reader.episodes:
        return
    kinds = reader.stored_fields(0)
    for name in opts.field_names():
        group, _, key = name.partition("/")
        if kinds.get(name) == "video" and not (group in ("obs", "next_obs") and key in rgb):
            raise BackendOptionError(
                f"{where}: {reader.dir} stores {name} as video (lossy), but the config serves {key!r} as another "
                "modality than rgb, which must be served exactly: convert the file again without --frames, or "
                "leave the option out (video_stream converts only the config's rgb keys to video)"
            )


class KeptCompressed:
    """A demo's video segments decoded as read, then kept compressed with ``codec`` in the episode buffer (the
    ``buffer: "lz4"`` option), the other fields as read. A module-level class, not a closure: the dataset is pickled
    when a DataLoader with spawned workers serves it.

    Args:
        codec: The ``FrameCodec`` the decoded frames are kept with.
    """

    def __init__(self, codec: FrameCodec):
        self.codec = codec

    def __call__(self, arrays: dict) -> dict:
        return {
            k: EncodedFrames.encode(v.decode_all(), self.codec, v.where) if isinstance(v, VideoSegmentFrames) else v
            for k, v in arrays.items()
        }


def video_stream_footprint(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, committed):
    """What this file's episode buffer will hold, sized as :func:`video_stream_dataset` sizes it, from metadata only
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
        config,
        obs_keys,
        filter_by_attribute,
        dataset_path,
        options,
        held_ratio=1.0 if options.buffer == "raw" else 1.5,
        parts=False,
    )
