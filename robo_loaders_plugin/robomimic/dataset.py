"""robomimic's SequenceDataset samples served from a frame source (every robomimic backend but ``native``).

The window rules are ``windows.robomimic``; this class is the map-style dataset robomimic's ``train()`` sees
(``len()``, ``print()``, ``get_dataset_sampler()``, a DataLoader over it) and the ``collate`` the ``indexed`` and
``batch`` kinds build whole batches with (``core.iteration``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robo_loaders_plugin.core.indices import item_index
from robo_loaders_plugin.core.iteration import IndexedDataset
from robo_loaders_plugin.frames.base import FrameSource
from robo_loaders_plugin.storage.buffers import BufferPool
from robo_loaders_plugin.windows import robomimic as rules


class RobomimicSamples(IndexedDataset):
    """SequenceDataset's samples from a frame source.

    Args:
        frames: Where every demo's fields are read from (one frame-source episode per demo, in ``demos`` order).
        windows: SequenceDataset's window rules over those demos.
        demos: The demo names, in robomimic's order.
        hdf5_path: The source file (robomimic prints it).
        filter_by_attribute: The filter key the demos were selected by (``None``: all demos).
        backend_name: Shown in ``repr`` (robomimic prints the dataset).
        location: Where the frames live, for ``repr`` (a cache file, shards, tensors on a device).
        modes: How each field is read between recorded steps (rate conversion; ``None``: recorded steps only).
        device: Where collated batches are put (``None``: where the frame source returns them).
        sample_units: The frame source's unit of every sample when its units are parts of demos
            (``frames.chunks.EpisodeUnits``); ``None``: the demos.
        **kwargs: ``serving`` (``core.iteration.Serving``) and, for subclasses, their bases' arguments.
    """

    def __init__(
        self,
        frames: FrameSource,
        windows: rules.SequenceWindows,
        *,
        demos,
        hdf5_path: str,
        filter_by_attribute=None,
        backend_name: str,
        location: str,
        modes: dict | None = None,
        device=None,
        sample_units: np.ndarray | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.frames, self.windows = frames, windows
        self.opts = windows.opts
        self.demos = list(demos)
        self.n_demos = len(self.demos)
        self.hdf5_path = hdf5_path
        self.filter_by_attribute = filter_by_attribute
        self.backend_name = backend_name
        self.location = location
        self.modes = modes
        self.device = device
        self.sample_units = sample_units
        # batch arrays reused once nothing references them (fresh ones page-fault): fields of one shape (obs and
        # next_obs of a camera, cameras of one size) share a key, and about 8 batches are in flight
        o = windows.opts
        fields = len(o.dataset_keys) + len(o.obs_keys) * (1 + bool(o.load_next_obs) + (o.goal_mode == "last"))
        self.buffer_pool = BufferPool(max_per_shape=8 * max(1, fields))

    # -- what robomimic's train() uses ----------------------------------------------------------------------------
    def __len__(self):
        return len(self.windows)

    @property
    def total_num_sequences(self) -> int:
        """The number of samples (SequenceDataset's attribute of that name)."""
        return len(self.windows)

    def __repr__(self):
        o = self.opts
        return (
            f"{type(self).__name__} (backend={self.backend_name}\n\tpath={self.hdf5_path}\n\t"
            f"obs_keys={o.obs_keys}\n\tseq_length={o.seq_length}\n\t"
            f"filter_key={self.filter_by_attribute or 'none'}\n\tframe_stack={o.frame_stack}\n\t"
            f"pad_seq_length={o.pad_seq_length}\n\tpad_frame_stack={o.pad_frame_stack}\n\t"
            f"goal_mode={o.goal_mode or 'none'}\n\tcache_mode={o.hdf5_cache_mode or 'none'}\n\t"
            f"num_demos={self.n_demos}\n\tnum_sequences={len(self)}\n\tdata={self.location}\n)"
        )

    def get_dataset_sampler(self):
        """robomimic asks its dataset for a sampler; these samples use the DataLoader's own: none."""
        return None

    @property
    def get_pad_mask(self) -> bool:
        """SequenceDataset's ``get_pad_mask`` (robomimic's dataset_factory passes False; settable, as there)."""
        return self.opts.get_pad_mask

    @get_pad_mask.setter
    def get_pad_mask(self, value: bool) -> None:
        """Set ``get_pad_mask``, as code written for SequenceDataset's plain attribute does.

        Args:
            value: Whether samples carry a ``pad_mask``.
        """
        self.opts = self.windows.opts = dataclasses.replace(self.opts, get_pad_mask=bool(value))

    def get_obs_normalization_stats(self):
        """Refused: observation normalisation is not supported by these backends.

        Raises:
            RuntimeError: always; ``hdf5_normalize_obs`` is broken in robomimic 0.3.0 (set it false, or use
                ``data_backend=null``).
        """
        raise RuntimeError(
            "hdf5_normalize_obs is not supported by robo-loaders backends (it is broken in "
            "robomimic 0.3.0); set train.hdf5_normalize_obs=false or use data_backend=null"
        )

    # -- samples ------------------------------------------------------------------------------------------------
    def gather(self, indices) -> dict:
        """Collated arrays for sample indices (the nested dict robomimic's default_collate builds).

        Args:
            indices: Sample indices, in batch order.

        Returns:
            The batch: numpy arrays, or tensors for a device-resident frame source.
        """
        return rules.collate(self.frames, self.windows, indices, self.buffer_pool, self.modes)

    def __getitem__(self, index):
        return rules.row(self.gather([item_index(index, type(self).__name__)]), 0)

    def __getitems__(self, indices):
        """Called by torch's DataLoader with a whole batch of indices: one gather, then per-sample views."""
        batch = self.gather(indices)
        return [rules.row(batch, b) for b in range(len(indices))]

    def collate(self, indices) -> dict:
        """A batch as torch tensors without a collate copy (the arrays are wrapped, not copied).

        Args:
            indices: Sample indices, in batch order.

        Returns:
            The batch robomimic's DataLoader would build from these samples, on ``device`` when one was given.
        """
        return rules.to_torch(self.gather(indices), self.device)

    def episode_of(self, indices=None) -> np.ndarray:
        """Frame-source unit of samples ``indices``: their demo, or the part of it their window starts in when
        long demos are served in parts; for the pipeline's episode-buffer shuffle and the batches' episode mix.

        Args:
            indices: Sample indices (default: all samples).

        Returns:
            One unit index (a position in ``demos`` when the units are the demos) per sample.
        """
        units = self.windows.episode_of if self.sample_units is None else self.sample_units
        return units if indices is None else units[np.asarray(indices)]
