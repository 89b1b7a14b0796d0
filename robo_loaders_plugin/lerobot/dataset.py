"""``LeRobotDataset`` items served from a frame source (every LeRobot backend but ``native``).

The item rules are ``windows.lerobot``; this class is what ``lerobot-train`` and user code see: the attributes
LeRobot's training script and policies read (``meta``, ``episodes``, ``num_frames``, ``fps``, ...), ``ds[i]``
equal to ``LeRobotDataset[i]``, and ``collate`` for the ``indexed``/``batch`` kinds (``core.iteration``).

The object is picklable (LeRobot 0.6.1 starts DataLoader workers with ``spawn``): it pickles as its frame source
(a store path, or shard locations), small arrays and the native dataset it mirrors (whose HF table pickles by
file).
"""
from __future__ import annotations

import numpy as np
import torch

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.iteration import IndexedDataset
from robo_loaders_plugin.frames.base import FrameSource
from robo_loaders_plugin.lerobot.compat import reader_settings
from robo_loaders_plugin.storage.buffers import BufferPool
from robo_loaders_plugin.windows import lerobot as rules


class LeRobotSamples(IndexedDataset):
    """Rows of ``native`` (in its row order) from ``frames``, whose units are the episode runs in that order.

    Who drives its passes is the backend choice's kind (``core.spec``): LeRobot's DataLoader for a ``sample``
    backend (its spawned workers call ``__getitems__``; image transforms draw from their RNG), the training
    process's threads for an ``indexed`` one (``collate``), the pipeline for a ``batch`` one.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built (episode selection, delta timestamps, transforms).
        frames: Where every episode run's fields are read from.
        runs: ``(episode, start row, end row)`` of each run, in ``native``'s row order.
        columns: The tabular columns served, in LeRobot's order.
        video_keys: Camera keys stored as video.
        image_keys: Camera keys stored as images.
        backend_name: Shown in ``repr``.
        location: Where the frames live (a cache file, a shards directory, tensors on a device, a video URL).
        delta_steps: Each delta key's offsets in recorded steps, when they are not LeRobot's own
            ``delta_indices`` (rate conversion; fractional offsets are read by ``modes``).
        modes: How each delta key is read between recorded steps.
        **kwargs: ``serving`` (``core.iteration.Serving``) and, for subclasses, their bases' arguments.
    """

    def __init__(self, native, frames: FrameSource, runs: list[tuple[int, int, int]], columns: list[str],
                 video_keys: list[str], image_keys: list[str], backend_name: str, location: str = "",
                 delta_steps: dict | None = None, modes: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.location = location
        settings = reader_settings(native)
        self._native = native  # the LeRobotDataset this one mirrors: meta, episode selection, HF table
        self.meta = native.meta
        self.repo_id = native.repo_id
        self.root = native.root
        self.episodes = native.episodes
        self.tolerance_s = settings.tolerance_s
        self.frames = frames
        self.backend_name = backend_name
        self.rowmap = rules.RowMap([e - s for _, s, e in runs])
        self._runs = runs
        abs_index = np.concatenate([np.arange(int(self.meta.episodes[ep]["dataset_from_index"]),
                                              int(self.meta.episodes[ep]["dataset_from_index"]) + e - s)
                                    for ep, s, e in runs])
        bounds = {ep: (int(self.meta.episodes[ep]["dataset_from_index"]), int(self.meta.episodes[ep]["dataset_to_index"]))
                  for ep, _, _ in runs}
        ep_of_row = np.repeat([ep for ep, _, _ in runs], [e - s for _, s, e in runs])
        self.windows = rules.DeltaWindows(abs_index, np.array([bounds[e][0] for e in ep_of_row.tolist()]),
                                          np.array([bounds[e][1] for e in ep_of_row.tolist()]),
                                          settings.delta_indices if delta_steps is None else delta_steps)
        self.layout = rules.ItemLayout(
            columns=list(columns), video_keys=list(video_keys), image_keys=list(image_keys),
            camera_keys=[k for k in self.meta.camera_keys if k not in self.meta.depth_keys],
            tasks=[str(t) for t in self.meta.tasks.index], return_uint8=settings.return_uint8,
            image_transforms=settings.image_transforms, modes=modes)
        self.image_transforms = settings.image_transforms
        self.delta_indices = settings.delta_indices
        self.return_uint8 = settings.return_uint8
        # batch arrays reused once nothing references them (fresh ones page-fault): cameras of one shape share a
        # key, and about 8 batches are in flight (assembling, prefetched, in the training step)
        self._pool = BufferPool(max_per_shape=8 * max(1, len(self.layout.camera_keys)))

    # -- what lerobot-train and EpisodeAwareSampler use ----------------------------------------------------------
    def __len__(self):
        return len(self.rowmap)

    @property
    def num_frames(self) -> int:
        return len(self.rowmap)

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
        return list(self.layout.video_keys)

    def __repr__(self):
        return (f"{type(self).__name__}(backend={self.backend_name}, repo_id={self.repo_id!r}, "
                f"episodes={self.num_episodes}, frames={self.num_frames}, data={self.location})")

    # -- items --------------------------------------------------------------------------------------------------
    def _check(self, indices) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        bad = idx[(idx < -n) | (idx >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad[0])} out of range for {n} frames")
        return idx % n  # negative indices count from the end, as on LeRobotDataset

    def __getitem__(self, idx):
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices):
        """A batch of items (torch's DataLoader passes whole batches here): one gather per key, then split."""
        return rules.items(self.layout, self.frames, self.rowmap, self.windows, self._check(indices))

    def collate(self, indices) -> dict:
        """The batch torch's DataLoader would hand ``lerobot-train`` for these indices."""
        return rules.collate(self.layout, self.frames, self.rowmap, self.windows, self._check(indices), self._pool)

    def episode_of(self, indices=None) -> np.ndarray:
        """Frame-source unit (episode run) of rows ``indices`` (default: all)."""
        return self.rowmap.run_of_row if indices is None else self.rowmap.run_of_row[np.asarray(indices)]


def check_supported(native) -> None:
    """What the backends that read episodes ahead of time can reproduce."""
    settings = reader_settings(native)
    meta = native.meta
    if meta.video_keys and settings.video_backend != "torchcodec":
        raise SourceError(f"robo-loaders decodes video with torchcodec, as LeRobot does by default; this dataset "
                          f"uses video_backend={settings.video_backend!r}, whose frames can differ. Use "
                          "--dataset.video_backend=torchcodec or --dataset.backend=native")
    if meta.depth_keys:
        raise SourceError(f"depth features {meta.depth_keys} are not supported by robo-loaders yet; use "
                          "--dataset.backend=native")
    if meta.has_language_columns:
        raise SourceError("datasets with language columns are not supported by robo-loaders yet; use "
                          "--dataset.backend=native")


def check_rows_match(native, columns: list[str], index_column: np.ndarray, first_row: dict) -> None:
    """The rows a backend serves are the native dataset's rows, in its order, with LeRobot's first-row values
    (dtype, shape and value of every tabular column): a guard against any drift from LeRobot's own reader."""
    native_columns = list(native.hf_dataset.features)
    if native_columns != list(columns):
        raise SourceError(f"{native.root}: columns {list(columns)} differ from LeRobot's {native_columns}")
    native_index = np.asarray(native.hf_dataset.data.column("index").to_numpy(zero_copy_only=False))
    if not np.array_equal(native_index, index_column):
        raise SourceError(f"{native.root}: the rows robo-loaders reads are not LeRobotDataset's rows (index column "
                          "differs); please report this dataset layout")
    ref = native.hf_dataset[0]
    for name, value in first_row.items():
        if not isinstance(ref[name], torch.Tensor):
            continue
        mine = torch.from_numpy(np.array(value))
        if mine.dtype != ref[name].dtype or mine.shape != ref[name].shape or not torch.equal(mine, ref[name]):
            raise SourceError(f"{native.root}: column {name!r}: could not reproduce LeRobot's value for row 0 "
                              f"({mine} != {ref[name]}); please report this dataset layout")
