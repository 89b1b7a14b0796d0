"""The serving half of the SDK (``robo_loaders_plugin.sdk``): a :class:`~robo_loaders_plugin.sdk.FrameStore` built
into the cache and served as robomimic's and LeRobot's samples, with the footprint checked first, the store
reopened in every worker by path, and an explicit ``close()``.

Imported when a factory first runs (torch, the frameworks' window rules and datasets, the store's module).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.footprint import Available, Footprint, check_fits
from robo_loaders_plugin.core.in_flight import BatchesInFlight, indexed_in_flight
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource
from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.lerobot.dataset import sample_bytes as lerobot_sample_bytes
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.robomimic.sequence import data_size, sample_bytes, training_loop_of
from robo_loaders_plugin.sdk import FrameStore, StoreEpisodes, cache_root

logger = get_logger(__name__)

ROBOMIMIC_OPTIONS = "train.data_backend_kwargs"
LEROBOT_OPTIONS = "--dataset.backend_kwargs"


@functools.cache
def load_store(ref: str) -> FrameStore:
    """The store of a ``"module:Class"`` reference, one instance per process.

    Args:
        ref: ``"package.module:Class"``.

    Returns:
        The :class:`FrameStore`.

    Raises:
        RoboLoadersError: the class is missing or is not a ``FrameStore``.
    """
    module, _, name = ref.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, FrameStore)):
        raise RoboLoadersError(
            f"frame store {ref!r} is not a FrameStore subclass (robo_loaders_plugin.extend."
            "FrameStore); fix the store= of frame_backend()"
        )
    if not cls.kind:
        raise RoboLoadersError(f"frame store {ref!r} sets no kind (it names the cache entries: 'my-frames-1')")
    return cls()


class _Closed(FrameSource):
    """What a closed dataset reads from: every read says so."""

    def __init__(self, lengths: np.ndarray, where: str):
        self.lengths, self.where = lengths, where

    def info(self, field: str) -> FieldInfo:
        raise RoboLoadersError(f"the dataset over {self.where} was closed; build it again to read from it")

    def take(self, field, episodes, steps, out) -> None:
        self.info(field)


class StoreFrames(FrameSource):
    """The frame source a :class:`FrameStore` opened, made safe to pickle: a copy (a spawned DataLoader worker)
    carries only the store's class, directory and options and reopens the store there, so mapped or loaded data
    is never pickled (a pickled ``np.memmap`` copies its whole data into the payload).

    Args:
        store: The store class, ``"module:Class"``.
        directory: The built store.
        options: The backend's resolved options object (pickled by value).

    Attributes:
        inner: What :meth:`FrameStore.open` returned in this process.
        directory: The store's directory.
    """

    def __init__(self, store: str, directory: str, options):
        self._store, self.directory, self._options = store, directory, options
        self.inner = load_store(store).open(directory, options)
        if not isinstance(self.inner, FrameSource):
            raise RoboLoadersError(
                f"frame store {store!r}: open() returned {type(self.inner).__name__}, not a FrameSource"
            )
        self.lengths = np.asarray(self.inner.lengths, dtype=np.int64)

    def __getstate__(self):
        return {"store": self._store, "directory": self.directory, "options": self._options}

    def __setstate__(self, state):
        StoreFrames.__init__(self, state["store"], state["directory"], state["options"])

    def info(self, field: str) -> FieldInfo:
        """See :meth:`FrameSource.info`.

        Args:
            field: The field's name.
        """
        return self.inner.info(field)

    def take(self, field, episodes, steps, out) -> None:
        """See :meth:`FrameSource.take`.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            out: The destination.
        """
        self.inner.take(field, episodes, steps, out)

    def gather(self, field, episodes, steps, pool=None):
        """See :meth:`FrameSource.gather` (the store's own, for device-resident sources).

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            pool: Recycles the output array, or ``None``.
        """
        return self.inner.gather(field, episodes, steps, pool)

    def gather_fields(self, fields, episodes, steps, pool=None) -> dict:
        """See :meth:`FrameSource.gather_fields` (the store's own: it may find the rows once for every field).

        Args:
            fields: The fields' names.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            pool: Recycles the output arrays, or ``None``.
        """
        return self.inner.gather_fields(fields, episodes, steps, pool)

    def close(self) -> None:
        """Close the store's frame source (its ``close()``, when it has one); reads after this raise."""
        inner, self.inner = self.inner, _Closed(self.lengths, self.directory)
        close = getattr(inner, "close", None)
        if callable(close) and not isinstance(inner, _Closed):
            close()


class StoreRobomimicSamples(RobomimicSamples):
    """``RobomimicSamples`` over a frame store (``close()`` and ``with``: ``core.iteration.ServedDataset``)."""


class StoreLeRobotSamples(LeRobotSamples):
    """``LeRobotSamples`` over a frame store (``close()`` and ``with``: ``core.iteration.ServedDataset``)."""


def _open(
    store: FrameStore,
    ref: str,
    backend: str,
    source,
    size,
    names: list[str],
    cameras,
    read,
    key: dict,
    options,
    option_prefix: str,
    batches: BatchesInFlight,
):
    """Footprint, cache entry, open: what both frameworks share. The store's footprint is counted with the batches
    in flight (``core.in_flight``: served from the built-in datasets' buffers, whatever the store). Returns
    ``(frames, directory, hold, reused, footprint)``."""
    cache_dir = getattr(options, "cache_dir", None)
    root = cache_root(cache_dir, f"{option_prefix}.cache_dir")
    footprint = _with_batches(store.footprint(size, options), batches, root)
    # RAM, /dev/shm and GPU before anything is read; the disk when (and only if) the store is built
    check_fits(
        dataclasses.replace(footprint, disk_bytes=0), Available.measure(), backend=backend, option_prefix=option_prefix
    )
    episodes = StoreEpisodes(tuple(names), frozenset(cameras), size, read)

    def build(directory: str) -> None:
        check_fits(footprint, Available.measure(disk_dir=directory), backend=backend, option_prefix=option_prefix)
        store.build(directory, episodes, options)

    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    directory, hold, reused = build_or_reuse(
        kind=store.kind,
        source=source,
        key={**key, **store.key(options)},
        build=build,
        cache_dir=cache_dir,
        check=store.verify,
        description=f"{backend} store",
        option_prefix=option_prefix,
    )
    frames = StoreFrames(ref, directory, options)
    expected = np.asarray(size.lengths, dtype=np.int64)
    if len(frames.lengths) != len(expected) or not np.array_equal(frames.lengths, expected):
        frames.close()
        raise SourceError(
            f"{directory} holds {len(frames.lengths)} episodes of other lengths than the "
            f"{len(expected)} selected ({store.kind}: does open() return the episodes in the order "
            "build() was given them?); delete it to rebuild it"
        )
    return frames, directory, hold, reused, footprint


def _with_batches(footprint: Footprint, batches: BatchesInFlight, disk_dir: str | None = None) -> Footprint:
    """A store's footprint with the batches in flight in host memory (and its disk directory)."""
    return dataclasses.replace(
        footprint, host_bytes=footprint.host_bytes + batches.host_bytes, disk_dir=disk_dir or footprint.disk_dir
    )


def _summary(
    store: FrameStore, frames: StoreFrames, directory: str, reused: bool, footprint: Footprint, episodes: str
) -> str:
    return (
        f"{episodes}, {store.describe(frames.inner, directory)} in {'reused ' if reused else ''}{directory} "
        f"({footprint.describe()})"
    )


def robomimic_dataset(
    ref: str, backend: str, config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options
) -> StoreRobomimicSamples:
    """robomimic's ``SequenceDataset`` samples from the store ``ref``, built once per source and options.

    Args:
        ref: The store class, ``"module:Class"``.
        backend: The backend's name.
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (``None``: ``config.train.data``).
        options: The backend's resolved options object.

    Returns:
        The dataset (``indexed``: ``collate(indices)``; it also serves ``ds[i]``).

    Raises:
        SourceError: no demo selected, or a store holding other episodes.
        ResourceRefused: the store's footprint does not fit the machine.
    """
    from robo_loaders_plugin.extend import robomimic_demo_fields, robomimic_sequence
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
    from robo_loaders_plugin.windows.robomimic import SequenceWindows

    store = load_store(ref)
    opts, path = robomimic_sequence(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=getattr(options, "cache_dir", None))  # its records in the same cache
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = data_size(source, f, demos, opts)
    batches = indexed_in_flight(sample_bytes(size, opts), training_loop_of(config))

    def read():
        with source.open() as f:
            for demo in demos:
                yield demo, robomimic_demo_fields(source, f, demo, opts)

    key = {
        "source": os.path.realpath(path),
        "demos": demos,
        "fields": opts.field_names(),
        "cache_mode": opts.hdf5_cache_mode,
        "framework": "robomimic",
    }
    frames, directory, hold, reused, footprint = _open(
        store, ref, backend, source, size, demos, size.frame_step_bytes, read, key, options, ROBOMIMIC_OPTIONS, batches
    )
    windows = SequenceWindows(frames.lengths, opts)
    summary = _summary(store, frames, directory, reused, footprint, f"{len(demos)} demos, {len(windows)} samples")
    return StoreRobomimicSamples(
        frames,
        windows,
        demos=demos,
        hdf5_path=path,
        filter_by_attribute=filter_by_attribute,
        backend_name=backend,
        location=directory,
        serving=Serving(summary, hold=hold),
    )


def lerobot_dataset(ref: str, backend: str, native, *, options) -> StoreLeRobotSamples:
    """``LeRobotDataset``'s items from the store ``ref`` (frames decoded once from LeRobot's videos, as
    ``LeRobotDataset`` decodes them, when the store is built).

    Args:
        ref: The store class, ``"module:Class"``.
        backend: The backend's name.
        native: The ``LeRobotDataset`` LeRobot's own ``make_dataset`` built.
        options: The backend's resolved options object.

    Returns:
        The dataset (``ds[i]``, and ``collate(indices)`` for the ``indexed`` kind).

    Raises:
        SourceError: a layout robo-loaders does not reproduce, or a store holding other episodes.
        ResourceRefused: the store's footprint does not fit the machine.
    """
    from robo_loaders_plugin.extend import lerobot_episodes
    from robo_loaders_plugin.lerobot.dataset import native_source

    store = load_store(ref)
    meta, settings = native_source(native)  # meta/ only: the footprint is checked before any row or frame is read
    size = meta.data_size(native.episodes)
    batches = indexed_in_flight(lerobot_sample_bytes(size, settings))
    check_fits(
        dataclasses.replace(_with_batches(store.footprint(size, options), batches), disk_bytes=0),
        Available.measure(),
        backend=backend,
        option_prefix=LEROBOT_OPTIONS,
    )
    episodes = lerobot_episodes(native)
    source = episodes.source
    # the store's episodes in the dataset's row order (meta's sizes are in episode-index order)
    size = dataclasses.replace(size, lengths=np.asarray([e - s for _, s, e in episodes.runs], dtype=np.int64))

    def read():
        for ep, _, _ in episodes.runs:
            yield f"episode_{ep}", episodes.read(ep)[0]

    names = [f"episode_{ep}" for ep, _, _ in episodes.runs]
    key = {
        "root": str(source.root),
        "episodes": native.episodes,
        "tolerance_s": episodes.tolerance_s,
        "framework": "lerobot",
    }
    frames, directory, hold, reused, footprint = _open(
        store, ref, backend, source, size, names, episodes.camera_keys, read, key, options, LEROBOT_OPTIONS, batches
    )
    summary = _summary(
        store, frames, directory, reused, footprint, f"{len(names)} episodes, {int(frames.lengths.sum())} samples"
    )
    return StoreLeRobotSamples(
        native,
        frames,
        episodes.runs,
        episodes.columns,
        source.video_keys,
        source.image_keys,
        backend_name=backend,
        location=directory,
        serving=Serving(summary, hold=hold),
    )
