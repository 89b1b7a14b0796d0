"""``datapipe`` on LeRobot: LeRobotDataset's items from lossless robo-shards (converted on first use), passes
ordered by the torchdata pipeline; the shards' rows are checked against the dataset LeRobot opened.
"""

from __future__ import annotations

import collections

import numpy as np

from robo_loaders_plugin.core.data_size import EXPECTED_LOSSLESS_RATIO
from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.chunks import ChunkFrames, split_runs
from robo_loaders_plugin.frames.episodes import EpisodeFrames
from robo_loaders_plugin.lerobot.compat import hf_cache_files, hf_fingerprint, hf_selection_digest, hf_table_digest
from robo_loaders_plugin.lerobot.dataset import (
    OPTION_PREFIX,
    LeRobotSamples,
    camera_reach,
    check_rows_match,
    native_source,
    pipeline_batches,
    unit_bytes,
    windows_at_risk,
)
from robo_loaders_plugin.pipeline.batches import PipelineDataset
from robo_loaders_plugin.pipeline.buffer_plan import held_bytes
from robo_loaders_plugin.pipeline.options import PassOptions, open_shards
from robo_loaders_plugin.sources.lerobot_v3 import ROW_FRAME_SLACK, decoder_identity
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.storage.frame_layout import sampled_ratio
from robo_loaders_plugin.storage.shards.format import LAYOUT_VERSION

logger = get_logger(__name__)


class LeRobotShardSamples(LeRobotSamples, PipelineDataset):
    """LeRobot items read from robo-shards; ``lerobot-train``'s passes ordered by the datapipe pipeline over the
    frames its EpisodeAwareSampler would serve."""


# what fits when the buffer does not
BUFFER_FITS = (
    f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset",
    "backend 'video_stream' (parts of long episodes, a bounded buffer)",
)


def _estimated_unit_bytes(size, source, settings) -> tuple[np.ndarray, str]:
    """Bytes the buffer will hold per unit, estimated before anything is converted: frames compressed at the
    expected lossless ratio, with the rows' other fields (sized again from the shards once they are open)."""
    return unit_bytes(size, source, settings, frame_ratio=EXPECTED_LOSSLESS_RATIO, row_bytes=True, margin_always=False)


def datapipe_footprint(native, *, options, committed):
    """What this dataset's episode buffer will hold, estimated as :func:`datapipe_dataset` estimates it before
    converting, from ``meta/`` only (``BackendSpec.footprints``: a mixture checks its components' sum once, before
    building any; each conversion still checks its own disk as it writes).

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
    held, unit = _estimated_unit_bytes(size, source, settings)
    decoded, _ = unit_bytes(size, source, settings, frame_ratio=1.0, row_bytes=True, margin_always=False)
    batch, threads = pipeline_batches(size, settings)
    _, plan = PassOptions.of(options).sized(
        held, batch, OPTION_PREFIX, unit=unit, threads=threads, order_unit_bytes=decoded
    )
    return plan.planned(Available.measure(), BUFFER_FITS)


def datapipe_dataset(native, *, options):
    """LeRobot items from lossless robo-shards (converted on first use), passes ordered by the torchdata pipeline
    over the frames lerobot-train's sampler would serve (``datapipe``). The episode buffer is sized in bytes from
    metadata (episodes held with their frames compressed) and checked against the machine before anything is read
    or converted.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in this package's ``__init__``).

    Returns:
        A :class:`LeRobotShardSamples` over the shards' episodes.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported, the shards were checked with a looser ``tolerance_s`` than this
            run's, an episode is missing or has another length, or the rows differ from LeRobot's.
        StaleSourceError: given ``shards`` were converted from other data (with ``check_source``).
        core.footprint.ResourceRefused: the buffer does not fit host memory, or a conversion on first use does not
            fit the disk.
    """
    passes = PassOptions.of(options)
    source, settings = native_source(native)
    # the buffer holds episodes, long ones in parts (frames.chunks), with their frames compressed (decoded per
    # batch): sized in bytes from metadata before anything is read or converted, again from the shards once open
    size = source.data_size(native.episodes)
    step = sum(size.frame_step_bytes.values())
    held, unit = _estimated_unit_bytes(size, source, settings)
    # the pass's order (its shuffle buffer) is sized from the frames' decoded bytes, which no lossless store exceeds:
    # from metadata, the same whatever codec the shards were written with (sized from the shards' bytes, a run
    # resumed over shards converted again went on in another order: a reviewer's reproduction)
    decoded, _ = unit_bytes(size, source, settings, frame_ratio=1.0, row_bytes=True, margin_always=False)
    fits_instead = list(BUFFER_FITS)
    flight = pipeline_batches(size, settings)  # (batch bytes, threads) of the batches in flight
    passes.fit(
        held,
        flight[0],
        OPTION_PREFIX,
        backend="datapipe",
        alternatives=fits_instead,
        unit=unit,
        threads=flight[1],
        order_unit_bytes=decoded,
    )  # before converting; sized again from the shards below

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.lerobot.convert import convert_lerobot

        convert_lerobot(
            source.root,
            out_dir,
            repo_id=native.repo_id,
            num_workers=options.convert_workers,
            tolerance_s=settings.tolerance_s,
            fingerprint=fingerprint,
            window_gaps=risk,
        )

    decoder = decoder_identity() if source.video_keys else None  # PNG images need no decoder
    # cameras in windows whose frames this run's tolerance lets lie half a step from their rows: converted on first
    # use with that check, and kept apart from conversions without it (sources.lerobot_v3.gaps_at_risk)
    risk = windows_at_risk(source, settings)
    key_desc = {"root": str(source.root), "tolerance_s": settings.tolerance_s, "v": 3, "decoder": decoder}
    if risk:
        key_desc["window_gaps"] = risk
    reader, hold = open_shards(
        framework="lerobot",
        source=source,
        shards=options.shards,
        cache_dir=options.cache_dir,
        check_source=options.check_source,
        key_desc=key_desc,
        # given shards whose frames another torchcodec/FFmpeg decoded are refused
        must_record={"decoder_version": decoder} if decoder else None,
        convert=convert,
        option_prefix=OPTION_PREFIX,
        convert_hint=f"'robo-loaders convert lerobot {source.root} OUT_DIR'",
        size=source.data_size(),
        frame_ratio=lambda: sampled_ratio(source.sample_frames(), FrameCodec()),  # what convert_lerobot writes with
        backend="datapipe",
        alternatives=[
            "backend 'video_stream' (trains from the videos, writes nothing)",
            f"{OPTION_PREFIX}.cache_dir on a disk with room",
        ],
    )
    if reader.version < LAYOUT_VERSION:  # read as stored: an earlier version's frames field records no layout
        again = (
            "delete it and the next run converts it again"
            if hold is not None
            else f"convert it again ('robo-loaders convert lerobot {source.root} OUT_DIR')"
        )
        logger.info(
            f"datapipe: {reader.dir} stores camera frames channels first (robo-shards version {reader.version}, "
            f"converted by an earlier robo-loaders): read as stored, the same bytes; {again} to store them channels "
            "last, which packs camera frames smaller"
        )
    meta = reader.dataset.get("metadata", {})
    if settings.tolerance_s < float(meta.get("tolerance_s", 0.0)):
        raise SourceError(
            f"{reader.dir}: frames were checked with tolerance_s={meta['tolerance_s']} at conversion, "
            f"stricter runs need tolerance_s={settings.tolerance_s}: convert again with --tolerance-s "
            f"{settings.tolerance_s}"
        )
    _check_windows_checked(reader.dir, meta, settings, source)
    table = source.read_table(["index", "episode_index"], native.episodes)
    arrays = source.column_arrays(table, ["index", "episode_index"])
    runs = source.episode_runs(arrays["episode_index"])
    stored = {e["episode_index"]: e for e in meta.get("episodes", [])}
    for ep, s, e in runs:
        if ep not in stored or stored[ep]["length"] != e - s or f"episode_{ep}" not in reader.by_name:
            raise SourceError(
                f"{reader.dir}: episode {ep} is missing or has another length than in {source.root}; "
                "convert the dataset again"
            )
    columns = list(meta.get("columns", []))
    records = [reader.by_name[f"episode_{ep}"] for ep, _, _ in runs]

    def images() -> dict:  # the PNG columns as the data files hold them, read only when the rows are compared
        keys = [k for k in source.image_keys if k in columns]
        table = source.read_table(keys, native.episodes) if keys else None
        return {k: table.column(k) for k in keys} if table is not None else {}

    cameras = list(meta.get("video_keys", [])) + list(meta.get("image_keys", []))
    units = split_runs(runs, step)
    if len(units) > len(runs):  # long episodes: buffered in parts when the shards store them in parts
        cut = collections.Counter(ep for ep, _, _ in units)
        if all(reader.has_parts(r) for r, (ep, _, _) in zip(records, runs) if cut[ep] > 1):
            return _datapipe_units(
                native,
                options,
                reader,
                hold,
                runs,
                records,
                units,
                columns,
                cameras,
                settings,
                arrays["index"],
                fits_instead,
                flight,
                images,
                decoded,
            )
        logger.warning(
            f"datapipe: {reader.dir} stores its long episodes whole (converted by an earlier "
            "robo-loaders), so whole episodes are buffered; convert it again to buffer parts of them"
        )
    # sized again from what the shards store (index.json's member sizes, nothing read): the estimate above assumed
    # EXPECTED_LOSSLESS_RATIO, and camera noise packs worse (L480: 1.25:1), which held more than the bound said
    passes, buffer = passes.fit(
        np.array([reader.episode_bytes(r) for r in records], np.int64),
        flight[0],
        OPTION_PREFIX,
        backend="datapipe",
        alternatives=fits_instead,
        unit="episodes",
        threads=flight[1],
        order_unit_bytes=decoded,
    )

    read = ShardEpisodes(reader, records)
    first = read(0, None)
    numeric = [k for k, v in first.items() if k in columns and not isinstance(v, EncodedFrames)]
    checked = RowsChecked(native, reader, columns, options.cache_dir)
    if not checked.before():  # every row LeRobot's object holds, read from the shards (once per version of both)
        served = [first] + [read(u, numeric) for u in range(1, len(runs))]
        check_rows_match(
            native,
            columns,
            arrays["index"],
            {k: np.concatenate([e[k] for e in served]) for k in numeric},
            read_from=f"the shards in {reader.dir}",
            images=images(),
        )
        checked.record()
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), isinstance(v, EncodedFrames)) for k, v in first.items()}
    frames = EpisodeFrames(
        [e - s for _, s, e in runs],
        infos,
        read,
        capacity=passes.episode_capacity,
        decode_on_load=False,
        fields_alone=True,  # ShardEpisodes reads any fields as a first load does
    )
    summary = (
        f"{len(runs)} episodes, {sum(e - s for _, s, e in runs)} frames from {len(reader.shards)} shard(s) "
        f"in {reader.dir}, {passes.describe_shuffle(len(runs))}; bounded: {buffer.footprint.bound}"
    )
    return LeRobotShardSamples(
        native,
        frames,
        runs,
        columns,
        meta.get("video_keys", []),
        meta.get("image_keys", []),
        backend_name="datapipe",
        location=reader.dir,
        passes=passes,
        serving=Serving(summary, hold=hold),
    )


def _datapipe_units(
    native,
    options,
    reader,
    hold,
    runs,
    records,
    units,
    columns,
    cameras,
    settings,
    index,
    fits_instead,
    flight,
    images,
    decoded,
):
    """datapipe over parts of long episodes (``frames.chunks``), as video_stream buffers them: each unit loaded with
    the rows its windows reach outside it, only the shard parts holding those rows read (``format.part_bounds``).

    Why: a whole 20-s episode of three 480p cameras is 1.3 GB even compressed, so a byte-sized buffer held one
    or two of them and the shuffle buffer was a single episode (batches drawn from one episode at a time). The
    fields that are not camera frames (a few bytes per row) are read once and held for every row."""
    meta = reader.dataset.get("metadata", {})
    margin = camera_reach(settings.delta_indices, cameras)
    stored_row = max(reader.episode_bytes(r) / max(1, e - s) for r, (_, s, e) in zip(records, runs))
    passes, buffer = PassOptions.of(options).fit(
        held_bytes(units, stored_row, sum(margin)),
        flight[0],
        OPTION_PREFIX,
        backend="datapipe",
        alternatives=fits_instead,
        unit="units",
        threads=flight[1],
        order_unit_bytes=decoded,
    )
    numeric = [c for c in columns if c not in cameras]
    served = [reader.read_episode(r, decode_frames=False, fields=numeric)[1] for r in records]
    small = {k: np.concatenate([e[k] for e in served]) for k in numeric}
    checked = RowsChecked(native, reader, columns, options.cache_dir)
    if not checked.before():  # the rows compared once per version of the shards and of LeRobot's table
        check_rows_match(native, columns, index, small, read_from=f"the shards in {reader.dir}", images=images())
        checked.record()
    first = reader.read_frame_rows(records[0], 0, 1, cameras)
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), False) for k, v in small.items()}
    infos.update({k: FieldInfo(v.dtype, tuple(v.shape[1:]), True) for k, v in first.items()})
    load = EpisodeRows(reader, records, runs, cameras)
    frames = ChunkFrames(units, {ep: (s, e) for ep, s, e in runs}, infos, small, load, margin, passes.episode_capacity)
    summary = (
        f"{len(runs)} episodes in {len(units)} units of up to {int(frames.lengths.max())} frames, "
        f"{sum(e - s for _, s, e in runs)} frames from {len(reader.shards)} shard(s) in {reader.dir}, "
        f"{passes.describe_shuffle(len(units), 'units')}; bounded: {buffer.footprint.bound}"
    )
    return LeRobotShardSamples(
        native,
        frames,
        runs,
        columns,
        meta.get("video_keys", []),
        meta.get("image_keys", []),
        backend_name="datapipe",
        location=reader.dir,
        passes=passes,
        units=units,
        serving=Serving(summary, hold=hold),
    )


# The loaders the episode buffers call. Module-level classes, not closures: LeRobot's evaluation loader
# (``--dataset.eval_split``) pickles the dataset into its spawned workers; they hold the ShardReader, which opens a
# shard file for each read, so a worker reads the same files with its own handles (nothing open, no lock, no
# thread is pickled).


class ShardEpisodes:
    """An episode's fields from the shards for ``EpisodeFrames`` (``read(unit, fields)``; ``None``: every field),
    camera frames still compressed (decoded per batch).

    Args:
        reader: The open ``ShardReader``.
        records: Each served episode's record in the shards, in the order of the runs.
    """

    def __init__(self, reader, records: list[int]):
        self.reader, self.records = reader, records

    def __call__(self, unit: int, fields) -> dict:
        return self.reader.read_episode(self.records[unit], decode_frames=False, fields=fields)[1]


class EpisodeRows:
    """Camera rows ``lo..hi-1`` (the dataset's rows) of an episode for ``ChunkFrames`` (``load(ep, lo, hi)``), read
    from the shard parts holding them, still compressed.

    Args:
        reader: The open ``ShardReader``.
        records: Each run's record in the shards.
        runs: ``(episode, first row, end row)`` of each served episode.
        cameras: The camera fields.
    """

    def __init__(self, reader, records: list[int], runs, cameras: list[str]):
        self.reader, self.records, self.cameras = reader, records, cameras
        self.position = {ep: (i, s) for i, (ep, s, _) in enumerate(runs)}

    def __call__(self, ep: int, lo: int, hi: int) -> dict:
        i, start = self.position[ep]
        return self.reader.read_frame_rows(self.records[i], lo - start, hi - start, self.cameras)


class RowsChecked:
    """That datapipe's shards passed ``check_rows_match`` against LeRobot's dataset object as both are now: the
    shards' index checksum and LeRobot's Arrow cache files (names, sizes, mtimes, inodes, ctimes) or, for a table
    it holds in memory (``compat.tables_read_directly``: a mixture's small components), a digest of its values
    (``compat.hf_table_digest``), and its selection, recorded in ``<cache root>/.validated/``
    (``storage.cache.records_dir``: under the backend's ``cache_dir``).

    Why: the check reads every row of every numeric column from the shards, a read per episode (~20 s for a
    million frames in 10,000 episodes, at every start); shards that did not change (their index checksum covers
    every member's location and CRC, checked on every read) compared with a LeRobot table that did not change
    give the same answer. Never an error: a record that cannot be read or written only means the rows are checked
    again."""

    METHOD = "lerobot-rows-v2"

    def __init__(self, native, reader, columns, cache_dir: str | None = None):
        import hashlib
        import os

        from robo_loaders_plugin.storage.cache import records_dir
        from robo_loaders_plugin.storage.fingerprint import stat_files

        self.doc = None
        hf = native.hf_dataset
        files = hf_cache_files(hf)
        try:
            self.doc = {
                "method": self.METHOD,
                "shards": os.path.realpath(reader.dir),
                "index": reader.index.get("checksum"),
                "columns": list(columns),
                # as JSON holds them: LeRobot takes a numpy array (or numpy ints) too, which json.dumps refused in
                # before(), a bare TypeError at every build after a record existed (a reviewer's reproduction)
                "episodes": None if native.episodes is None else [int(e) for e in native.episodes],
                # in memory: the values themselves (its fingerprint is drawn afresh at every read)
                "fingerprint": hf_fingerprint(hf) if files else None,
                "files": [list(stat_files(f)[0]) + [f] for f in files],
                "values": None if files else hf_table_digest(hf),
                "indices": hf_selection_digest(hf),
            }
            key = hashlib.sha256(repr(self.doc["shards"]).encode()).hexdigest()[:32]
            self.path = os.path.join(records_dir(cache_dir), f"rows-{key}.json")
        except (OSError, ValueError, TypeError):
            self.doc = None

    def before(self) -> bool:
        """Whether the rows were checked already against the shards and LeRobot's table as both are now.

        Returns:
            True when the record matches; false when there is none, it differs or cannot be read.
        """
        import json

        if self.doc is None:
            return False
        try:
            with open(self.path) as f:
                return json.load(f) == json.loads(json.dumps(self.doc))
        except (OSError, ValueError, TypeError):
            return False

    def record(self) -> None:
        """Record that the rows passed the check (after ``check_rows_match``); a record that cannot be written is
        skipped silently (the rows are checked again next time)."""
        import os

        from robo_loaders_plugin.core.files import atomic_write_json

        if self.doc is None:
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            atomic_write_json(self.path, self.doc)
        except (OSError, TypeError, ValueError):
            pass


def _check_windows_checked(directory: str, meta: dict, settings, source) -> None:
    """Refuse shards whose frames were never checked against this run's camera windows when their conversion's
    ``tolerance_s`` lets a frame lie half a window step or more from its row (``sources.lerobot_v3.gaps_at_risk``):
    served, LeRobot's windows would pick other frames than the shards hold (a reviewer's reproduction: a video
    missing a frame, converted without windows, served 22 of 30 items otherwise than ``LeRobotDataset``)."""
    risk = windows_at_risk(source, settings, float(meta.get("tolerance_s", 0.0)))
    checked = meta.get("window_gaps") or {}
    unchecked = {k: g for k, g in risk.items() if not (isinstance(checked.get(k), int) and checked[k] <= g)}
    if unchecked:
        key, gap = next(iter(unchecked.items()))
        raise SourceError(
            f"{directory}: its frames were converted with tolerance_s={meta.get('tolerance_s')}, which lets a frame of "
            f"{key} lie half a window step ({ROW_FRAME_SLACK * gap / source.fps:.4g} s) or more from its row, and "
            "were not checked against this run's delta_timestamps windows (LeRobot would pick other frames there); "
            f"convert again with --tolerance-s below {ROW_FRAME_SLACK * gap / source.fps:.4g}, or leave "
            f"{OPTION_PREFIX}.shards out (a conversion on first use checks them)"
        )
