"""robomimic samples served from an episode buffer (demos, or units of long demos) over robo-shards: what the
pipeline-served backends share on robomimic, from sizing the buffer in bytes to the dataset that draws windows
from it.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.chunks import ChunkFrames, EpisodeUnits, runs_of, split_lengths
from robo_loaders_plugin.frames.episodes import EpisodeFrames
from robo_loaders_plugin.pipeline.batches import PipelineDataset
from robo_loaders_plugin.pipeline.buffer_plan import held_bytes
from robo_loaders_plugin.pipeline.options import PassOptions
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.robomimic.sequence import OPTION_PREFIX, data_size, sample_bytes
from robo_loaders_plugin.sources.robomimic_hdf5 import FRAME_MIN_BYTES, RobomimicHdf5
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.windows.robomimic import (
    SequenceOptions,
    SequenceWindows,
    check_step_shapes,
    episode_fields,
    sequence_counts,
)

logger = get_logger(__name__)


class RobomimicShardSamples(RobomimicSamples, PipelineDataset):
    """SequenceDataset's samples read from robo-shards; training passes ordered by the pipeline (``pipeline``)."""


@dataclasses.dataclass(frozen=True)
class Sizing:
    """What a robomimic shard-reading backend's buffer is sized from, read from the HDF5's metadata before anything
    is converted: ``row_bytes`` per demo step as held, the decoded camera bytes of a step (``frame_step``: where
    long demos are cut into units, ``frames.chunks``), one batch's bytes and the window's steps."""

    lengths: np.ndarray
    row_bytes: float
    frame_step: int
    batch: int
    window: int
    threads: int
    whole: object  # core.data_size.DataSize of everything a conversion stores


def buffer_sizing(
    config, source: RobomimicHdf5, opts: SequenceOptions, filter_by_attribute, held_ratio: float
) -> Sizing:
    """The sizes a buffer of demos (held decoded, or compressed at ``held_ratio``) is planned from, from metadata.

    Args:
        config: robomimic's config.
        source: The HDF5 source.
        opts: SequenceDataset's arguments.
        filter_by_attribute: The filter key selecting demos (``None``: every demo).
        held_ratio: Bytes held per decoded byte (1.0: held decoded).

    Returns:
        The :class:`Sizing`.

    Raises:
        SourceError: the filter key selects no demos.
    """
    from robo_loaders_plugin.sources.robomimic_hdf5 import datasets

    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{source.path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = data_size(source, f, demos, opts)
        # a demo robomimic would fail on is refused now, naming it, before the file is converted
        sequence_counts(
            size.lengths, opts.frame_stack, opts.seq_length, opts.pad_frame_stack, opts.pad_seq_length, demos,
            source.path,
        )  # fmt: skip
        every = source.stored_demos(f)
        whole = source.data_size(f, every, [name for name, _ in datasets(f[f"data/{every[0]}"])])
    frames = sum(size.frame_step_bytes.values())
    window = opts.frame_stack + opts.seq_length - 1
    return Sizing(
        lengths=np.asarray(size.lengths, dtype=np.int64),
        row_bytes=frames / held_ratio + size.other_step_bytes,
        frame_step=int(frames),
        batch=int(config.train.batch_size) * sample_bytes(size, opts),
        window=window,
        threads=max(1, int(config.train.num_data_workers)),
        whole=whole,
    )


def fit_buffer(sizing: Sizing, passes: PassOptions, backend: str, units=None):
    """The pass options with the episode buffer sized in bytes (``buffer_plan.buffer_plan``) for whole demos, or
    for ``units`` (parts of demos, each held with the ``window - 1`` steps after it), checked against the machine
    before any data is read.

    Args:
        sizing: From :func:`buffer_sizing`.
        passes: The pass options as given.
        backend: The backend's name, for the refusal.
        units: ``(demo, first row, end row)`` parts from :func:`demo_units` (``None``: whole demos).

    Returns:
        ``(passes, bound)``: the options with the buffer sized, and how it is bounded (for the log line).

    Raises:
        core.footprint.ResourceRefused: the buffer does not fit host memory.
    """
    held, unit = _held(sizing, units)
    passes, buffer = passes.fit(
        held,
        sizing.batch,
        OPTION_PREFIX,
        backend=backend,
        unit=unit,
        threads=sizing.threads,
        alternatives=[f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset"],
    )
    return passes, buffer.footprint.bound


def _held(sizing: Sizing, units) -> tuple[np.ndarray, str]:
    """Bytes held per buffered unit (whole demos, or ``units`` with the ``window - 1`` steps after each), and
    what a unit is called."""
    if units is None:
        return held_bytes(runs_of(sizing.lengths), sizing.row_bytes), "demos"
    return held_bytes(units, sizing.row_bytes, sizing.window - 1), "units"


def buffer_footprint(sizing: Sizing, passes: PassOptions, units=None, alternatives=()):
    """What the buffer :func:`fit_buffer` sizes will hold, without checking it (``BackendSpec.footprints``: a
    mixture sums its components' and checks the sum once).

    Args:
        sizing: From :func:`buffer_sizing`.
        passes: The pass options as given.
        units: As for :func:`fit_buffer`.
        alternatives: What would fit instead, for the mixture's refusal.

    Returns:
        A ``core.footprint.Planned``.
    """
    from robo_loaders_plugin.core.footprint import Available

    held, unit = _held(sizing, units)
    _, plan = passes.sized(held, sizing.batch, OPTION_PREFIX, unit=unit, threads=sizing.threads)
    return plan.planned(Available.measure(), alternatives)


def file_buffer_footprint(
    config, obs_keys, filter_by_attribute, dataset_path, options, *, held_ratio: float, parts: bool
):
    """What one HDF5 file's episode buffer will hold, from metadata only: the footprint both pipeline-served
    backends declare (``BackendSpec.footprints``: a mixture checks its components' sum once, before building any).

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: The backend's resolved options object (its ``cache_dir`` and pass options).
        held_ratio: Decoded bytes per byte held (``1.0``: held as decoded or as stored).
        parts: Whether long demos are buffered in parts (:func:`demo_units`), else whole.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        SourceError: not a robomimic file, or no demo selected.
    """
    from robo_loaders_plugin.robomimic.sequence import sequence_options

    opts, path = sequence_options(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=options.cache_dir)
    sizing = buffer_sizing(config, source, opts, filter_by_attribute, held_ratio=held_ratio)
    units = demo_units(sizing.lengths, sizing.frame_step) if parts else None
    return buffer_footprint(
        sizing,
        PassOptions.of(options),
        units,
        [f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset"],
    )


def demo_units(lengths, frame_step: int) -> list[tuple[int, int, int]] | None:
    """Demos cut into units of about ``frames.chunks.UNIT_BYTES`` decoded (``(demo, first row, end row)`` in the
    rows of the demos laid end to end), or ``None`` when every demo stays whole.

    Args:
        lengths: Each demo's steps.
        frame_step: Decoded camera bytes of one step.

    Returns:
        The units, or ``None``.
    """
    units = split_lengths(lengths, frame_step)
    return units if len(units) > len(lengths) else None


def shard_samples(
    config,
    opts: SequenceOptions,
    path: str,
    filter_by_attribute,
    reader,
    hold,
    sized,
    backend: str,
    transform=None,
    decode_on_load: bool = True,
    decode_threads: int = 0,
    describe_frames=None,
    refit=None,
    unit_step: int | None = None,
) -> RobomimicShardSamples:
    """SequenceDataset's samples from robo-shards, for every backend reading them: they differ only in the shards
    (lossless frames or video segments) and ``transform(arrays)`` applied to each episode read (e.g. decoded video
    kept LZ4-compressed). ``sized`` is ``(passes, bound)`` as fitted before the shards were opened; with
    ``unit_step`` (decoded camera bytes of a step) long demos are served in parts (:func:`unit_samples`) when the
    shards store them in parts, else ``refit()`` sizes the buffer again for whole demos. ``describe_frames(number of
    demos)`` adds to the summary line.

    Args:
        config: robomimic's config.
        opts: SequenceDataset's arguments.
        path: The HDF5 the shards were converted from.
        filter_by_attribute: The filter key selecting demos (``None``: every demo).
        reader: The open ``ShardReader``.
        hold: Keeps the shards' cache entry in use while the dataset lives.
        sized: ``(passes, bound)`` from :func:`fit_buffer`.
        backend: The backend's name (log lines, ``Serving``).
        transform: Applied to each episode's arrays as read (``None``: none).
        decode_on_load: Decode frames when an episode is loaded (else per batch).
        decode_threads: Threads decoding episodes ahead of the pass.
        describe_frames: ``describe_frames(number of demos) -> str`` for the summary line.
        refit: Sizes the buffer again for whole demos when the shards hold no parts.
        unit_step: Decoded camera bytes of a step, to serve long demos in parts (``None``: whole demos).

    Returns:
        The :class:`RobomimicShardSamples`.

    Raises:
        SourceError: the filter key is not in the shards, or the shards lack a selected demo or key.
    """
    passes, bound = sized
    meta = reader.dataset.get("metadata", {})
    if filter_by_attribute is None:
        demos = list(meta.get("demos", []))
    elif filter_by_attribute in meta.get("masks", {}):
        demos = sorted(meta["masks"][filter_by_attribute], key=lambda n: int(n[5:]))
    else:
        raise SourceError(
            f"{reader.dir}: filter key {filter_by_attribute!r} not found (masks in the converted "
            f"dataset: {sorted(meta.get('masks', {}))})"
        )
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
        absent = [k for k in wanted[len(opts.dataset_keys) :] if k not in stored]
        if absent:
            raise SourceError(  # named in the file the user edits (the shards are its conversion)
                f"{path}: {d}/{absent[0]} is missing (the demo has: {sorted(stored)}); "
                "check the obs keys in observation.modalities or hdf5_load_next_obs"
            )
    units = demo_units(lengths, unit_step) if unit_step else None
    if units is not None and not all(
        reader.has_parts(records[ep]) for ep, n in collections.Counter(ep for ep, _, _ in units).items() if n > 1
    ):
        logger.warning(
            f"{backend}: {reader.dir} stores its long demos whole (converted by an earlier "
            "robo-loaders), so whole demos are buffered; convert it again to buffer parts of them"
        )
        units, (passes, bound) = None, refit()
    if passes.seed is None:
        passes = dataclasses.replace(passes, seed=int(config.train.seed))
    if units is not None:
        return unit_samples(
            opts, path, filter_by_attribute, reader, hold, passes, bound, demos, records, lengths, units, backend
        )

    read = ShardDemos(reader, demos, records, lengths, opts, transform, origin=path)
    # the fields' dtypes and step shapes from the first demo as read, frames still encoded: their headers say what
    # they decode to (checked again when a load decodes them), so no component of a mixture decodes a demo to build
    infos = read.field_infos(0)
    read.shapes = {k: i.shape for k, i in infos.items()}
    read.dtypes = {k: i.dtype for k, i in infos.items()}
    frames = EpisodeFrames(lengths, infos, read, capacity=passes.episode_capacity, decode_on_load=decode_on_load)
    windows = SequenceWindows(lengths, opts, names=demos, where=path)
    summary = (
        f"{len(demos)} demos, {len(windows)} samples from {len(reader.shards)} shard(s) in {reader.dir}, "
        + passes.describe_shuffle(len(demos), "demos")
        + (", samples drawn with replacement" if passes.replacement else "")
        + (describe_frames(len(demos)) if describe_frames else "")
        + f"; bounded: {bound}"
    )
    return RobomimicShardSamples(
        frames,
        windows,
        demos=demos,
        hdf5_path=path,
        filter_by_attribute=filter_by_attribute,
        backend_name=backend,
        location=reader.dir,
        passes=passes,
        decode_threads=decode_threads,
        serving=Serving(summary, hold=hold),
    )


def _field_info(value) -> FieldInfo:
    """A field's dtype and step shape as a demo's read value says (still-encoded frames by their header); frames
    (encoded, video segments of any size among them, or raw steps of at least ``FRAME_MIN_BYTES``) are what is
    reloaded when an episode comes back."""
    if isinstance(value, EncodedFrames):
        return FieldInfo(np.dtype(value.dtype), tuple(value.shape[1:]), True)
    return FieldInfo(value.dtype, tuple(value.shape[1:]), value.ndim > 1 and value[0].nbytes >= FRAME_MIN_BYTES)


def unit_samples(
    opts: SequenceOptions,
    path: str,
    filter_by_attribute,
    reader,
    hold,
    passes: PassOptions,
    bound: str,
    demos: list[str],
    records: list[int],
    lengths: list[int],
    units: list[tuple[int, int, int]],
    backend: str,
) -> RobomimicShardSamples:
    """Robo-shards served over parts of long demos (``frames.chunks``), as LeRobot's units are buffered: each unit's
    camera frames read from the shard parts holding its rows (``ShardReader.read_frame_rows``) with the
    ``frame_stack + seq_length - 2`` steps after it that its windows reach, decoded once per load; the other fields
    (a few bytes per step) read once and held for every step. A sample is drawn from the unit holding the first
    step of its window; ``goal_mode="last"``'s goal frames are pinned per demo (``EpisodeUnits``).

    Why: a 400-step demo of two 240x240 cameras with ``next_obs`` is 280 MB decoded, so a byte-sized buffer held a
    few demos and batches mixed a few demos at a time.

    Args:
        opts: SequenceDataset's arguments.
        path: The HDF5 the shards were converted from.
        filter_by_attribute: The filter key selecting demos.
        reader: The open ``ShardReader``.
        hold: Keeps the shards' cache entry in use.
        passes: The pass options, buffer sized in units.
        bound: How the buffer is bounded, for the log line.
        demos: The demos served, in order.
        records: Each demo's record in the shards.
        lengths: Each demo's steps.
        units: ``(demo, first row, end row)`` parts.
        backend: The backend's name (log lines, ``Serving``).

    Returns:
        The :class:`RobomimicShardSamples`.
    """
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    wanted = opts.field_names()
    kinds = reader.stored_fields(records[0])
    cameras = [k for k in wanted if kinds.get(k) == "frames"]
    small_names = [k for k in wanted if k not in cameras]
    where = f"{path}: "  # the file the user edits, not the shards
    parts, lacking = [], []
    for d, r, L in zip(demos, records, lengths):
        arrays = reader.read_episode(r, decode_frames=False, fields=small_names)[1]
        parts.append(episode_fields(arrays.get, L, opts, where + d, names=small_names))
        lacking.append(_lacking(arrays, opts))
    shapes = {k: v.shape[1:] for k, v in parts[0].items()}
    dtypes = {k: v.dtype for k, v in parts[0].items()}
    for d, p, lacks in zip(demos[1:], parts[1:], lacking[1:]):
        check_step_shapes(p, shapes, where + d, demos[0], lacks, lacking[0], dtypes)
    small = {k: np.concatenate([p[k] for p in parts]) for k in small_names}
    del parts
    first = {k: v.decode_all() for k, v in reader.read_frame_rows(records[0], 0, 1, cameras).items()}
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), False) for k, v in small.items()}
    infos.update({k: FieldInfo(v.dtype, tuple(v.shape[1:]), True) for k, v in first.items()})
    infos = {k: infos[k] for k in wanted}  # SequenceDataset's key order

    window = opts.frame_stack + opts.seq_length - 1
    chunks = ChunkFrames(
        units,
        {ep: (int(starts[ep]), int(starts[ep + 1])) for ep in range(len(demos))},
        infos,
        small,
        DemoRows(reader, records, starts, cameras, (where, demos, {k: first[k] for k in cameras})),
        (0, window - 1),
        passes.episode_capacity,
    )
    windows = SequenceWindows(lengths, opts, names=demos, where=path)
    pinned, load_pinned = None, None
    goals = [k for k in cameras if k.startswith("next_obs/")] if opts.goal_mode == "last" else []
    if goals:
        pinned = windows.goal_positions(np.arange(len(demos)))[:, 0]
        load_pinned = GoalFrames(reader, records, pinned, goals)
    frames = EpisodeUnits(chunks, starts[:-1], lengths, pinned, load_pinned, pinned_fields=goals)
    sample_units = frames.units_of(windows.episode_of, windows.first_positions())
    summary = (
        f"{len(demos)} demos in {len(units)} units of up to {int(chunks.lengths.max())} steps, "
        f"{len(windows)} samples from {len(reader.shards)} shard(s) in {reader.dir}, "
        + passes.describe_shuffle(len(units), "units")
        + (", samples drawn with replacement" if passes.replacement else "")
        + f"; bounded: {bound}"
    )
    return RobomimicShardSamples(
        frames,
        windows,
        demos=demos,
        hdf5_path=path,
        filter_by_attribute=filter_by_attribute,
        backend_name=backend,
        location=reader.dir,
        passes=passes,
        sample_units=sample_units,
        serving=Serving(summary, hold=hold),
    )


# The loaders the episode buffers call. Module-level classes, not closures: the dataset is pickled when a DataLoader
# with spawned workers serves it (robomimic's DataLoader under a spawn start method, a validation loader); they
# hold the ShardReader, which opens a shard file for each read, so a worker reads the same files with its own
# handles (nothing open, no lock, no thread is pickled).


class ShardDemos:
    """A demo's fields read from the shards for ``EpisodeFrames`` (``read(ep, fields)``): every field SequenceDataset
    serves on a first load (checked and shaped by ``episode_fields``), the frame fields only on a reload.

    Args:
        reader: The open ``ShardReader``.
        demos: The demos served, in order (for messages).
        records: Each demo's record in the shards.
        lengths: Each demo's steps.
        opts: SequenceDataset's arguments.
        transform: Applied to each demo's arrays as read (``None``: none); must pickle too.
    """

    def __init__(
        self, reader, demos: list[str], records: list[int], lengths: list[int], opts, transform=None, origin=None
    ):
        self.reader, self.demos, self.records, self.lengths = reader, demos, records, lengths
        self.opts, self.transform, self.wanted = opts, transform, opts.field_names()
        self.origin = origin or reader.dir  # what messages about a demo's arrays name: the source file
        self.shapes: dict = {}  # each field's step shape in demo 0, once known (check_step_shapes)
        self.dtypes: dict = {}  # each field's dtype in demo 0, frames by their header (check_step_shapes)
        self.first_lacks: set = set()  # the dataset keys demo 0 lacks (field_infos)

    def __call__(self, ep: int, fields) -> dict:
        _, arrays = self.reader.read_episode(self.records[ep], decode_frames=False, fields=fields or self.wanted)
        if self.transform is not None:
            arrays = self.transform(arrays)
        if fields is not None:  # a reload: frames only (the small fields are kept by EpisodeFrames)
            return arrays
        served = episode_fields(arrays.get, self.lengths[ep], self.opts, f"{self.origin}: {self.demos[ep]}")
        small = {k: v for k, v in served.items() if not isinstance(v, EncodedFrames)}
        where = f"{self.origin}: {self.demos[ep]}"
        check_step_shapes(small, self.shapes, where, self.demos[0], _lacking(arrays, self.opts), self.first_lacks)
        check_step_shapes(served, self.shapes, where, self.demos[0], dtypes=self.dtypes)  # frames by their header
        return served

    def field_infos(self, ep: int = 0) -> dict[str, FieldInfo]:
        """Every field's dtype and step shape from demo ``ep`` as read, without the transform: frames still encoded,
        their headers say what they decode to.

        Why without it: a transform that keeps decoded frames compressed decodes a demo's video segments, so
        learning the fields decoded the first demo of every file at build (a 100-file mixture, 200 segments; a
        reviewer's reproduction); a transform keeps each field's dtype and step shape.

        Args:
            ep: The demo.

        Returns:
            ``{field: FieldInfo}``.
        """
        _, arrays = self.reader.read_episode(self.records[ep], decode_frames=False, fields=self.wanted)
        served = episode_fields(arrays.get, self.lengths[ep], self.opts, f"{self.origin}: {self.demos[ep]}")
        if ep == 0:
            self.first_lacks = _lacking(arrays, self.opts)
        return {k: _field_info(v) for k, v in served.items()}


def _lacking(arrays: dict, opts) -> set:
    """The dataset keys a demo's stored arrays lack (robomimic serves zeros of shape (steps, 1) for them)."""
    return {k for k in opts.dataset_keys if "/" not in k and k not in arrays}


class DemoRows:
    """Camera rows ``lo..hi-1`` (rows of the demos laid end to end) of a demo, decoded, for ``ChunkFrames``
    (``load(ep, lo, hi)``), read from the shard parts holding them.

    Args:
        reader: The open ``ShardReader``.
        records: Each demo's record in the shards.
        starts: Each demo's first row, then the end of the last.
        cameras: The camera fields.
        first: ``(the source's "<file>: " prefix, the demos' names, {camera: the first demo's first row})``: each
            read is checked against the first demo's dtype and step shape (``check_step_shapes``).
    """

    def __init__(self, reader, records: list[int], starts: np.ndarray, cameras: list[str], first: tuple):
        self.reader, self.records, self.starts, self.cameras = reader, records, starts, cameras
        where, self.demos, rows = first
        self.where = where
        self.shapes = {k: v.shape[1:] for k, v in rows.items()}
        self.dtypes = {k: v.dtype for k, v in rows.items()}

    def __call__(self, ep: int, lo: int, hi: int) -> dict:
        start = int(self.starts[ep])
        rows = self.reader.read_frame_rows(self.records[ep], lo - start, hi - start, self.cameras)
        out = {k: v.decode_all() for k, v in rows.items()}
        check_step_shapes(out, self.shapes, self.where + self.demos[ep], self.demos[0], dtypes=self.dtypes)
        return out


class GoalFrames:
    """A demo's goal frames (``goal_mode="last"``: its last ``next_obs`` step) for ``EpisodeUnits``
    (``load_pinned(ep)``), decoded.

    Args:
        reader: The open ``ShardReader``.
        records: Each demo's record in the shards.
        pinned: Each demo's goal step.
        goals: The ``next_obs/`` camera fields.
    """

    def __init__(self, reader, records: list[int], pinned: np.ndarray, goals: list[str]):
        self.reader, self.records, self.pinned, self.goals = reader, records, pinned, goals

    def __call__(self, ep: int) -> dict:
        g = int(self.pinned[ep])
        rows = self.reader.read_frame_rows(self.records[ep], g, g + 1, self.goals)
        return {k: v.decode_all()[0] for k, v in rows.items()}
