"""``LeRobotDataset`` samples served from an episode store (compressed_cache for LeRobot).

Reproduces LeRobot 0.6.1 ``DatasetReader.get_item``: the HF row as tensors, ``delta_timestamps`` windows clamped
to the episode with ``<key>_is_pad`` masks, video frames for the (clamped) query rows, ``return_uint8``, image
transforms on every non-depth camera key, and the ``task`` string, with the keys in LeRobot's order. Frames come
from the store (decoded once at build time) instead of a video decoder per sample.

The object is self-contained and picklable (LeRobot 0.6.1 starts DataLoader workers with ``spawn``): it pickles
as the store path, small arrays and the native dataset it was built from (whose HF table pickles by file).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.utils.data

from robo_loaders_plugin.backends.compressed_cache.store import EpisodeStore


class LeRobotSamples(torch.utils.data.Dataset):
    """The item assembly shared by the backends; a subclass says where rows' column values and frames live
    (:meth:`_column`, :meth:`_frames`), given the ``index`` and ``episode_index`` of every row."""

    def __init__(self, native, *, columns: list[str], video_keys: list[str], image_keys: list[str],
                 abs_index: np.ndarray, episode_index: np.ndarray, backend_name: str):
        super().__init__()
        self._native = native  # the LeRobotDataset this one mirrors: meta, episode selection, HF table
        self.meta = native.meta
        self.repo_id = native.repo_id
        self.root = native.root
        self.episodes = native.episodes
        self.image_transforms = native.reader._image_transforms
        self.delta_indices = native.reader.delta_indices
        self.tolerance_s = native.reader._tolerance_s
        self.return_uint8 = bool(native.reader._return_uint8)
        self.backend_name = backend_name
        self._columns = list(columns)
        self._video_keys = list(video_keys)
        self._image_keys = list(image_keys)
        self._camera_keys = [k for k in self.meta.camera_keys if k not in self.meta.depth_keys]
        self._tasks = [str(t) for t in self.meta.tasks.index]
        self._num_rows = len(abs_index)
        self._abs_index = abs_index
        self._episode_index = episode_index
        ep_start, ep_end = {}, {}
        for ep in sorted(set(episode_index.tolist())):
            e = self.meta.episodes[ep]
            ep_start[ep], ep_end[ep] = int(e["dataset_from_index"]), int(e["dataset_to_index"])
        self._ep_bounds = (np.array([ep_start[e] for e in episode_index.tolist()], dtype=np.int64),
                           np.array([ep_end[e] for e in episode_index.tolist()], dtype=np.int64))

    def _column(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Values of tabular column ``key`` at relative rows ``rows`` (any shape)."""
        raise NotImplementedError

    def _frames(self, key: str, rows: np.ndarray) -> np.ndarray:
        """uint8 frames of relative rows ``rows`` (any shape) as an array of shape ``rows.shape + frame``."""
        raise NotImplementedError

    # -- what lerobot-train and EpisodeAwareSampler use ----------------------------------------------------------
    def __len__(self):
        return self._num_rows

    @property
    def num_frames(self) -> int:
        return self._num_rows

    @property
    def num_episodes(self) -> int:
        return len(self.episodes) if self.episodes is not None else self.meta.total_episodes

    @property
    def fps(self):
        return self.meta.fps

    @property
    def features(self):
        return self.meta.features

    @property
    def absolute_to_relative_idx(self):
        return self._native.absolute_to_relative_idx

    @property
    def hf_dataset(self):
        return self._native.hf_dataset

    @property
    def video_frame_keys(self):
        return list(self._video_keys)

    def __repr__(self):
        return (f"{type(self).__name__}(backend={self.backend_name}, repo_id={self.repo_id!r}, "
                f"episodes={self.num_episodes}, frames={self.num_frames})")

    # -- samples -----------------------------------------------------------------------------------------------
    def _values(self, key: str, rows: np.ndarray) -> torch.Tensor:
        if key in self._image_keys:  # what torchvision's ToTensor does to the uint8 PNG LeRobot decodes
            return torch.from_numpy(self._frames(key, rows)).to(dtype=torch.float32).div(255)
        return torch.from_numpy(np.ascontiguousarray(self._column(key, rows)))

    def __getitem__(self, idx):
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices):
        """A batch of items (torch's DataLoader passes whole batches here): columns gathered with one index per
        key, frames decompressed into one array per camera, then split into LeRobot-shaped items."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        bad = idx[(idx < -self._num_rows) | (idx >= self._num_rows)]
        if bad.size:
            raise IndexError(f"index {int(bad[0])} out of range for {self._num_rows} frames")
        idx = idx % self._num_rows  # negative indices count from the end, as on LeRobotDataset
        row = {name: self._values(name, idx) for name in self._columns}
        padding, query, query_rows = {}, {}, {}
        if self.delta_indices is not None:
            abs_idx = self._abs_index[idx][:, None]
            start, end = self._ep_bounds[0][idx][:, None], self._ep_bounds[1][idx][:, None]
            for key, deltas in self.delta_indices.items():
                target = abs_idx + np.asarray(deltas, dtype=np.int64)[None, :]
                padding[f"{key}_is_pad"] = torch.from_numpy((target < start) | (target >= end))
                query_rows[key] = idx[:, None] + (np.clip(target, start, end - 1) - abs_idx)  # rows are contiguous
                if key not in self._video_keys:
                    query[key] = self._values(key, query_rows[key])
        frames = {}
        for key in self._video_keys:
            t = torch.from_numpy(self._frames(key, query_rows.get(key, idx[:, None])))
            frames[key] = t if self.return_uint8 else t.type(torch.float32) / 255
        items = []
        for b in range(len(idx)):
            item = {k: v[b] for k, v in row.items()}
            if self.delta_indices is not None:
                item = {**item, **{k: v[b] for k, v in padding.items()}}
                for key, val in query.items():
                    item[key] = val[b]
            if frames:
                item = {**{k: v[b].squeeze(0) for k, v in frames.items()}, **item}
            if self.image_transforms is not None:
                for cam in self._camera_keys:
                    item[cam] = self.image_transforms(item[cam])
            item["task"] = self._tasks[int(item["task_index"])]
            items.append(item)
        return items

    def collated(self, indices) -> dict:
        """The batch torch's DataLoader would hand ``lerobot-train`` for these indices."""
        return torch.utils.data.default_collate(self.__getitems__(indices))


class StoreLeRobotDataset(LeRobotSamples):
    """Rows served from a compressed_cache episode store: unit 0 holds every tabular column, units 1.. hold
    each episode's frames."""

    def __init__(self, native, store: EpisodeStore, *, columns: list[str], video_keys: list[str],
                 image_keys: list[str], store_owner=None, backend_name: str = "compressed_cache"):
        super().__init__(native, columns=columns, video_keys=video_keys, image_keys=image_keys,
                         abs_index=store.raw(0, "index"), episode_index=store.raw(0, "episode_index"),
                         backend_name=backend_name)
        self.store = store
        self._store_owner = store_owner
        self._bounds = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_bounds"] = {}
        return state

    def __repr__(self):
        return super().__repr__()[:-1] + f", store={self.store.path})"

    def _column(self, key, rows):
        return self.store.raw(0, key)[rows]

    def _frames(self, key, rows):
        bounds = self._bounds.get(key)
        if bounds is None:
            bounds = self._bounds[key] = self.store.blob_bounds(key, range(1, len(self.store.episodes)))
        dtype, shape, _ = self.store.frame_info(1, key)
        flat_rows = rows.reshape(-1)
        out = np.empty((flat_rows.size,) + shape, dtype=dtype)
        self.store.decode_frames(bounds[0][flat_rows].tolist(), bounds[1][flat_rows].tolist(), out,
                                 range(flat_rows.size))
        return out.reshape(rows.shape + shape)
