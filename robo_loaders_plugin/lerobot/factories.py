"""Backend factories for LeRobot: ``factory(native_dataset, *, options)``, ``options`` being the backend's resolved
options object (``core.options``; declared in ``backends``).

LeRobot's own factory first builds its ``LeRobotDataset`` (cheap: parquet metadata, no video decoding), which
settles episode selection, ``delta_timestamps``, image transforms, tolerance and ImageNet stats exactly as
``lerobot-train`` would; a backend then serves the same items from its own storage, composed of the
framework-neutral parts: the LeRobot v3 source, a storage and its frame source, and LeRobot's item rules.
"""
from __future__ import annotations

import collections
import dataclasses

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.errors import BackendOptionError, SourceError
from robo_loaders_plugin.core.footprint import Available, check_fits
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.chunks import ChunkFrames, split_runs
from robo_loaders_plugin.frames.episodes import EpisodeFrames
from robo_loaders_plugin.footprints import EXPECTED_LOSSLESS_RATIO
from robo_loaders_plugin.frames.store import StoreFrames
from robo_loaders_plugin.lerobot.compat import (check_version, hf_cache_files, hf_fingerprint, hf_selection_digest,
                                                reader_settings)
from robo_loaders_plugin.lerobot.dataset import (LeRobotSamples, check_meta_match, check_rows_match,
                                                 check_supported)
from robo_loaders_plugin.pipeline.batches import PipelineDataset
from robo_loaders_plugin.pipeline.options import PassOptions, open_shards
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3, is_remote
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames
from robo_loaders_plugin.storage.store_cache import open_or_build, plan_store, summarize

logger = get_logger(__name__)

OPTION_PREFIX = "--dataset.backend_kwargs"
# what fits when a backend does not (its refusal names these)
_ALTERNATIVES = ("backend 'video_stream' (decodes the dataset's own videos, writes nothing, a bounded buffer)",
                 "backend 'datapipe' with its shards on a disk with room (option shards or cache_dir)")
_GPU_ALTERNATIVES = ("backend 'compressed_cache' (compressed frames, spilled to a file-backed cache on disk when RAM "
                     "cannot hold them)", _ALTERNATIVES[0])


def native_dataset(native, *, options=None):
    """LeRobot's own ``LeRobotDataset``, unchanged: the ``native`` backend, the baseline every other one is compared
    with.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built.
        options: Unused (``native`` declares no options).

    Returns:
        ``native`` itself.
    """
    return native


def _source(native) -> tuple[LeRobotV3, object]:
    check_version()
    check_supported(native)
    source = LeRobotV3(native.root)
    check_meta_match(native, source)  # the meta/ the backend reads is the one LeRobot's object holds
    return source, reader_settings(native)


def compressed_cache_dataset(native, *, options):
    """Every episode read (video decoded) once into a compressed episode store shared by the host's processes;
    LeRobot's DataLoader workers serve its items (``compressed_cache``). The store is placed (RAM file or
    file-backed on disk) from metadata before anything is read, and reused from the cache directory while the
    source and options are unchanged.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

    Returns:
        A :class:`~robo_loaders_plugin.lerobot.dataset.LeRobotSamples` over the store.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported (``check_supported``), its rows differ from LeRobot's
            (``check_rows_match``), or a reused store holds other episodes than those selected.
        core.footprint.ResourceRefused: the store fits neither RAM nor the disk.
    """
    frame_codec = FrameCodec(options.codec, options.level, options.filter)
    source, settings = _source(native)
    key = {"root": str(source.root), "episodes": native.episodes, "codec": frame_codec.as_dict(),
           "tolerance_s": settings.tolerance_s, "video_backend": settings.video_backend, "v": 2}
    plan, cache_dir = plan_store(source.data_size(native.episodes), kind="lerobot", key_desc=key,
                                 source_path=str(source.root), options=options, option_prefix=OPTION_PREFIX,
                                 alternatives=_ALTERNATIVES)
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays)

    def write(writer):
        for ep, _, _ in tqdm(episodes.runs, desc=f"compressed_cache [{native.repo_id}]", unit="episode",
                             mininterval=0.5):
            writer.add_episode(f"episode_{ep}", *episodes.read(ep))

    store, hold, reused = open_or_build(kind="lerobot", source=source, key_desc=key, write=write, codec=frame_codec,
                                        cache_dir=cache_dir, max_memory=options.max_memory if plan.in_ram else None,
                                        build_workers=options.build_workers, option_prefix=OPTION_PREFIX,
                                        meta={"source": str(source.root), "framework": "lerobot"},
                                        description=f"compressed_cache of {source.root}",
                                        disk_estimate=plan.footprint.disk_bytes or None)
    if [e["name"] for e in store.episodes] != [f"episode_{ep}" for ep, _, _ in episodes.runs]:
        raise SourceError(f"{store.path} does not hold the episodes {native.repo_id} selects; delete it")
    summary = (summarize(store, len(episodes.runs), sum(e - s for _, s, e in episodes.runs), reused)
               + f"; bounded: {plan.footprint.bound}")
    return LeRobotSamples(native, StoreFrames(store, hold), episodes.runs, episodes.columns, source.video_keys,
                          source.image_keys, backend_name="compressed_cache", location=store.path,
                          serving=Serving(summary, hold=hold))


class LeRobotShardSamples(LeRobotSamples, PipelineDataset):
    """LeRobot items read from robo-shards; ``lerobot-train``'s passes ordered by the datapipe pipeline over the
    frames its EpisodeAwareSampler would serve."""


def datapipe_dataset(native, *, options):
    """LeRobot items from lossless robo-shards (converted on first use), passes ordered by the torchdata pipeline
    over the frames lerobot-train's sampler would serve (``datapipe``). The episode buffer is sized in bytes from
    metadata (episodes held with their frames compressed) and checked against the machine before anything is read
    or converted.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

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
    source, settings = _source(native)
    # the buffer holds episodes, long ones in parts (frames.chunks), with their frames compressed (decoded per
    # batch): sized in bytes from metadata before anything is read or converted, again from the shards once open
    size = source.data_size(native.episodes)
    step = sum(size.frame_step_bytes.values())
    starts = np.concatenate([[0], np.cumsum(size.lengths)])
    meta_units = split_runs([(i, int(a), int(b)) for i, (a, b) in enumerate(zip(starts[:-1], starts[1:]))], step)
    reach = sum(_camera_reach(settings.delta_indices, source.video_keys + source.image_keys))
    held = np.array([(e - s + (reach if len(meta_units) > len(size.lengths) else 0))
                     * (step / EXPECTED_LOSSLESS_RATIO + size.other_step_bytes) for _, s, e in meta_units], np.int64)
    fits_instead = [f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset",
                    "backend 'video_stream' (parts of long episodes, a bounded buffer)"]
    passes, buffer = passes.sized(held, 0, OPTION_PREFIX,
                                  unit="units" if len(meta_units) > len(size.lengths) else "episodes")
    check_fits(buffer.footprint, Available.measure(), backend="datapipe", option_prefix=OPTION_PREFIX,
               alternatives=fits_instead)

    def convert(out_dir, fingerprint):
        from robo_loaders_plugin.lerobot.convert import convert_lerobot

        convert_lerobot(source.root, out_dir, repo_id=native.repo_id, num_workers=options.convert_workers,
                        tolerance_s=settings.tolerance_s, fingerprint=fingerprint)

    reader, hold = open_shards(framework="lerobot", source=source, shards=options.shards,
                               cache_dir=options.cache_dir, check_source=options.check_source,
                               key_desc={"root": str(source.root), "tolerance_s": settings.tolerance_s, "v": 3},
                               convert=convert, option_prefix=OPTION_PREFIX,
                               convert_hint=f"'robo-loaders convert lerobot {source.root} OUT_DIR'",
                               size=source.data_size(), backend="datapipe",
                               alternatives=["backend 'video_stream' (trains from the videos, writes nothing)",
                                             f"{OPTION_PREFIX}.cache_dir on a disk with room"])
    meta = reader.dataset.get("metadata", {})
    if settings.tolerance_s < float(meta.get("tolerance_s", 0.0)):
        raise SourceError(f"{reader.dir}: frames were checked with tolerance_s={meta['tolerance_s']} at conversion, "
                          f"stricter runs need tolerance_s={settings.tolerance_s}: convert again with --tolerance-s "
                          f"{settings.tolerance_s}")
    table = source.read_table(["index", "episode_index"], native.episodes)
    arrays = source.column_arrays(table, ["index", "episode_index"])
    runs = source.episode_runs(arrays["episode_index"])
    stored = {e["episode_index"]: e for e in meta.get("episodes", [])}
    for ep, s, e in runs:
        if ep not in stored or stored[ep]["length"] != e - s or f"episode_{ep}" not in reader.by_name:
            raise SourceError(f"{reader.dir}: episode {ep} is missing or has another length than in {source.root}; "
                              "convert the dataset again")
    columns = list(meta.get("columns", []))
    records = [reader.by_name[f"episode_{ep}"] for ep, _, _ in runs]
    cameras = list(meta.get("video_keys", [])) + list(meta.get("image_keys", []))
    units = split_runs(runs, sum(size.frame_step_bytes.values()))
    if len(units) > len(runs):  # long episodes: buffered in parts when the shards store them in parts
        cut = collections.Counter(ep for ep, _, _ in units)
        if all(reader.has_parts(r) for r, (ep, _, _) in zip(records, runs) if cut[ep] > 1):
            return _datapipe_units(native, options, reader, hold, runs, records, units, columns, cameras, settings,
                                   arrays["index"], fits_instead)
        logger.warning(f"datapipe: {reader.dir} stores its long episodes whole (converted by an earlier "
                       "robo-loaders), so whole episodes are buffered; convert it again to buffer parts of them")
    # sized again from what the shards store (index.json's member sizes, nothing read): the estimate above assumed
    # EXPECTED_LOSSLESS_RATIO, and camera noise packs worse (L480: 1.25:1), which held more than the bound said
    passes, buffer = PassOptions.of(options).sized(np.array([reader.episode_bytes(r) for r in records], np.int64), 0,
                                                   OPTION_PREFIX, unit="episodes")
    check_fits(buffer.footprint, Available.measure(), backend="datapipe", option_prefix=OPTION_PREFIX,
               alternatives=fits_instead)

    def read(unit: int, fields):
        return reader.read_episode(records[unit], decode_frames=False, fields=fields)[1]

    first = read(0, None)
    numeric = [k for k, v in first.items() if k in columns and not isinstance(v, EncodedFrames)]
    checked = RowsChecked(native, reader, columns, options.cache_dir)
    if not checked.before():  # every row LeRobot's object holds, read from the shards (once per version of both)
        served = [first] + [read(u, numeric) for u in range(1, len(runs))]
        check_rows_match(native, columns, arrays["index"],
                         {k: np.concatenate([e[k] for e in served]) for k in numeric},
                         read_from=f"the shards in {reader.dir}")
        checked.record()
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), isinstance(v, EncodedFrames)) for k, v in first.items()}
    frames = EpisodeFrames([e - s for _, s, e in runs], infos, read, capacity=passes.episode_capacity,
                           decode_on_load=False)
    summary = (f"{len(runs)} episodes, {sum(e - s for _, s, e in runs)} frames from {len(reader.shards)} shard(s) "
               f"in {reader.dir}, {passes.describe_shuffle(len(runs))}; bounded: {buffer.footprint.bound}")
    return LeRobotShardSamples(native, frames, runs, columns, meta.get("video_keys", []), meta.get("image_keys", []),
                               backend_name="datapipe", location=reader.dir, passes=passes,
                               serving=Serving(summary, hold=hold))


def _datapipe_units(native, options, reader, hold, runs, records, units, columns, cameras, settings, index,
                    fits_instead):
    """datapipe over parts of long episodes (``frames.chunks``), as video_stream buffers them: each unit loaded with
    the rows its windows reach outside it, only the shard parts holding those rows read (``format.part_bounds``).

    Why: a whole 20-s episode of three 480p cameras is 1.3 GB even compressed, so a byte-sized buffer held one
    or two of them and the shuffle buffer was a single episode (batches drawn from one episode at a time). The
    fields that are not camera frames (a few bytes per row) are read once and held for every row."""
    meta = reader.dataset.get("metadata", {})
    margin = _camera_reach(settings.delta_indices, cameras)
    stored_row = max(reader.episode_bytes(r) / max(1, e - s) for r, (_, s, e) in zip(records, runs))
    held = np.array([(e - s + sum(margin)) * stored_row for _, s, e in units], dtype=np.int64)
    passes, buffer = PassOptions.of(options).sized(held, 0, OPTION_PREFIX, unit="units")
    check_fits(buffer.footprint, Available.measure(), backend="datapipe", option_prefix=OPTION_PREFIX,
               alternatives=fits_instead)
    numeric = [c for c in columns if c not in cameras]
    served = [reader.read_episode(r, decode_frames=False, fields=numeric)[1] for r in records]
    small = {k: np.concatenate([e[k] for e in served]) for k in numeric}
    checked = RowsChecked(native, reader, columns, options.cache_dir)
    if not checked.before():  # the rows compared once per version of the shards and of LeRobot's table
        check_rows_match(native, columns, index, small, read_from=f"the shards in {reader.dir}")
        checked.record()
    position = {ep: i for i, (ep, _, _) in enumerate(runs)}
    first = reader.read_frame_rows(records[0], 0, 1, cameras)
    infos = {k: FieldInfo(v.dtype, tuple(v.shape[1:]), False) for k, v in small.items()}
    infos.update({k: FieldInfo(v.dtype, tuple(v.shape[1:]), True) for k, v in first.items()})

    def load(ep: int, lo: int, hi: int) -> dict:
        i = position[ep]
        start = runs[i][1]
        return reader.read_frame_rows(records[i], lo - start, hi - start, cameras)

    frames = ChunkFrames(units, {ep: (s, e) for ep, s, e in runs}, infos, small, load, margin,
                         passes.episode_capacity)
    summary = (f"{len(runs)} episodes in {len(units)} units of up to {int(frames.lengths.max())} frames, "
               f"{sum(e - s for _, s, e in runs)} frames from {len(reader.shards)} shard(s) in {reader.dir}, "
               f"{passes.describe_shuffle(len(units), 'units')}; bounded: {buffer.footprint.bound}")
    return LeRobotShardSamples(native, frames, runs, columns, meta.get("video_keys", []), meta.get("image_keys", []),
                               backend_name="datapipe", location=reader.dir, passes=passes, units=units,
                               serving=Serving(summary, hold=hold))


class RowsChecked:
    """That datapipe's shards passed ``check_rows_match`` against LeRobot's dataset object as both are now: the
    shards' index checksum and LeRobot's Arrow cache files (names, sizes, mtimes, inodes, ctimes) and selection,
    recorded in ``<cache root>/.validated/`` (``storage.cache.records_dir``: under the backend's ``cache_dir``).

    Why: the check reads every row of every numeric column from the shards, a read per episode (~20 s for a
    million frames in 10,000 episodes, at every start); shards that did not change (their index checksum covers
    every member's location and CRC, checked on every read) compared with a LeRobot table that did not change
    give the same answer. A table LeRobot holds in memory (no cache files) is always checked. Never an error: a
    record that cannot be read or written only means the rows are checked again."""

    METHOD = "lerobot-rows-v1"

    def __init__(self, native, reader, columns, cache_dir: str | None = None):
        import hashlib
        import os

        from robo_loaders_plugin.storage.cache import records_dir
        from robo_loaders_plugin.storage.fingerprint import stat_files

        self.doc = None
        hf = native.hf_dataset
        files = hf_cache_files(hf)
        if not files:
            return
        try:
            self.doc = {"method": self.METHOD, "shards": os.path.realpath(reader.dir),
                        "index": reader.index.get("checksum"), "columns": list(columns),
                        "episodes": native.episodes, "fingerprint": hf_fingerprint(hf),
                        "files": [list(stat_files(f)[0]) + [f] for f in files],
                        "indices": hf_selection_digest(hf)}
            key = hashlib.sha256(repr(self.doc["shards"]).encode()).hexdigest()[:32]
            self.path = os.path.join(records_dir(cache_dir), f"rows-{key}.json")
        except (OSError, ValueError, TypeError):
            self.doc = None

    def before(self) -> bool:
        """Whether the rows were checked already against the shards and LeRobot's table as both are now.

        Returns:
            True when the record matches; false when there is none, it differs or cannot be read, or LeRobot holds
            its table in memory.
        """
        import json

        if self.doc is None:
            return False
        try:
            with open(self.path) as f:
                return json.load(f) == json.loads(json.dumps(self.doc))
        except (OSError, ValueError):
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


def gpu_resampler_dataset(native, *, options):
    """Every episode's fields held as tensors (on the training GPU when they fit), batches gathered in a few index
    operations over lerobot-train's sampler order, delta steps optionally at another rate (``gpu_resampler``).
    The tiers (GPU, host raw, host compressed, spilled to disk) are planned and checked from metadata before any
    data is read.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built (episode selection, ``delta_timestamps``,
            transforms, tolerance).
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

    Returns:
        A :class:`~robo_loaders_plugin.lerobot.dataset.LeRobotSamples` over :class:`TieredFrames`; batches are built
        in the training process without threads when every episode is on the GPU.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        BackendOptionError: a bad ``device``, or ``delta_timestamps`` naming keys the dataset does not have, or
            bad ``modes``.
        SourceError: the dataset is not supported, or its rows differ from LeRobot's.
        core.footprint.ResourceRefused: the data does not fit the tiers' budgets or the machine.
    """
    from robo_loaders_plugin.frames.tensors import TieredFrames, plan_tiers_checked, training_device
    from robo_loaders_plugin.storage.cache import location
    from robo_loaders_plugin.windows.rates import resolve_modes

    target_fps = options.target_fps
    source, settings = _source(native)
    train_device = training_device(options.device, OPTION_PREFIX)
    delta_steps = _delta_steps(native, settings.delta_indices, target_fps, options.delta_timestamps)
    plan_tiers_checked(source.data_size(native.episodes), train_device, options, OPTION_PREFIX, _GPU_ALTERNATIVES,
                       quiet=True)  # before reading any data; made again below in the rows' order
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays)
    first_ep = episodes.runs[0][0]
    first, cameras = episodes.read(first_ep)
    infos = {k: FieldInfo(a.dtype, tuple(a.shape[1:]), k in cameras) for k, a in first.items()}
    unknown = sorted(set(delta_steps or {}) - set(infos))
    if unknown:
        raise BackendOptionError(f"{OPTION_PREFIX}.delta_timestamps names {unknown}, which {native.repo_id} does not "
                                 f"have; its features are {sorted(infos)}")
    modes = resolve_modes({k: infos[k] for k in delta_steps or {}}, options.modes, OPTION_PREFIX)
    lengths = [e - s for _, s, e in episodes.runs]
    # the tiers again in the rows' order (the check above summed the episodes in index order: the same bytes)
    size = dataclasses.replace(source.data_size(native.episodes), lengths=np.asarray(lengths, dtype=np.int64))
    plan, host_limit = plan_tiers_checked(size, train_device, options, OPTION_PREFIX, _GPU_ALTERNATIVES)
    frames = TieredFrames(lengths, infos, plan, train_device, host_limit=host_limit, spill_dir=plan.spill_dir,
                          overflow_dir=location(options.cache_dir),
                          names=[f"episode_{ep}" for ep, _, _ in episodes.runs])
    for unit, (ep, _, _) in enumerate(tqdm(episodes.runs, desc=f"gpu_resampler [{native.repo_id}]", unit="episode",
                                           mininterval=0.5)):
        frames.fill(unit, first if ep == first_ep else episodes.read(ep)[0])
        if ep == first_ep:
            first = None  # not held for the rest of the fill (an L480 episode is 1.66 GB decoded)
    rates = f", windows at {target_fps:g} Hz on {source.fps} Hz data" if target_fps else ""
    where = plan.describe(str(train_device))
    if frames.spilled_while_filling:
        where += f" (then {frames.spilled_while_filling})"
    summary = (f"{len(lengths)} episodes, {sum(lengths)} frames, {where}, batches on {train_device}{rates}; "
               f"bounded: {plan.footprint.bound}")
    on_device = plan.device == len(lengths) and train_device.type == "cuda"
    return LeRobotSamples(native, frames, episodes.runs, episodes.columns, source.video_keys, source.image_keys,
                          backend_name="gpu_resampler", location=f"tensors: {where}", delta_steps=delta_steps,
                          modes=modes, serving=Serving(summary, batch_threads=0 if on_device else None))


def _delta_steps(native, delta_indices, target_fps, delta_timestamps) -> dict | None:
    """Each delta key's offsets in recorded steps: LeRobot's ``delta_indices`` (the policy's steps at the recorded
    rate), those steps at ``target_fps``, or explicit ``delta_timestamps`` in seconds, at any offsets (LeRobot
    itself only accepts multiples of 1/fps)."""
    fps = float(native.meta.fps)
    if delta_timestamps is not None:  # checked (finite, bounded, not with target_fps) by the option declarations
        return {key: [float(x) * fps for x in offsets] for key, offsets in delta_timestamps.items()}
    if delta_indices is None or target_fps is None:
        return None
    return {k: [float(i) * fps / target_fps for i in v] for k, v in delta_indices.items()}


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
        options: The backend's resolved options object (``core.options``; declared in ``backends``).

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
        source = LeRobotV3(native.root, options.storage_options, videos_from=url,
                           local_cache_dir=options.local_cache_dir)
        remote = LeRobotV3(url, options.storage_options)
        if remote.info != source.info or sorted(remote.episodes) != sorted(source.episodes):
            raise SourceError(f"{url} is not the dataset at {native.root} (meta/info.json or the episode table "
                              "differ); point --dataset.root at a copy of its tables, or leave it unset")
    else:
        source = LeRobotV3(url or native.root)
        if options.local_cache_dir:
            logger.warning(f"video_stream: local_cache_dir ignored: the videos of {url or native.root} are "
                           "local already")
    check_meta_match(native, source)  # the meta/ read (the local tables for a remote source) is LeRobot's
    device = _decode_device(options.decode_device, source)
    # the buffer, sized in bytes from metadata before anything is read: long episodes are cut into units of
    # ~32 MB decoded (frames.chunks), each loaded with the frames its windows reach outside it
    size = source.data_size(native.episodes)
    step = sum(size.frame_step_bytes.values())
    margin = _camera_reach(settings.delta_indices, source.video_keys + source.image_keys)
    held_per_step = step / EXPECTED_LOSSLESS_RATIO if options.buffer == "lz4" else step
    starts = np.concatenate([[0], np.cumsum(size.lengths)])
    meta_units = split_runs([(i, int(a), int(b)) for i, (a, b) in enumerate(zip(starts[:-1], starts[1:]))], step)
    unit_held = np.array([(e - s + sum(margin)) * held_per_step for _, s, e in meta_units], dtype=np.int64)
    passes, buffer = passes.sized(unit_held, 0, OPTION_PREFIX,
                                  unit="units" if len(meta_units) > len(size.lengths) else "episodes")
    check_fits(buffer.footprint, Available.measure(), backend="video_stream", option_prefix=OPTION_PREFIX,
               alternatives=[f"{OPTION_PREFIX}.cache_memory (bytes) smaller, or cache_episodes unset",
                             f"{OPTION_PREFIX}.buffer='lz4' (units held compressed)"])
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes, decode_device=device)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays)
    infos = {k: FieldInfo(a.dtype, tuple(a.shape[1:]), False) for k, a in episodes.arrays.items()}
    for key in episodes.camera_keys:  # decoded as (C, H, W) uint8 from the (H, W, C) the features state
        h, w, c = source.features[key]["shape"]
        infos[key] = FieldInfo(np.dtype(np.uint8), (c, h, w), True)
    codec = FrameCodec("lz4", 1) if options.buffer == "lz4" else None

    def load(ep: int, lo: int, hi: int) -> dict:
        arrays = episodes.read_frames(ep, lo, hi)
        if codec is not None:
            arrays = {k: EncodedFrames.encode(v, codec, f"{source.url} episode {ep} {k} rows {lo}..{hi - 1}")
                      for k, v in arrays.items()}
        return arrays

    units = split_runs(episodes.runs, step)
    frames = ChunkFrames(units, episodes.rows, infos, episodes.arrays, load, margin, passes.episode_capacity)
    cached = f", videos copied whole into {source.file_cache.directory}" if source.file_cache else ""
    split = len(units) > len(episodes.runs)
    parts = f" in {len(units)} units of up to {int(frames.lengths.max())} frames" if split else ""
    unit = "units" if split else "episodes"
    summary = (f"{len(episodes.runs)} episodes{parts}, {sum(e - s for _, s, e in episodes.runs)} frames streamed "
               f"from {url or source.url} ({device} decode, {options.buffer} buffer of "
               f"{min(passes.episode_capacity, len(units))} {unit}, {passes.describe_shuffle(len(units), unit)}"
               f"{cached}); bounded: {buffer.footprint.bound}")
    return LeRobotStreamSamples(native, frames, episodes.runs, episodes.columns, source.video_keys, source.image_keys,
                                backend_name="video_stream", location=url or source.url, source=source,
                                passes=passes, units=units,
                                decode_threads=options.decode_threads, serving=Serving(summary))


def _camera_reach(delta_indices: dict | None, cameras) -> tuple[int, int]:
    """Rows a camera window reaches before and after its item (LeRobot's ``delta_indices`` of the cameras)."""
    deltas = [d for k, v in (delta_indices or {}).items() if k in cameras for d in v]
    if not deltas:
        return 0, 0
    return max(0, -int(np.floor(min(deltas)))), max(0, int(np.ceil(max(deltas))))


def _decode_device(option: str, source) -> str:
    """``cpu``, or ``cuda`` for NVDEC once it is known to decode the dataset's codecs here (sources.nvdec)."""
    import torch

    from robo_loaders_plugin.sources.nvdec import nvdec_unusable

    if option == "cpu" or (option == "auto" and not torch.cuda.is_available()):
        return "cpu"
    if not torch.cuda.is_available():
        raise BackendOptionError(f"{OPTION_PREFIX}.decode_device='cuda' but torch sees no CUDA GPU; use 'cpu' or "
                                 "'auto'")
    problem = nvdec_unusable(source)
    if problem:
        if option == "auto":
            logger.info(f"video_stream: decoding on the CPU: {problem}")
            return "cpu"
        raise BackendOptionError(f"{OPTION_PREFIX}.decode_device='cuda': {problem}")
    return "cuda"
