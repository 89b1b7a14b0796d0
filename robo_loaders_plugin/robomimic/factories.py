"""Backend factories for robomimic: ``factory(config, obs_keys, filter_by_attribute, dataset_path, *, options)``,
``options`` being the backend's resolved options object (``core.options``; declared in ``backends``).

Each reads robomimic's config the way its ``dataset_factory`` does, then composes the framework-neutral parts: the
HDF5 source, a storage (compressed store or shards), its frame source, and SequenceDataset's window rules. Each
declares what the adapter needs (``core.iteration.Serving``) when it constructs the dataset.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import os

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError, SourceError
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.chunks import ChunkFrames, EpisodeUnits, split_runs
from robo_loaders_plugin.frames.episodes import EpisodeFrames
from robo_loaders_plugin.frames.store import StoreFrames
from robo_loaders_plugin.pipeline.batches import PipelineDataset
from robo_loaders_plugin.pipeline.options import PassOptions, open_shards
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.sources.robomimic_hdf5 import FRAME_MIN_BYTES, RobomimicHdf5
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.storage.store_cache import open_or_build, plan_store, summarize
from robo_loaders_plugin.windows.robomimic import SequenceOptions, SequenceWindows, episode_fields

logger = get_logger(__name__)

OPTION_PREFIX = "train.data_backend_kwargs"


def native_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options=None):
    """robomimic's own SequenceDataset, built by robomimic's own (unpatched) dataset_factory: the ``native``
    backend, the baseline every other one is compared with.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: Unused (``native`` declares no options).

    Returns:
        robomimic's ``SequenceDataset``.
    """
    from robo_loaders_plugin.robomimic.compat import original

    return original("dataset_factory")(config, obs_keys, filter_by_attribute=filter_by_attribute,
                                       dataset_path=dataset_path)


def sequence_options(config, obs_keys, dataset_path) -> tuple[SequenceOptions, str]:
    """The SequenceDataset arguments robomimic's dataset_factory would pass, checked the way it checks them, and
    the HDF5 path.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        dataset_path: The HDF5 file (``None``: ``config.train.data``); ``~`` is expanded.

    Returns:
        ``(options, path)``.

    Raises:
        RoboLoadersError: ``hdf5_normalize_obs`` is set (not supported), or ``hdf5_cache_mode``, ``frame_stack``,
            ``seq_length`` or ``goal_mode`` has a value robomimic would not accept (``goal_mode='last'`` also needs
            ``hdf5_load_next_obs``).
    """
    t = config.train
    opts = SequenceOptions(
        obs_keys=tuple(obs_keys), dataset_keys=tuple(t.dataset_keys), load_next_obs=bool(t.hdf5_load_next_obs),
        frame_stack=int(t.frame_stack), seq_length=int(t.seq_length), pad_frame_stack=bool(t.pad_frame_stack),
        pad_seq_length=bool(t.pad_seq_length), get_pad_mask=False, goal_mode=t.goal_mode,
        hdf5_cache_mode=t.hdf5_cache_mode)
    if t.hdf5_normalize_obs:
        raise RoboLoadersError("train.hdf5_normalize_obs=true is not supported by robo-loaders backends (robomimic "
                               "0.3.0 normalizes twice and fails for batch > 1); set it to false or use "
                               "train.data_backend=null")
    if opts.hdf5_cache_mode not in ("all", "low_dim", None):
        raise RoboLoadersError(f"train.hdf5_cache_mode must be 'all', 'low_dim' or null, got {opts.hdf5_cache_mode!r}")
    if opts.frame_stack < 1 or opts.seq_length < 1:
        raise RoboLoadersError("train.frame_stack and train.seq_length must be >= 1")
    if opts.goal_mode not in (None, "last"):
        raise RoboLoadersError(f"train.goal_mode must be null or 'last', got {opts.goal_mode!r}")
    if opts.goal_mode == "last" and not opts.load_next_obs:
        raise RoboLoadersError("train.goal_mode='last' needs train.hdf5_load_next_obs=true (the goal is the last "
                               "next_obs)")
    return opts, os.path.expanduser(dataset_path if dataset_path is not None else t.data)


def _read_demo(source: RobomimicHdf5, f, demo: str, opts: SequenceOptions, length: int) -> dict:
    """A demo's fields as SequenceDataset serves them (obs keys are read even when missing: the error lists what
    the demo has)."""
    return episode_fields(lambda k: source.read(f, demo, k, length) if "/" in k or source.has(f, demo, k) else None,
                          length, opts, f"{source.path}: data/{demo}")


# what fits when a backend does not (its refusal names these)
_ALTERNATIVES = ("backend 'datapipe' (robo-shards on disk, a bounded episode buffer)",
                 "backend 'video_stream' (video shards, ~20x smaller on disk, a bounded buffer)",
                 f"{OPTION_PREFIX}.cache_dir on a disk with room")
_GPU_ALTERNATIVES = ("backend 'compressed_cache' (compressed frames, spilled to a file-backed cache on disk when RAM "
                     "cannot hold them)", _ALTERNATIVES[0])


def _data_size(source: RobomimicHdf5, f, demos: list[str], opts: SequenceOptions):
    """The sizes of what SequenceDataset serves from ``demos`` (``footprints.DataSize``), from metadata only."""
    float32 = opts.dataset_keys if opts.hdf5_cache_mode in ("all", "low_dim") else ()
    return source.data_size(f, demos, opts.field_names(), float32)


def compressed_cache_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """Every demo read once into a compressed episode store shared by the host's processes (``compressed_cache``).
    The store is placed (RAM file or file-backed on disk) from metadata before anything is read, and reused from
    the cache directory while the source and options are unchanged.

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

    Returns:
        A :class:`~robo_loaders_plugin.robomimic.dataset.RobomimicSamples` over the store.

    Raises:
        RoboLoadersError: bad sequence settings (:func:`sequence_options`), or a reused store holds other demos.
        SourceError: the file is not a valid robomimic file, or the filter key selects no demos.
        core.footprint.ResourceRefused: the store fits neither RAM nor the disk.
    """
    opts, path = sequence_options(config, obs_keys, dataset_path)
    frame_codec = FrameCodec(options.codec, options.level, options.filter)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = _data_size(source, f, demos, opts)
    split = filter_by_attribute or "all demos"

    def write(writer):
        with source.open() as f:
            for demo in tqdm(demos, desc=f"compressed_cache [{split}]", unit="demo", mininterval=0.5):
                arrays = _read_demo(source, f, demo, opts, source.length(f, demo))
                writer.add_episode(demo, arrays, {n for n in opts.field_names()[len(opts.dataset_keys):]
                                                  if arrays[n][0].nbytes >= FRAME_MIN_BYTES})

    key = {"source": os.path.realpath(path), "demos": demos, "fields": opts.field_names(),
           "float32_dataset_keys": opts.hdf5_cache_mode in ("all", "low_dim"), "codec": frame_codec.as_dict(),
           "frame_min_bytes": FRAME_MIN_BYTES, "v": 2}
    plan, cache_dir = plan_store(size, kind="robomimic", key_desc=key, source_path=path, options=options,
                                 option_prefix=OPTION_PREFIX, alternatives=_ALTERNATIVES)
    store, hold, reused = open_or_build(kind="robomimic", source=source, key_desc=key, write=write, codec=frame_codec,
                                        cache_dir=cache_dir, max_memory=options.max_memory if plan.in_ram else None,
                                        build_workers=options.build_workers, option_prefix=OPTION_PREFIX,
                                        meta={"source": os.path.realpath(path), "framework": "robomimic"},
                                        description=f"compressed_cache of {path} [{split}]",
                                        disk_estimate=plan.footprint.disk_bytes or None)
    names = [e["name"] for e in store.episodes]
    if names != demos:
        raise RoboLoadersError(f"{store.path} holds demos {names[:3]}..., expected {demos[:3]}...; delete it")
    frames = StoreFrames(store, hold)
    for name in opts.field_names():
        frames.info(name)  # one dtype and step shape per key across demos, or a clear error now
    windows = SequenceWindows(frames.lengths, opts)
    summary = (summarize(store, len(demos), len(windows), reused, "demo") + f", batches built by {options.loader}; "
               f"bounded: {plan.footprint.bound}")
    return RobomimicSamples(frames, windows, demos=demos, hdf5_path=path, filter_by_attribute=filter_by_attribute,
                            backend_name="compressed_cache", location=f"{store.path} ({store.file_nbytes} bytes)",
                            serving=Serving(summary, hold=hold))


class RobomimicShardSamples(RobomimicSamples, PipelineDataset):
    """SequenceDataset's samples read from robo-shards; training passes ordered by the datapipe pipeline."""


def datapipe_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """SequenceDataset's samples from lossless robo-shards (converted on first use), passes ordered by the
    torchdata pipeline (``datapipe``). The episode buffer is sized in bytes from metadata and checked against the
    machine before anything is read or converted.

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

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
    sizing = _sizing(config, source, opts, filter_by_attribute, held_ratio=1.0)
    # long demos are buffered in parts (frames.chunks) read from the shards' parts of them (format.part_bounds)
    units = _demo_units(sizing.lengths, sizing.frame_step)
    passes, bound = _fit_buffer(sizing, PassOptions.of(options), "datapipe", units)

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.robomimic.convert import convert_robomimic

        convert_robomimic(path, out_dir, num_workers=options.convert_workers, fingerprint=fingerprint,
                          cache_dir=options.cache_dir)

    reader, hold = open_shards(framework="robomimic", source=source, shards=options.shards,
                               cache_dir=options.cache_dir, check_source=options.check_source,
                               key_desc={"source": os.path.realpath(path), "v": 2}, convert=convert,
                               option_prefix=OPTION_PREFIX,
                               convert_hint=f"'robo-loaders convert robomimic {path} OUT_DIR'",
                               size=sizing.whole, backend="datapipe", alternatives=_ALTERNATIVES[1:])
    if reader.dataset["metadata"].get("video"):
        raise BackendOptionError(f"{reader.dir} holds camera frames as lossy video (converted with --frames); "
                                 "datapipe serves lossless shards only: train from these with "
                                 "train.data_backend='video_stream' (source: this directory)")
    return _shard_samples(config, opts, path, filter_by_attribute, reader, hold, (passes, bound),
                          refit=lambda: _fit_buffer(sizing, PassOptions.of(options), "datapipe"),
                          unit_step=sizing.frame_step if units is not None else None)


@dataclasses.dataclass(frozen=True)
class _Sizing:
    """What a robomimic datapipe/video_stream buffer is sized from, read from the HDF5's metadata before anything
    is converted: ``row_bytes`` per demo step as held, the decoded camera bytes of a step (``frame_step``: where
    long demos are cut into units, ``frames.chunks``), one batch's bytes and the window's steps."""

    lengths: np.ndarray
    row_bytes: float
    frame_step: int
    batch: int
    window: int
    threads: int
    whole: object  # footprints.DataSize of everything a conversion stores


def _sizing(config, source: RobomimicHdf5, opts: SequenceOptions, filter_by_attribute, held_ratio: float) -> _Sizing:
    """The sizes a buffer of demos (held decoded, or compressed at ``held_ratio``) is planned from, from metadata."""
    from robo_loaders_plugin.sources.robomimic_hdf5 import datasets

    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{source.path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = _data_size(source, f, demos, opts)
        every = source.demos(f, None)
        whole = source.data_size(f, every, [name for name, _ in datasets(f[f"data/{every[0]}"])])
    frames = sum(size.frame_step_bytes.values())
    window = opts.frame_stack + opts.seq_length - 1
    return _Sizing(lengths=np.asarray(size.lengths, dtype=np.int64),
                   row_bytes=frames / held_ratio + size.other_step_bytes, frame_step=int(frames),
                   batch=int(config.train.batch_size) * window * (frames + size.other_step_bytes), window=window,
                   threads=max(1, int(config.train.num_data_workers)), whole=whole)


def _fit_buffer(sizing: _Sizing, passes: PassOptions, backend: str, units=None):
    """The pass options with the episode buffer sized in bytes (``footprints.buffer_plan``) for whole demos, or
    for ``units`` (parts of demos, each held with the ``window - 1`` steps after it), checked against the machine
    before any data is read. Returns ``(passes, bound)``."""
    from robo_loaders_plugin.core.footprint import Available, check_fits

    if units is None:
        held, unit = (sizing.lengths * sizing.row_bytes).astype(np.int64), "demos"
    else:
        held = np.array([(e - s + sizing.window - 1) * sizing.row_bytes for _, s, e in units], dtype=np.int64)
        unit = "units"
    passes, buffer = passes.sized(held, sizing.batch, OPTION_PREFIX, unit=unit,
                                  threads=sizing.threads)
    check_fits(buffer.footprint, Available.measure(), backend=backend, option_prefix=OPTION_PREFIX,
               alternatives=[f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset"])
    return passes, buffer.footprint.bound


def _demo_units(lengths, frame_step: int) -> list[tuple[int, int, int]] | None:
    """Demos cut into units of about ``frames.chunks.UNIT_BYTES`` decoded (``(demo, first row, end row)`` in the
    rows of the demos laid end to end), or ``None`` when every demo stays whole."""
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    runs = [(i, int(a), int(b)) for i, (a, b) in enumerate(itertools.pairwise(starts))]
    units = split_runs(runs, frame_step)
    return units if len(units) > len(runs) else None


def _shard_samples(config, opts: SequenceOptions, path: str, filter_by_attribute, reader, hold, sized,
                   backend: str = "datapipe", transform=None, decode_on_load: bool = True, decode_threads: int = 0,
                   describe_frames=None, refit=None, unit_step: int | None = None) -> "RobomimicShardSamples":
    """SequenceDataset's samples from robo-shards, for every backend reading them (``datapipe``, ``video_stream``):
    they differ only in the shards (lossless frames or video segments) and ``transform(arrays)`` applied to each
    episode read (e.g. decoded video kept LZ4-compressed). ``sized`` is ``(passes, bound)`` as fitted before the
    shards were opened; with ``unit_step`` (decoded camera bytes of a step) long demos are served in parts
    (:func:`_unit_samples`) when the shards store them in parts, else ``refit()`` sizes the buffer again for whole
    demos. ``describe_frames(number of demos)`` adds to the summary line."""
    passes, bound = sized
    meta = reader.dataset.get("metadata", {})
    if filter_by_attribute is None:
        demos = list(meta.get("demos", []))
    elif filter_by_attribute in meta.get("masks", {}):
        demos = sorted(meta["masks"][filter_by_attribute], key=lambda n: int(n[5:]))
    else:
        raise SourceError(f"{reader.dir}: filter key {filter_by_attribute!r} not found (masks in the converted "
                          f"dataset: {sorted(meta.get('masks', {}))})")
    if not demos:
        raise SourceError(f"{reader.dir}: no demos selected (filter key {filter_by_attribute!r} is empty)")
    missing = [d for d in demos if d not in reader.by_name]
    if missing:
        raise SourceError(f"{reader.dir}: demos {missing[:5]} are not in the shards; convert the file again")
    records = [reader.by_name[d] for d in demos]
    lengths = [int(reader.episodes[r]["length"]) for r in records]
    wanted = opts.field_names()
    for d, r in zip(demos, records):  # a missing key fails now, naming demo and key, not at the first batch
        stored = reader.stored_fields(r)
        absent = [k for k in wanted[len(opts.dataset_keys):] if k not in stored]
        if absent:
            raise SourceError(f"{reader.dir}: {d}/{absent[0]} is missing (the demo has: {sorted(stored)}); "
                              "check the obs keys in observation.modalities or hdf5_load_next_obs")
    units = _demo_units(lengths, unit_step) if unit_step else None
    if units is not None and not all(reader.has_parts(records[ep]) for ep, n in
                                     collections.Counter(ep for ep, _, _ in units).items() if n > 1):
        logger.warning(f"{backend}: {reader.dir} stores its long demos whole (converted by an earlier "
                       "robo-loaders), so whole demos are buffered; convert it again to buffer parts of them")
        units, (passes, bound) = None, refit()
    if passes.seed is None:
        passes = dataclasses.replace(passes, seed=int(config.train.seed))
    if units is not None:
        return _unit_samples(opts, path, filter_by_attribute, reader, hold, passes, bound, demos, records, lengths,
                             units)

    def read(ep: int, fields):
        demo = demos[ep]
        _, arrays = reader.read_episode(records[ep], decode_frames=False, fields=fields or wanted)
        if transform is not None:
            arrays = transform(arrays)
        if fields is not None:  # a reload: frames only (the small fields are kept by EpisodeFrames)
            return arrays
        return episode_fields(arrays.get, lengths[ep], opts, f"{reader.dir}: {demo}")

    stored = read(0, None)
    first = {k: v.decode_all() if isinstance(v, EncodedFrames) else v for k, v in stored.items()}
    # frames: what is reloaded when an episode comes back (video segments of any size among them)
    infos = {k: FieldInfo(a.dtype, tuple(a.shape[1:]), isinstance(stored[k], EncodedFrames)
                          or a.ndim > 1 and a[0].nbytes >= FRAME_MIN_BYTES) for k, a in first.items()}
    frames = EpisodeFrames(lengths, infos, read, capacity=passes.episode_capacity, decode_on_load=decode_on_load)
    windows = SequenceWindows(lengths, opts)
    summary = (f"{len(demos)} demos, {len(windows)} samples from {len(reader.shards)} shard(s) in {reader.dir}, "
               + passes.describe_shuffle(len(demos), "demos")
               + (", samples drawn with replacement" if passes.replacement else "")
               + (describe_frames(len(demos)) if describe_frames else "") + f"; bounded: {bound}")
    return RobomimicShardSamples(frames, windows, demos=demos, hdf5_path=path,
                                 filter_by_attribute=filter_by_attribute, backend_name=backend,
                                 location=reader.dir, passes=passes, decode_threads=decode_threads,
                                 serving=Serving(summary, hold=hold))


def _unit_samples(opts: SequenceOptions, path: str, filter_by_attribute, reader, hold, passes: PassOptions,
                  bound: str, demos: list[str], records: list[int], lengths: list[int],
                  units: list[tuple[int, int, int]]) -> "RobomimicShardSamples":
    """datapipe over parts of long demos (``frames.chunks``), as LeRobot's datapipe buffers them: each unit's
    camera frames read from the shard parts holding its rows (``ShardReader.read_frame_rows``) with the
    ``frame_stack + seq_length - 2`` steps after it that its windows reach, decoded once per load; the other fields
    (a few bytes per step) read once and held for every step. A sample is drawn from the unit holding the first
    step of its window; ``goal_mode="last"``'s goal frames are pinned per demo (``EpisodeUnits``).

    Why: a 400-step demo of two 240x240 cameras with ``next_obs`` is 280 MB decoded, so a byte-sized buffer held a
    few demos and batches mixed a few demos at a time."""
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    wanted = opts.field_names()
    kinds = reader.stored_fields(records[0])
    cameras = [k for k in wanted if kinds.get(k) == "frames"]
    small_names = [k for k in wanted if k not in cameras]
    where = f"{reader.dir}: "
    parts = [episode_fields(reader.read_episode(r, decode_frames=False, fields=small_names)[1].get, L, opts,
                            where + d, names=small_names) for d, r, L in zip(demos, records, lengths)]
    small = {k: np.concatenate([p[k] for p in parts]) for k in small_names}
    del parts
    first = {k: v.decode_all() for k, v in reader.read_frame_rows(records[0], 0, 1, cameras).items()}
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), False) for k, v in small.items()}
    infos.update({k: FieldInfo(v.dtype, tuple(v.shape[1:]), True) for k, v in first.items()})
    infos = {k: infos[k] for k in wanted}  # SequenceDataset's key order

    def load(ep: int, lo: int, hi: int) -> dict:
        start = int(starts[ep])
        return {k: v.decode_all() for k, v in reader.read_frame_rows(records[ep], lo - start, hi - start,
                                                                     cameras).items()}

    window = opts.frame_stack + opts.seq_length - 1
    chunks = ChunkFrames(units, {ep: (int(starts[ep]), int(starts[ep + 1])) for ep in range(len(demos))}, infos,
                         small, load, (0, window - 1), passes.episode_capacity)
    windows = SequenceWindows(lengths, opts)
    pinned, load_pinned = None, None
    goals = [k for k in cameras if k.startswith("next_obs/")] if opts.goal_mode == "last" else []
    if goals:
        pinned = windows.goal_positions(np.arange(len(demos)))[:, 0]

        def load_pinned(ep: int) -> dict:
            g = int(pinned[ep])
            return {k: v.decode_all()[0] for k, v in reader.read_frame_rows(records[ep], g, g + 1, goals).items()}

    frames = EpisodeUnits(chunks, starts[:-1], lengths, pinned, load_pinned)
    sample_units = frames.units_of(windows.episode_of, windows.first_positions())
    summary = (f"{len(demos)} demos in {len(units)} units of up to {int(chunks.lengths.max())} steps, "
               f"{len(windows)} samples from {len(reader.shards)} shard(s) in {reader.dir}, "
               + passes.describe_shuffle(len(units), "units")
               + (", samples drawn with replacement" if passes.replacement else "") + f"; bounded: {bound}")
    return RobomimicShardSamples(frames, windows, demos=demos, hdf5_path=path,
                                 filter_by_attribute=filter_by_attribute, backend_name="datapipe",
                                 location=reader.dir, passes=passes, sample_units=sample_units,
                                 serving=Serving(summary, hold=hold))


def video_stream_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """robomimic from video shards (``robo-loaders convert robomimic IN OUT --frames h264``): datapipe's samples
    with each episode's camera segments decoded once per load, in order (lossy frames, everything else
    byte-identical).

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in ``backends``);
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
    from robo_loaders_plugin.storage.encoded_frames import VideoSegmentFrames
    from robo_loaders_plugin.storage.video import VideoSettings

    opts, path = sequence_options(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    settings = VideoSettings()
    sizing = _sizing(config, source, opts, filter_by_attribute, held_ratio=1.0 if options.buffer == "raw" else 1.5)
    passes, bound = _fit_buffer(sizing, PassOptions.of(options), "video_stream")

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.robomimic.convert import convert_robomimic

        convert_robomimic(path, out_dir, fingerprint=fingerprint, video=settings, cache_dir=options.cache_dir)

    reader, hold = open_shards(framework="robomimic", source=source, shards=options.source,
                               cache_dir=options.cache_dir,
                               check_source=True, convert=convert, option_prefix=OPTION_PREFIX,
                               key_desc={"source": os.path.realpath(path), "v": 2, "video": settings.as_dict()},
                               convert_hint=f"'robo-loaders convert robomimic {path} OUT_DIR --frames h264'",
                               size=sizing.whole, video=True, backend="video_stream")
    video = reader.dataset["metadata"].get("video")
    if not video:
        raise BackendOptionError(f"{reader.dir} holds no video (converted without --frames): train from it with "
                                 "train.data_backend='datapipe', or convert with 'robo-loaders convert robomimic "
                                 f"{path} OUT_DIR --frames h264' for video_stream")
    transform = None
    if options.buffer == "lz4":  # decoded once per load, then held LZ4-compressed (decoded again per batch)
        codec = FrameCodec("lz4", 1)

        def transform(arrays):
            return {k: EncodedFrames.encode(v.decode_all(), codec, v.where) if isinstance(v, VideoSegmentFrames) else v
                    for k, v in arrays.items()}

    def describe_frames(n_demos: int) -> str:  # the buffer never holds more demos than the split has
        return (f"; camera frames from {video.get('codec')} video (crf {video.get('crf')}), decoded on the CPU, "
                f"{options.buffer} buffer of {min(passes.episode_capacity, n_demos)} demos")

    return _shard_samples(config, opts, path, filter_by_attribute, reader, hold, (passes, bound), "video_stream",
                          transform, decode_on_load=options.buffer == "raw", decode_threads=options.decode_threads,
                          describe_frames=describe_frames)


def recorded_fps(source: RobomimicHdf5, f) -> float | None:
    """The rate a robomimic file was recorded at, when its ``env_args`` say (robosuite's ``control_freq``): what
    ``target_fps`` converts from when ``source_fps`` is not given.

    Args:
        source: The file's source (unused: the rate is read from ``f``).
        f: The open HDF5 file.

    Returns:
        The rate in Hz, or ``None`` when ``env_args`` or its ``control_freq`` is missing or unreadable.
    """
    import json

    try:
        return float(json.loads(f["data"].attrs["env_args"])["env_kwargs"]["control_freq"])
    except (KeyError, TypeError, ValueError):
        return None


# target_fps may ask for at most this many windows per recorded step: beyond it the windows no longer fit in memory
# (1e9 Hz on 20 Hz data asked for 52.9 GiB of window index) and no policy runs that much faster than its data
MAX_UPSAMPLING = 100.0


def gpu_resampler_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """Every demo's fields held as tensors (on the training GPU when they fit), batches gathered in a few index
    operations, windows optionally at another rate (``gpu_resampler``). The tiers (GPU, host raw, host
    compressed, spilled to disk) are planned and checked from metadata before any data is read.

    Args:
        config: robomimic's config (``train.*`` read as ``dataset_factory`` reads it).
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

    Returns:
        A :class:`~robo_loaders_plugin.robomimic.dataset.RobomimicSamples` over
        :class:`~robo_loaders_plugin.frames.tensors.TieredFrames`; batches are built in the training process
        without threads when every demo is on the GPU.

    Raises:
        RoboLoadersError: bad sequence settings.
        SourceError: the file is not a valid robomimic file, or the filter key selects no demos.
        BackendOptionError: a bad ``device`` or ``modes``, ``target_fps`` on a file that does not say its rate
            without ``source_fps``, or ``target_fps`` more than :data:`MAX_UPSAMPLING` times the recorded rate.
        core.footprint.ResourceRefused: the data does not fit the tiers' budgets or the machine.
    """
    from robo_loaders_plugin.frames.tensors import TieredFrames, plan_tiers_checked, training_device
    from robo_loaders_plugin.storage.cache import location
    from robo_loaders_plugin.windows.rates import resolve_modes

    opts, path = sequence_options(config, obs_keys, dataset_path)
    target_fps, source_fps = options.target_fps, options.source_fps
    train_device = training_device(options.device, OPTION_PREFIX, prefer_cuda=bool(config.train.cuda))
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)  # its validation record goes there too
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        lengths = [source.length(f, d) for d in demos]
        rate = 1.0
        if target_fps is not None:
            recorded = source_fps or recorded_fps(source, f)
            if recorded is None:
                raise BackendOptionError(f"{path} does not say the rate it was recorded at (no control_freq in its "
                                         f"env_args): set {OPTION_PREFIX}.source_fps")
            if target_fps > MAX_UPSAMPLING * recorded:
                raise BackendOptionError(f"{OPTION_PREFIX}.target_fps={target_fps:g} is more than {MAX_UPSAMPLING:g}x "
                                         f"the rate {path} was recorded at ({recorded:g} Hz); choose a target_fps "
                                         f"<= {MAX_UPSAMPLING * recorded:g}")
            rate = recorded / target_fps
        plan, host_limit = plan_tiers_checked(_data_size(source, f, demos, opts), train_device, options,
                                              OPTION_PREFIX, _GPU_ALTERNATIVES)
        first = _read_demo(source, f, demos[0], opts, lengths[0])
    infos = {k: FieldInfo(a.dtype, tuple(a.shape[1:]), a.ndim > 1 and a[0].nbytes >= FRAME_MIN_BYTES)
             for k, a in first.items()}
    modes = resolve_modes(infos, options.modes, OPTION_PREFIX)
    frames = TieredFrames(lengths, infos, plan, train_device, host_limit=host_limit, spill_dir=plan.spill_dir,
                          overflow_dir=location(options.cache_dir), names=demos)
    split = filter_by_attribute or "all demos"
    with source.open() as f:
        for i, demo in enumerate(tqdm(demos, desc=f"gpu_resampler [{split}]", unit="demo", mininterval=0.5)):
            frames.fill(i, first if i == 0 else _read_demo(source, f, demo, opts, lengths[i]))
            first = None  # not held for the rest of the fill
    windows = SequenceWindows(lengths, opts, rate)
    where = plan.describe(str(train_device))
    if frames.spilled_while_filling:
        where += f" (then {frames.spilled_while_filling})"
    summary = (f"{len(demos)} demos, {len(windows)} samples, {where}, batches on {train_device}"
               + (f", resampled {rate * target_fps:g} -> {target_fps:g} Hz" if rate != 1.0 else "")
               + f"; bounded: {plan.footprint.bound}")
    on_device = plan.device == len(lengths) and train_device.type == "cuda"
    return RobomimicSamples(frames, windows, demos=demos, hdf5_path=path, filter_by_attribute=filter_by_attribute,
                            backend_name="gpu_resampler", location=f"tensors: {where}", modes=modes,
                            device=train_device, serving=Serving(summary, batch_threads=0 if on_device else None))
