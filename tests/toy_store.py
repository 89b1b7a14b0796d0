"""The smallest frame stores, for tests/test_sdk.py: what a plugin author writes (``robo_loaders_plugin.extend`` only).

``EveryFieldStore`` writes every field of every episode, uncompressed, as its own ``.npy`` file (a header per
array: the most a store writing each field once adds to its bytes) and serves them back through the SDK's record of
the store (``StoreRecord``: the episodes' lengths and each field's ``FieldInfo``), so it writes no index of its own.
``InRamStore`` is the same store allowed to live in RAM.
"""

from __future__ import annotations

import os

import numpy as np

from robo_loaders_plugin.extend import FrameSource, FrameStore, StoreRecord


def array_file(directory: str, episode: str, field: str) -> str:
    """Where a store of every field keeps one episode's field."""
    return os.path.join(directory, f"{episode}.{field.replace('/', '.')}.npy")


class EveryFieldStore(FrameStore):
    """Every field of every episode uncompressed, one ``.npy`` file each."""

    kind = "every-field-1"

    def build(self, directory, episodes, options):
        for name, arrays in episodes:
            for field, a in arrays.items():
                np.save(array_file(directory, name, field), np.ascontiguousarray(a))

    def open(self, directory, options):
        return EveryFieldFrames(directory)


class InRamStore(EveryFieldStore):
    """The same store, allowed to live in RAM."""

    kind = "every-field-ram-1"
    ram = True


class EveryFieldFrames(FrameSource):
    """Reads the arrays back (mapped), its lengths and field infos from the SDK's record."""

    def __init__(self, directory: str):
        self.record = StoreRecord.read(directory)
        self.lengths = self.record.lengths
        self.arrays = {
            f: [np.load(array_file(directory, n, f), mmap_mode="r") for n in self.record.names]
            for f in self.record.fields
        }

    def info(self, field):
        return self.record.info(field)

    def take(self, field, episodes, steps, out):
        eps = np.broadcast_to(episodes.reshape(episodes.shape + (1,) * (steps.ndim - 1)), steps.shape)
        flat = out.reshape((steps.size,) + out.shape[steps.ndim :])
        for i, (e, s) in enumerate(zip(eps.reshape(-1).tolist(), steps.reshape(-1).tolist())):
            flat[i] = self.arrays[field][e][s]
