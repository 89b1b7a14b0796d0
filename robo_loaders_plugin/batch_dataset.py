"""Base class of batch-level backends.

A batch-level backend (DataPipe, GPU resampler, NVDEC streaming) produces whole collated batches, possibly
already on a GPU, so it must not sit behind a per-sample ``DataLoader``. Frameworks still expect a dataset
object (robomimic calls ``len()``, ``print()`` and builds a DataLoader over it), so the backend *is* a
map-style dataset for those calls; the framework adapter notices it and pulls batches from :meth:`batches`.
"""
from __future__ import annotations

from typing import Protocol

import torch.utils.data


class SizedBatchIterable(Protocol):
    def __iter__(self): ...

    def __len__(self) -> int: ...


class BatchDataset(torch.utils.data.Dataset):
    backend_name = "batch"

    def __getitem__(self, index):
        raise TypeError(f"backend {self.backend_name!r} yields whole batches, not single samples; it must be "
                        "driven by a robo-loaders framework adapter (is the plugin's robomimic/LeRobot patch "
                        "disabled? ROBO_LOADERS_DISABLE is set or the import hook did not run)")

    def __len__(self) -> int:
        raise NotImplementedError

    def batches(self, batch_size: int, shuffle: bool, drop_last: bool, num_workers: int) -> SizedBatchIterable:
        """One epoch's batches; ``len()`` is the number of batches."""
        raise NotImplementedError

    def get_dataset_sampler(self):
        return None


def is_batch_dataset(obj) -> bool:
    return isinstance(obj, BatchDataset)


__all__ = ["BatchDataset", "is_batch_dataset"]
