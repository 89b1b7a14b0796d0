"""The ``datapipe`` backend for robomimic: SequenceDataset's windows served by the torchdata.nodes pipeline over
robo-shards (``robo_loaders_plugin.backends.datapipe``), as whole collated batches.

robomimic's training loop builds a DataLoader over whatever ``dataset_factory`` returns; this backend is a
:class:`~robo_loaders_plugin.batch_dataset.BatchDataset`, so the ``run_epoch`` patch iterates its batches instead.
Window contents follow exactly the same rules as the compressed cache (``episode_fields`` and the same index math),
so a window equals SequenceDataset's sample for that (demo, start).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from robo_loaders_plugin.backends.compressed_cache.build import fingerprint
from robo_loaders_plugin.backends.datapipe.pipeline import BatchPlanNode, EpisodeCache, build_loader, plan_windows
from robo_loaders_plugin.backends.shards import ShardReader
from robo_loaders_plugin.backends.shards.format import EncodedFrames
from robo_loaders_plugin.batch_dataset import BatchDataset
from robo_loaders_plugin.buffers import BufferPool
from robo_loaders_plugin.robomimic.factories import episode_fields, sequence_options
from robo_loaders_plugin.robomimic.sequence import goal_positions, sequence_counts, window_positions
from robo_loaders_plugin.spec import BackendOptionError, RoboLoadersError

OPTION_PREFIX = "train.data_backend_kwargs"
ROW_COPY_BYTES = 256  # fields with steps at least this big (camera frames) are copied window by window


# open episodes are held decoded (each frame then serves several windows): memory bounds the buffer
DEFAULT_SHUFFLE_BUFFER = 16


class ShardSequenceBatches(BatchDataset):
    backend_name = "datapipe"

    def __init__(self, reader: ShardReader, opts: dict, demos: list[str], *, seed: int, shuffle_buffer: int,
                 prefetch: int, cache_episodes: int, replacement: bool = False):
        self.reader, self.opts, self.demos = reader, opts, list(demos)
        self.obs_keys, self.dataset_keys = opts["obs_keys"], opts["dataset_keys"]
        self.n_demos = len(self.demos)
        self.seed, self.shuffle_buffer, self.prefetch = int(seed), int(shuffle_buffer), int(prefetch)
        self.replacement = bool(replacement)
        lengths = [int(reader.episodes[reader.by_name[d]]["length"]) for d in self.demos]
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.F, self.S = opts["frame_stack"], opts["seq_length"]
        self.counts = sequence_counts(lengths, self.F, self.S, opts["pad_frame_stack"], opts["pad_seq_length"])
        self.offset = 0 if opts["pad_frame_stack"] else self.F - 1
        self.cache = EpisodeCache(self._load, capacity=max(cache_episodes, 2 * shuffle_buffer))
        self._pool = BufferPool()
        prefixes = ["obs"] + (["next_obs"] if opts["load_next_obs"] or opts["goal_mode"] == "last" else [])
        self._wanted = [f"{p}/{k}" for p in prefixes for k in self.obs_keys] + list(self.dataset_keys)
        self._small: dict[int, tuple] = {}  # per demo: (its non-frame fields, its frame field names); see _load
        self._loader = None
        self._loader_key = None
        self.build_summary = (f"{self.n_demos} demos, {len(self)} windows from {len(reader.shards)} shard(s) in "
                              f"{reader.dir}, shuffle buffer {shuffle_buffer} episodes"
                              + (", windows drawn with replacement" if self.replacement else ""))

    def __len__(self):
        return int(sum(self.counts))

    def __repr__(self):
        return f"ShardSequenceBatches({self.build_summary})"

    def _load(self, ep: int) -> dict:
        """The demo's fields the windows use, as SequenceDataset serves them.

        Why only some fields: an episode is decoded again every pass (it leaves the LRU cache), and reading every
        member (next_obs frames, states, ...) and parsing every ``.npy`` header each time was ~30% of the
        backend's CPU time, all of it under the GIL. So only the members the windows use are read, frames are
        decoded once per load (each frame then serves up to frame_stack + seq_length - 1 windows), and the small
        non-frame fields are kept for the dataset's lifetime (a few bytes per step) so later passes read frames
        only."""
        demo = self.demos[ep]
        small, frames = self._small.get(ep, (None, self._wanted))
        _, fields = self.reader.read_episode(self.reader.by_name[demo], decode_frames=False, fields=frames)
        if small is not None:
            fields = dict(small, **fields)

        def read(key):
            value = fields.get(key)
            return value.decode_all() if isinstance(value, EncodedFrames) else value

        out = episode_fields(read, int(self.lengths[ep]), self.opts, f"{self.reader.dir}: {demo}")
        if small is None:
            frames = [k for k, v in fields.items() if isinstance(v, EncodedFrames)]
            self._small[ep] = ({k: v for k, v in out.items() if k not in frames}, frames)
        return out

    def window_index(self, ep: int, window: int) -> int:
        """The SequenceDataset index of window ``window`` of demo ``ep`` (for tests and tools)."""
        return int(np.sum(self.counts[:ep])) + window

    def batch_episodes(self, batch_size: int, drop_last: bool = True, epoch: int = 0) -> list[np.ndarray]:
        """Demo index of every window, batch by batch, of shuffled pass ``epoch``: the plan is a pure function of
        (seed, epoch), so tools can measure how batches mix episodes without reading data."""
        plan = plan_windows(self.counts, self.seed, epoch, self.shuffle_buffer, True, self.replacement)
        n = len(plan) // batch_size if drop_last else -(-len(plan) // batch_size)
        return [plan[b * batch_size:(b + 1) * batch_size, 0] for b in range(n)]

    def assemble(self, windows: np.ndarray) -> dict:
        """Collated torch batch for (demo, window) pairs, as robomimic's DataLoader would collate them.

        Why per-row copies for frames: a window without padding is one contiguous slice of the decoded episode, so
        each row is a single memcpy straight into the batch array, where a fancy index would gather into a
        temporary and copy again; the batch arrays are recycled (BufferPool) once the training loop drops them,
        saving the page faults of a fresh 27 MB allocation per batch."""
        eps, w = windows[:, 0], windows[:, 1]
        B = len(eps)
        L = self.lengths[eps]
        _, pos = window_positions(w + self.offset, L, self.F, self.S)
        uniq, inverse = np.unique(eps, return_inverse=True)
        loaded = [self.cache.get(int(e)) for e in uniq]
        groups = [np.flatnonzero(inverse == i) for i in range(len(uniq))]
        row_fields = [loaded[i] for i in inverse.tolist()]
        contiguous = (pos[:, -1] - pos[:, 0] == pos.shape[1] - 1).tolist()  # clamped windows are monotone
        starts = pos[:, 0].tolist()

        def gather(name, positions, starts, contiguous):
            first = loaded[0][name]
            T = positions.shape[1]
            out = self._pool.empty((B, T) + first.shape[1:], first.dtype)
            if first[0].nbytes >= ROW_COPY_BYTES:
                for r in range(B):
                    src = row_fields[r][name]
                    out[r] = src[starts[r]:starts[r] + T] if contiguous[r] else src[positions[r]]
            else:
                for i, rows in enumerate(groups):
                    out[rows] = loaded[i][name][positions[rows]]
            return torch.from_numpy(out)

        batch = {k: gather(k, pos, starts, contiguous) for k in self.dataset_keys}
        prefixes = ["obs"] + (["next_obs"] if self.opts["load_next_obs"] else [])
        for prefix in prefixes:
            batch[prefix] = {k: gather(f"{prefix}/{k}", pos, starts, contiguous) for k in self.obs_keys}
        if self.opts["goal_mode"] == "last":
            g = goal_positions(L, self.S, self.opts["pad_seq_length"])
            one = [True] * B
            batch["goal_obs"] = {k: gather(f"next_obs/{k}", g, g[:, 0].tolist(), one)[:, 0] for k in self.obs_keys}
        return batch

    def loader(self, batch_size: int, shuffle: bool, drop_last: bool, num_workers: int):
        """One torchdata Loader per batch configuration, kept across epochs (its state spans them)."""
        key = (batch_size, shuffle, drop_last, num_workers)
        if self._loader_key != key:
            self.plan = BatchPlanNode(self.counts, batch_size, drop_last, self.seed, self.shuffle_buffer, shuffle,
                                      self.replacement)
            self._loader = build_loader(self.plan, self.assemble, num_workers, self.prefetch)
            self._loader_key = key
        return self._loader

    def batches(self, batch_size, shuffle, drop_last, num_workers):
        loader = self.loader(batch_size, shuffle, drop_last, num_workers)
        n = self.plan.num_batches()

        class Epoch:  # what robomimic's run_epoch iterates: one pass per iter(), len() batches
            def __len__(self):
                return n

            def __iter__(self):
                return iter(loader)

        return Epoch()

    def state_dict(self) -> dict:
        return self._loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._loader.load_state_dict(state)


def datapipe_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, shards=None, cache_dir=None,
                     shuffle_buffer=None, seed=None, prefetch=2, convert_workers=1, cache_episodes=64,
                     replacement=False):
    opts = sequence_options(config, obs_keys, filter_by_attribute, dataset_path)
    shuffle_buffer = DEFAULT_SHUFFLE_BUFFER if shuffle_buffer is None else shuffle_buffer
    if shuffle_buffer < 1 or prefetch < 0 or convert_workers < 1 or cache_episodes < 1:
        raise BackendOptionError(f"{OPTION_PREFIX}: shuffle_buffer, convert_workers, cache_episodes must be >= 1 "
                                 "and prefetch >= 0")
    path = opts["hdf5_path"]
    if shards is None:
        if cache_dir is None:
            raise BackendOptionError(f"{OPTION_PREFIX}: the datapipe backend needs 'shards' (a directory made by "
                                     "'robo-loaders convert robomimic') or 'cache_dir' (converted there on first use)")
        from robo_loaders_plugin.robomimic.convert import convert_robomimic

        st = os.stat(path)
        fp = fingerprint({"file": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        shards = os.path.join(os.path.expanduser(cache_dir), f"robomimic-shards-{fp}")
        if not os.path.exists(os.path.join(shards, "index.json")):
            convert_robomimic(path, shards, num_workers=convert_workers)
    reader = ShardReader(os.path.expanduser(shards))
    meta = reader.dataset.get("metadata", {})
    if meta.get("framework") != "robomimic":
        raise RoboLoadersError(f"{shards}: converted from a {meta.get('framework')!r} dataset, not robomimic")
    if filter_by_attribute is None:
        demos = list(meta["demos"])
    elif filter_by_attribute in meta.get("masks", {}):
        demos = sorted(meta["masks"][filter_by_attribute], key=lambda n: int(n[5:]))
    else:
        raise RoboLoadersError(f"{shards}: filter key {filter_by_attribute!r} not found (masks in the converted "
                               f"dataset: {sorted(meta.get('masks', {}))})")
    missing = [d for d in demos if d not in reader.by_name]
    if missing:
        raise RoboLoadersError(f"{shards}: demos {missing[:5]} are not in the shards; convert the file again")
    if seed is None:
        seed = int(config.train.seed)
    return ShardSequenceBatches(reader, opts, demos, seed=seed, shuffle_buffer=shuffle_buffer, prefetch=prefetch,
                                cache_episodes=cache_episodes, replacement=replacement)

