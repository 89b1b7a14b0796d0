"""``video_stream`` on LeRobot: trains straight from the dataset's own videos, local or remote (fsspec), each
episode's segment decoded once per pass, on the CPU or with NVDEC.
"""

from __future__ import annotations

import numpy as np

from robo_loaders_plugin.core.data_size import EXPECTED_LOSSLESS_RATIO
from robo_loaders_plugin.core.errors import BackendOptionError, SourceError
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.chunks import ChunkFrames, split_runs
from robo_loaders_plugin.lerobot.compat import active_reads, check_version, reader_settings
from robo_loaders_plugin.lerobot.dataset import (
    OPTION_PREFIX,
    LeRobotSamples,
    camera_reach,
    check_meta_match,
    check_rows_match,
    check_supported,
    native_source,
    pipeline_batches,
    unit_bytes,
)
from robo_loaders_plugin.pipeline.batches import PipelineDataset
from robo_loaders_plugin.pipeline.options import PassOptions
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3, camera_chw, is_remote, window_gaps
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames

logger = get_logger(__name__)


class LeRobotStreamSamples(LeRobotSamples, PipelineDataset):
    """LeRobot items decoded from the dataset's videos (local or remote) as passes reach their episodes.

    Args:
        source: The LeRobot v3 source the videos are read from (its file cache, for a remote source).
        *args, **kwargs: :class:`LeRobotSamples`' and :class:`PipelineDataset`'s arguments.
    """

    def __init__(self, *args, source: LeRobotV3, **kwargs):
        super().__init__(*args, **kwargs)
        self.source = source


def video_stream_dataset(native, *, options):
    """LeRobot items decoded straight from the dataset's videos, local or remote, each episode's segment once per
    pass, passes ordered by the torchdata pipeline (``video_stream``). Long episodes are cut into units of about
    32 MB decoded (``frames.chunks``), and the buffer is sized in bytes from metadata and checked against the
    machine before anything is read. With a remote ``source``, the tables come from the local copy LeRobot built
    its dataset from, checked to be the same dataset.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`LeRobotStreamSamples` over :class:`~robo_loaders_plugin.frames.chunks.ChunkFrames`.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported, the remote source is another dataset than the local tables,
            or the rows differ from LeRobot's.
        BackendOptionError: ``decode_device='cuda'`` without a CUDA GPU, or NVDEC cannot decode the dataset.
        core.footprint.ResourceRefused: the buffer does not fit host memory.
    """
    passes = PassOptions.of(options)
    check_version()
    check_supported(native)
    settings = reader_settings(native)
    url = options.source
    if is_remote(url):  # tables from the local copy LeRobot built its dataset from, videos from where they are
        source = LeRobotV3(
            native.root,
            options.storage_options,
            videos_from=url,
            local_cache_dir=options.local_cache_dir,
            table_reads=active_reads(),
        )
        remote = LeRobotV3(url, options.storage_options)
        # the episode table's rows, the statistics (a digest of the data and the frames: another recording of the
        # same lengths differs there) and the tasks, not only the episodes' indices: another dataset of the same
        # layout was served as a mix, the local tables' actions with the remote's frames (a reviewer's reproduction)
        differ = [
            what
            for what, same in (
                ("meta/info.json", lambda: remote.info == source.info),
                ("the episode table", lambda: remote.episodes == source.episodes),
                ("meta/stats.json", lambda: _same_json(remote.stats(), source.stats())),
                ("meta/tasks.parquet", lambda: remote.tasks == source.tasks),
            )
            if not same()
        ]
        if differ:
            raise SourceError(
                f"{url} is not the dataset at {native.root} ({differ[0]} differs); "
                "point --dataset.root at a copy of its tables, or leave it unset"
            )
        check_meta_match(native, source)  # the local tables' meta/ is LeRobot's
    elif url:
        source = LeRobotV3(url, table_reads=active_reads())  # a mixture's: LeRobot's reads
        check_meta_match(native, source)  # the meta/ read is LeRobot's
    else:
        # the dataset's own root: the source native_source checked (once per build: a mixture plans each
        # component's footprint from it moments before, and a second source re-read and re-checked meta/)
        source, _ = native_source(native)
    if not is_remote(url) and options.local_cache_dir:
        logger.warning(f"video_stream: local_cache_dir ignored: the videos of {url or native.root} are local already")
    if not is_remote(url) and options.storage_options:  # dropped without a word before (a reviewer's find)
        logger.warning(
            f"video_stream: storage_options ignored: the videos of {url or native.root} are local (they are for a "
            "remote source)"
        )
    device = _decode_device(options.decode_device, source)
    # the buffer, sized in bytes from metadata before anything is read: long episodes are cut into units of
    # ~32 MB decoded (frames.chunks), each loaded with the frames its windows reach outside it
    size = source.data_size(native.episodes)
    held, unit = _unit_bytes(size, source, settings, options)
    step = sum(size.frame_step_bytes.values())
    margin = camera_reach(settings.delta_indices, source.video_keys + source.image_keys)
    batch, threads = pipeline_batches(size, settings)
    passes, buffer = passes.fit(
        held, batch, OPTION_PREFIX, backend="video_stream", unit=unit, alternatives=BUFFER_FITS, threads=threads
    )
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes, decode_device=device)
    episodes.videos.window_gaps = window_gaps(settings.delta_indices, source.video_keys)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays, images=episodes.images())
    infos = {k: FieldInfo(a.dtype, tuple(a.shape[1:]), False) for k, a in episodes.arrays.items()}
    for key in episodes.camera_keys:  # decoded as (C, H, W) uint8, whichever layout the features state
        infos[key] = FieldInfo(np.dtype(np.uint8), camera_chw(source.features[key]), True)
    codec = FrameCodec("lz4", 1) if options.buffer == "lz4" else None

    units = split_runs(episodes.runs, step)
    load = _UnitLoader(episodes, codec, source.url, {k: infos[k].shape for k in episodes.camera_keys})
    frames = ChunkFrames(units, episodes.rows, infos, episodes.arrays, load, margin, passes.episode_capacity)
    cached = f", videos copied whole into {source.file_cache.directory}" if source.file_cache else ""
    split = len(units) > len(episodes.runs)
    parts = f" in {len(units)} units of up to {int(frames.lengths.max())} frames" if split else ""
    unit = "units" if split else "episodes"
    summary = (
        f"{len(episodes.runs)} episodes{parts}, {sum(e - s for _, s, e in episodes.runs)} frames streamed "
        f"from {url or source.url} ({device} decode, {options.buffer} buffer of "
        f"{min(passes.episode_capacity, len(units))} {unit}, {passes.describe_shuffle(len(units), unit)}"
        f"{cached}); bounded: {buffer.footprint.bound}"
    )
    return LeRobotStreamSamples(
        native,
        frames,
        episodes.runs,
        episodes.columns,
        source.video_keys,
        source.image_keys,
        backend_name="video_stream",
        location=url or source.url,
        source=source,
        passes=passes,
        units=units,
        decode_threads=options.decode_threads,
        serving=Serving(summary),
    )


# what fits when the buffer does not
BUFFER_FITS = (
    f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset",
    f"{OPTION_PREFIX}.buffer='lz4' (units held compressed)",
)


def _unit_bytes(size, source, settings, options) -> tuple[np.ndarray, str]:
    """Bytes the buffer holds per unit (decoded, or at the expected lossless ratio with ``buffer: lz4``), each
    unit decoded with the frames its windows reach outside it."""
    ratio = EXPECTED_LOSSLESS_RATIO if options.buffer == "lz4" else 1.0
    return unit_bytes(size, source, settings, frame_ratio=ratio, row_bytes=False, margin_always=True)


def video_stream_footprint(native, *, options, committed):
    """What this dataset's episode buffer will hold, sized as :func:`video_stream_dataset` sizes it, from
    ``meta/`` only (``BackendSpec.footprints``: a mixture checks its components' sum once, before building any).

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built.
        options: The backend's resolved options object.
        committed: What other datasets hold beside this one (the buffer is bounded in bytes whatever they hold).

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported.
    """
    from robo_loaders_plugin.core.footprint import Available

    source, settings = native_source(native)
    size = source.data_size(native.episodes)
    held, unit = _unit_bytes(size, source, settings, options)
    batch, threads = pipeline_batches(size, settings)
    _, plan = PassOptions.of(options).sized(held, batch, OPTION_PREFIX, unit=unit, threads=threads)
    return plan.planned(Available.measure(), BUFFER_FITS)


class _UnitLoader:
    """Decodes a unit's rows (an episode, or part of one) for the episode buffer, kept LZ4-compressed when the
    ``buffer`` option says so. A module-level class, not a closure: the dataset is pickled when a DataLoader with
    workers serves it (LeRobot's evaluation loader, ``--dataset.eval_split``)."""

    def __init__(
        self, episodes: LeRobotEpisodes, codec: FrameCodec | None, url: str, cameras: dict[str, tuple] | None = None
    ):
        self.episodes, self.codec, self.url = episodes, codec, url
        self.cameras = dict(cameras or {})  # camera -> the (C, H, W) its buffer holds, from meta/info.json

    def __call__(self, ep: int, lo: int, hi: int) -> dict:
        arrays = self.episodes.read_frames(ep, lo, hi)
        for key, chw in self.cameras.items():
            got = tuple(arrays[key].shape[1:]) if key in arrays else chw
            if got != chw:
                # the buffer is sized from meta/info.json before anything is decoded; frames of another size (a
                # video re-encoded or resized without its info.json) failed as a bare numpy broadcast error
                # (a reviewer's reproduction)
                raise SourceError(
                    f"{self.url}: camera {key!r} of episode {ep} decodes to frames of (C, H, W) {got}, but "
                    f"meta/info.json's features[{key!r}] states {chw}; correct its shape there (LeRobot's policies "
                    "are built from it) or encode the frames at the stated size"
                )
        if self.codec is not None:
            arrays = {
                k: EncodedFrames.encode(v, self.codec, f"{self.url} episode {ep} {k} rows {lo}..{hi - 1}")
                for k, v in arrays.items()
            }
        return arrays


def _same_json(a, b) -> bool:
    """Two parsed JSON documents are the same (NaN equal to NaN, as their text is)."""
    import json

    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _decode_device(option: str, source) -> str:
    """``cpu``, or ``cuda`` for NVDEC once it is known to decode the dataset's codecs here (sources.nvdec)."""
    import torch

    from robo_loaders_plugin.sources.nvdec import nvdec_unusable

    if option == "cpu" or (option == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        raise BackendOptionError(
            f"{OPTION_PREFIX}.decode_device='cuda' but torch sees no CUDA GPU; use 'cpu' or 'auto'"
        )
    problem = nvdec_unusable(source)
    if problem:
        if option == "auto":
            logger.info(f"video_stream: decoding on the CPU: {problem}")
            return "cpu"
        raise BackendOptionError(f"{OPTION_PREFIX}.decode_device='cuda': {problem}")
    return "cuda"
