"""The ``datapipe`` backend for LeRobot: ``LeRobotDataset`` items served from robo-shards, and in training whole
batches from the torchdata.nodes pipeline (``robo_loaders_plugin.backends.datapipe``).

Why two faces: ``lerobot-train`` builds a map-style ``DataLoader`` with ``EpisodeAwareSampler`` and then only
calls ``cycle(dataloader)``. As a map-style dataset this backend is what the eval split and any user code see
(``ds[i]`` equals ``LeRobotDataset[i]``). For training, the ``cycle`` patch hands the loop the pipeline's batches
instead: the same frames the sampler would serve (its episodes, ``drop_n_last_frames``, seed and, on ``--resume``,
its epoch and offset), each exactly once per pass, ordered by the episode-buffer shuffle so that an episode's
record is read from its shard about once per pass. Frames stay compressed in the episode buffer and are
decompressed per batch (each is used about once per pass), so memory holds compressed episodes only.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from robo_loaders_plugin.backends.compressed_cache.build import fingerprint
from robo_loaders_plugin.backends.datapipe.pipeline import BatchPlanNode, EpisodeCache, build_loader
from robo_loaders_plugin.backends.shards import ShardReader
from robo_loaders_plugin.codecs.frames import use_single_thread
from robo_loaders_plugin.lerobot.convert import DEFAULT_TOLERANCE_S, convert_lerobot, source_files
from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.lerobot.factories import OPTION_PREFIX, check_supported, episode_runs
from robo_loaders_plugin.lerobot.source import arrow_table
from robo_loaders_plugin.spec import BackendOptionError, RoboLoadersError


# open episodes stay compressed (frames are decoded per batch): a wide buffer costs little memory and
# mixes batches far better (episode mix 0.64 vs 0.26 at 16 on 200 episodes, batch 64)
DEFAULT_SHUFFLE_BUFFER = 64


class _PlanFrom(BatchPlanNode):
    """A batch plan whose first pass starts at a given (epoch, batch): where LeRobot's sampler says a resumed
    run continues."""

    def __init__(self, *args, start: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self._start = start

    def reset(self, initial_state=None):
        if initial_state is None and self._start is not None:
            initial_state, self._start = self._start, None
        super().reset(initial_state)


class ShardLeRobotDataset(LeRobotSamples):
    def __init__(self, native, reader: ShardReader, *, columns, video_keys, image_keys, runs, seed,
                 shuffle_buffer: int, prefetch: int, cache_episodes: int, replacement: bool = False):
        ep_index = np.concatenate([np.full(e - s, ep, dtype=np.int64) for ep, s, e in runs])
        first = [int(native.meta.episodes[ep]["dataset_from_index"]) for ep, _, _ in runs]
        abs_index = np.concatenate([np.arange(f, f + e - s) for f, (_, s, e) in zip(first, runs)])
        super().__init__(native, columns=columns, video_keys=video_keys, image_keys=image_keys,
                         abs_index=abs_index, episode_index=ep_index, backend_name="datapipe")
        self.reader = reader
        self.seed, self.shuffle_buffer, self.prefetch = seed, int(shuffle_buffer), int(prefetch)
        self.replacement = bool(replacement)
        self.cache_episodes = max(int(cache_episodes), 2 * self.shuffle_buffer)
        self._run_start = np.array([s for _, s, _ in runs], dtype=np.int64)
        self._run_record = [reader.by_name[f"episode_{ep}"] for ep, _, _ in runs]
        self._row_run = np.repeat(np.arange(len(runs)), [e - s for _, s, e in runs])
        self.cache = None
        self.build_summary = (f"{len(runs)} episodes, {self._num_rows} frames from {len(reader.shards)} shard(s) "
                              f"in {reader.dir}, shuffle buffer {shuffle_buffer} episodes")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["cache"] = None  # holds a lock and episodes read from the shards: each process makes its own
        return state

    def __repr__(self):
        return super().__repr__()[:-1] + f", shards={self.reader.dir})"

    def _episode(self, run: int) -> dict:
        if self.cache is None:
            self.cache = EpisodeCache(lambda r: self.reader.read_episode(self._run_record[r], decode_frames=False)[1],
                                      self.cache_episodes)
        return self.cache.get(run)

    def _gather(self, key: str, rows: np.ndarray, frames: bool) -> np.ndarray:
        flat = rows.reshape(-1)
        runs = self._row_run[flat]
        local = flat - self._run_start[runs]
        out = None
        for r in np.unique(runs):
            at = np.flatnonzero(runs == r)
            values = self._episode(int(r))[key]
            if out is None:
                out = np.empty((flat.size,) + tuple(values.shape[1:]), dtype=values.dtype)
            if frames:
                values.decode_into(local[at].tolist(), out, at.tolist())
            else:
                out[at] = values[local[at]]
        return out.reshape(rows.shape + out.shape[1:])

    def _column(self, key, rows):
        return self._gather(key, rows, frames=False)

    def _frames(self, key, rows):
        return self._gather(key, rows, frames=True)

    # -- training: the pipeline behind lerobot-train's `cycle(dataloader)` ---------------------------------------
    def training_loader(self, dataloader):
        """A torchdata Loader over the frames ``dataloader``'s EpisodeAwareSampler would serve; one pass per
        ``iter()``, starting at the sampler's epoch and offset."""
        if torch.distributed.is_available() and torch.distributed.is_initialized() and \
                torch.distributed.get_world_size() > 1:
            raise RoboLoadersError("--dataset.backend=datapipe runs single-process for now (the pipeline does "
                                   "not split batches across ranks); use --dataset.backend=compressed_cache with "
                                   "several processes")
        batch_sampler = dataloader.batch_sampler
        sampler = getattr(batch_sampler, "sampler", None)
        try:
            lengths = np.diff(np.concatenate([[0], sampler._cum_lengths]))
            starts, a2r = sampler._starts, sampler._absolute_to_relative
            state, seed, shuffle = sampler.state_dict(), sampler.seed, sampler.shuffle
        except AttributeError:
            raise RoboLoadersError(f"--dataset.backend=datapipe expects lerobot-train's EpisodeAwareSampler, found "
                                   f"{type(sampler).__name__}; this LeRobot version is not supported") from None
        rel_starts = np.array([a2r[int(s)] if a2r is not None else int(s) for s in starts], dtype=np.int64)
        batch_size = int(batch_sampler.batch_size)
        start = {"epoch": int(state["epoch"]), "batch": int(state["start_index"]) // batch_size}
        plan = _PlanFrom(lengths, batch_size, bool(batch_sampler.drop_last),
                         self.seed if self.seed is not None else seed, self.shuffle_buffer, shuffle,
                         replacement=self.replacement, start=start)

        def assemble(windows: np.ndarray) -> dict:
            return self.collated(rel_starts[windows[:, 0]] + windows[:, 1])

        loader = build_loader(plan, assemble, max(1, int(dataloader.num_workers)), self.prefetch,
                              pin_memory=bool(getattr(dataloader, "pin_memory", False)) and torch.cuda.is_available())
        self.plan = plan
        return loader

    def cycle(self, dataloader):
        """What ``lerobot.utils.utils.cycle(dataloader)`` yields in training, from the pipeline: passes
        one after another, forever."""
        loader = self.training_loader(dataloader)
        start = self.plan._start
        print(f"[robo-loaders] datapipe: lerobot-train's batches come from the torchdata pipeline "
              f"({max(1, int(dataloader.num_workers))} threads, {self.plan.num_batches()} batches per pass, "
              f"starting at epoch {start['epoch']} batch {start['batch']})", flush=True)
        while True:
            yield from loader


def _check_shards_match(reader: ShardReader, native, files: list) -> dict:
    meta = reader.dataset.get("metadata", {})
    if meta.get("framework") != "lerobot":
        raise RoboLoadersError(f"{reader.dir}: converted from a {meta.get('framework')!r} dataset, not LeRobot")
    root = native.root
    if meta.get("source_files") != files:
        raise RoboLoadersError(f"{reader.dir} was converted from a dataset whose files differ from {root} (a file "
                               f"was added, removed or changed size); convert it again with 'robo-loaders convert "
                               f"lerobot {root} OUT_DIR' or use 'cache_dir'")
    tolerance = float(native.reader._tolerance_s)
    if tolerance < float(meta.get("tolerance_s", DEFAULT_TOLERANCE_S)):
        raise RoboLoadersError(f"{reader.dir}: frames were checked with tolerance_s={meta['tolerance_s']} at "
                               f"conversion, stricter runs need tolerance_s={tolerance}: convert again with "
                               f"--tolerance-s {tolerance}")
    return meta


def datapipe_dataset(native, *, shards=None, cache_dir=None, shuffle_buffer=None, seed=None, prefetch=2,
                     convert_workers=1, cache_episodes=64, replacement=False):
    shuffle_buffer = DEFAULT_SHUFFLE_BUFFER if shuffle_buffer is None else shuffle_buffer
    if shuffle_buffer < 1 or prefetch < 0 or convert_workers < 1 or cache_episodes < 1:
        raise BackendOptionError(f"{OPTION_PREFIX}: shuffle_buffer, convert_workers, cache_episodes must be >= 1 "
                                 "and prefetch >= 0")
    check_supported(native)
    use_single_thread()
    root = os.path.realpath(native.root)
    files = source_files(root)
    if shards is None:
        if cache_dir is None:
            raise BackendOptionError(f"{OPTION_PREFIX}: the datapipe backend needs 'shards' (a directory made by "
                                     "'robo-loaders convert lerobot') or 'cache_dir' (converted there on first use)")
        fp = fingerprint({"root": root, "files": files, "tolerance_s": native.reader._tolerance_s})
        shards = os.path.join(os.path.expanduser(cache_dir), f"lerobot-shards-{fp}")
        if not os.path.exists(os.path.join(shards, "index.json")):
            convert_lerobot(root, shards, repo_id=native.repo_id, num_workers=convert_workers,
                            tolerance_s=native.reader._tolerance_s)
    reader = ShardReader(os.path.expanduser(shards))
    meta = _check_shards_match(reader, native, files)
    ep_index = arrow_table(native.hf_dataset.select_columns(["episode_index"])).column("episode_index")
    runs = episode_runs(np.asarray(ep_index.to_numpy(zero_copy_only=False), dtype=np.int64), native.meta)
    stored = {e["episode_index"]: e for e in meta["episodes"]}
    for ep, s, e in runs:
        if ep not in stored or stored[ep]["length"] != e - s:
            raise RoboLoadersError(f"{reader.dir}: episode {ep} is missing or has another length than in {root}; "
                                   "convert the dataset again")
    columns = list(native.hf_dataset.features)
    if columns != meta["columns"]:
        raise RoboLoadersError(f"{reader.dir}: columns {meta['columns']} differ from the dataset's {columns}")
    return ShardLeRobotDataset(native, reader, columns=columns, video_keys=meta["video_keys"],
                               image_keys=meta["image_keys"], runs=runs, seed=seed, shuffle_buffer=shuffle_buffer,
                               prefetch=prefetch, cache_episodes=cache_episodes, replacement=replacement)

