"""robomimic's SequenceDataset sample semantics over an episode store.

Reproduces robomimic 0.3.0 ``SequenceDataset.get_item`` exactly (index map, frame-stack and sequence padding by
repeating the first/last frame, ``goal_mode="last"``, ``get_pad_mask``, per-cache-mode dtypes) while reading
from a :class:`~robo_loaders_plugin.backends.compressed_cache.EpisodeStore`. Samples are built a batch at a
time (torch's DataLoader calls ``__getitems__``): one (B, T, ...) array per key, frames decompressed straight
into it, low-dim windows gathered with one fancy index; padding is index clamping.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.utils.data

from robo_loaders_plugin.backends.compressed_cache.store import EpisodeStore
from robo_loaders_plugin.buffers import BufferPool
from robo_loaders_plugin.spec import RoboLoadersError


class SequenceSetupError(RoboLoadersError, ValueError):
    """The demos cannot give SequenceDataset's samples with these options (robomimic would assert)."""


def sequence_counts(lengths, frame_stack: int, seq_length: int, pad_frame_stack: bool, pad_seq_length: bool):
    """Number of samples per demo, exactly as ``SequenceDataset.load_demo_info`` counts them."""
    counts = []
    for L in lengths:
        n = int(L)
        if not pad_frame_stack:
            n -= frame_stack - 1
        if not pad_seq_length:
            n -= seq_length - 1
        if pad_seq_length:
            if L < 1:
                raise SequenceSetupError("a demo has num_samples < 1")
            n = max(n, 1)
        elif n < 1:
            raise SequenceSetupError(f"a demo of length {L} is too short for frame_stack={frame_stack}, "
                             f"seq_length={seq_length} without padding (enable pad_seq_length/pad_frame_stack)")
        if not pad_frame_stack and L < frame_stack:
            raise SequenceSetupError(f"a demo of length {L} is shorter than frame_stack={frame_stack} with "
                             "pad_frame_stack=false; robomimic's SequenceDataset fails on it too (assert "
                             "index_in_demo < demo_length): enable pad_frame_stack or drop short demos")
        counts.append(n)
    return counts


def window_positions(index_in_demo: np.ndarray, lengths: np.ndarray, frame_stack: int, seq_length: int):
    """(raw, clamped) frame positions (B, T) of SequenceDataset windows. SequenceDataset pads by repeating the
    first/last frame of the window, which is the same as clamping positions into the demo."""
    raw = np.asarray(index_in_demo)[:, None] + np.arange(-(frame_stack - 1), seq_length, dtype=np.int64)[None, :]
    return raw, np.clip(raw, 0, np.asarray(lengths)[:, None] - 1)


def goal_positions(lengths: np.ndarray, seq_length: int, pad_seq_length: bool) -> np.ndarray:
    """(B, 1) position of ``goal_mode="last"``'s goal: the last next_obs SequenceDataset can index."""
    return (np.asarray(lengths) - (0 if pad_seq_length else seq_length - 1) - 1)[:, None]


class StoreSequenceDataset(torch.utils.data.Dataset):
    """Map-style dataset with SequenceDataset's samples, read from an :class:`EpisodeStore`.

    The store file holds, per demo, fields named ``obs/<k>``, ``next_obs/<k>`` and the dataset keys, already in
    the dtypes SequenceDataset would return for the chosen ``hdf5_cache_mode``.
    """

    def __init__(self, store: EpisodeStore, *, hdf5_path, obs_keys, dataset_keys, demos, frame_stack=1,
                 seq_length=1, pad_frame_stack=True, pad_seq_length=True, get_pad_mask=False, goal_mode=None,
                 load_next_obs=True, filter_by_attribute=None, hdf5_cache_mode=None, backend_name="compressed_cache",
                 store_owner=None):
        super().__init__()
        self.store = store
        self._store_owner = store_owner  # keeps a RAM-only store file alive as long as this dataset lives
        self.hdf5_path = hdf5_path
        self.obs_keys = tuple(obs_keys)
        self.dataset_keys = tuple(dataset_keys)
        self.demos = list(demos)
        self.n_demos = len(self.demos)
        self.n_frame_stack = int(frame_stack)
        self.seq_length = int(seq_length)
        self.pad_frame_stack = bool(pad_frame_stack)
        self.pad_seq_length = bool(pad_seq_length)
        self.get_pad_mask = bool(get_pad_mask)
        self.goal_mode = goal_mode
        self.load_next_obs = bool(load_next_obs)
        self.filter_by_attribute = filter_by_attribute
        self.hdf5_cache_mode = hdf5_cache_mode
        self.hdf5_normalize_obs = False
        self.backend_name = backend_name
        self.in_process_batches = False  # set by the factory (option ``loader``); read by the run_epoch patch
        names = [e["name"] for e in store.episodes]
        if names != self.demos:
            raise ValueError(f"store {store.path} holds demos {names[:3]}..., expected {self.demos[:3]}...")
        self._lengths = np.array([e["length"] for e in store.episodes], dtype=np.int64)
        counts = sequence_counts(self._lengths, self.n_frame_stack, self.seq_length, self.pad_frame_stack,
                                 self.pad_seq_length)
        self._demo_of_index = np.repeat(np.arange(self.n_demos, dtype=np.int64), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        offset = 0 if self.pad_frame_stack else self.n_frame_stack - 1
        self._index_in_demo = np.arange(len(self._demo_of_index), dtype=np.int64) - starts[self._demo_of_index] + offset
        self.total_num_sequences = len(self._demo_of_index)
        self._ep_start = np.concatenate([[0], np.cumsum(self._lengths)[:-1]]).astype(np.int64)
        self._flat = {}
        self._bounds = {}
        self._pool = BufferPool()
        # per key: (store field name, dtype, frame shape, compressed?) — identical for every demo
        self._fields = {}
        for name in self._field_names():
            self._fields[name] = store.frame_info(0, name) if self.n_demos else None
            for ep in range(1, self.n_demos):  # one dtype and frame shape per key, or samples would differ
                if store.frame_info(ep, name)[:2] != self._fields[name][:2]:
                    raise SequenceSetupError(f"{hdf5_path}: data/{self.demos[ep]}/{name} is {store.frame_info(ep, name)[:2]} "
                                     f"but data/{self.demos[0]}/{name} is {self._fields[name][:2]} (dtype, "
                                     "shape); every demo must store a key the same way")

    def _field_names(self):
        names = list(self.dataset_keys) + [f"obs/{k}" for k in self.obs_keys]
        if self.load_next_obs or self.goal_mode == "last":
            names += [f"next_obs/{k}" for k in self.obs_keys]
        return names

    def __len__(self):
        return self.total_num_sequences

    def __getstate__(self):  # per-process lookup tables are rebuilt lazily, not shipped to workers
        state = dict(self.__dict__)
        state["_flat"], state["_bounds"] = {}, {}
        return state

    def __repr__(self):
        return (f"{type(self).__name__} (backend={self.backend_name}\n\tpath={self.hdf5_path}\n\t"
                f"obs_keys={self.obs_keys}\n\tseq_length={self.seq_length}\n\t"
                f"filter_key={self.filter_by_attribute or 'none'}\n\tframe_stack={self.n_frame_stack}\n\t"
                f"pad_seq_length={self.pad_seq_length}\n\tpad_frame_stack={self.pad_frame_stack}\n\t"
                f"goal_mode={self.goal_mode or 'none'}\n\tcache_mode={self.hdf5_cache_mode or 'none'}\n\t"
                f"num_demos={self.n_demos}\n\tnum_sequences={self.total_num_sequences}\n\t"
                f"store={self.store.path} ({self.store.file_nbytes} bytes)\n)")

    def get_dataset_sampler(self):
        return None

    def get_obs_normalization_stats(self):
        raise RuntimeError("hdf5_normalize_obs is not supported by robo-loaders backends (it is broken in "
                           "robomimic 0.3.0); set train.hdf5_normalize_obs=false or use data_backend=null")

    # -- sample assembly -------------------------------------------------------------------------------------
    def _flat_raw(self, name: str) -> np.ndarray:
        """All demos of a raw (low-dim) field concatenated, built once per process: one fancy-index gathers
        a whole batch of windows."""
        flat = self._flat.get(name)
        if flat is None:
            flat = np.concatenate([self.store.raw(ep, name) for ep in range(self.n_demos)])
            self._flat[name] = flat
        return flat

    def _frames(self, name: str, ep: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Frames ``pos[b, t]`` of demos ``ep[b]``, decompressed straight into one (B, T, ...) array; a repeated
        (padding) frame is copied from its neighbour instead of decoded again."""
        dtype, shape, _ = self._fields[name]
        bounds = self._bounds.get(name)
        if bounds is None:
            bounds = self._bounds[name] = self.store.blob_bounds(name)
        B, T = pos.shape
        out = self._pool.empty((B, T) + shape, dtype)
        flat = out.reshape((B * T,) + shape)
        g = (self._ep_start[ep][:, None] + pos).reshape(-1)
        fresh = np.ones(B * T, dtype=bool)
        fresh[1:] = g[1:] != g[:-1]
        fresh[::T] = True  # every window decodes its first frame
        todo = np.flatnonzero(fresh)
        self.store.decode_frames(bounds[0][g[todo]].tolist(), bounds[1][g[todo]].tolist(), flat, todo.tolist())
        if len(todo) < B * T:  # padding: repeat the previous frame of the window
            src = np.maximum.accumulate(np.where(fresh, np.arange(B * T), 0))
            rep = np.flatnonzero(~fresh)
            flat[rep] = flat[src[rep]]
        return out

    def _field(self, name: str, ep: np.ndarray, pos: np.ndarray) -> np.ndarray:
        if self._fields[name][2]:
            return self._frames(name, ep, pos)
        return self._flat_raw(name)[self._ep_start[ep][:, None] + pos]

    def gather(self, indices) -> dict:
        """Collated numpy arrays (leading batch dim) for dataset indices: the same nested dict robomimic's
        ``default_collate`` would build from SequenceDataset samples, before conversion to tensors."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = self.total_num_sequences
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"index out of range for {n} samples: {idx[(idx < -n) | (idx >= n)][:5].tolist()}")
        idx = idx % n if n else idx
        ep = self._demo_of_index[idx]
        L = self._lengths[ep]
        raw_pos, pos = window_positions(self._index_in_demo[idx], L, self.n_frame_stack, self.seq_length)
        pad_mask = ((raw_pos >= 0) & (raw_pos < L[:, None]))[..., None] if self.get_pad_mask else None

        batch = {k: self._field(k, ep, pos) for k in self.dataset_keys}
        if pad_mask is not None:
            batch["pad_mask"] = pad_mask
        prefixes = ["obs"] + (["next_obs"] if self.load_next_obs else [])
        for prefix in prefixes:
            batch[prefix] = {k: self._field(f"{prefix}/{k}", ep, pos) for k in self.obs_keys}
            if pad_mask is not None:
                batch[prefix]["pad_mask"] = pad_mask
        if self.goal_mode == "last":
            g = goal_positions(L, self.seq_length, self.pad_seq_length)
            batch["goal_obs"] = {k: self._field(f"next_obs/{k}", ep, g)[:, 0] for k in self.obs_keys}
            if pad_mask is not None:
                batch["goal_obs"]["pad_mask"] = np.ones((len(idx), 1), dtype=bool)
        return batch

    def __getitem__(self, index):
        return _row(self.gather([int(index)]), 0)

    def __getitems__(self, indices):
        """Called by torch's DataLoader with a whole batch of indices: one gather, then per-sample views."""
        batch = self.gather(indices)
        return [_row(batch, b) for b in range(len(indices))]

    def collated(self, indices):
        """A batch as torch tensors without a collate copy (the arrays are wrapped, not copied)."""
        return _to_torch(self.gather(indices))


def _row(batch: dict, b: int) -> dict:
    return {k: _row(v, b) if isinstance(v, dict) else v[b] for k, v in batch.items()}


def _to_torch(batch: dict) -> dict:
    return {k: _to_torch(v) if isinstance(v, dict) else torch.from_numpy(v) for k, v in batch.items()}
