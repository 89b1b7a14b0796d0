"""What a backend of the SDK writes: a :class:`FrameStore` (how it stores, checks and reads its frames), and what its
build is given (:class:`StoreEpisodes`).

Why a module of their own: the SDK's serving half (``sdk.serve``) builds and opens stores, and the package's
``frame_backend`` imports the factories that import it; with the store's contract here, each imports it from below
and no module of the SDK imports the package that imports it (``no_import_cycles`` in pyproject.toml). Light to
import, as the package is: a plugin's registration imports it.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from robo_loaders_plugin.core.footprint import DiskGuard, Footprint
from robo_loaders_plugin.core.options import Options
from robo_loaders_plugin.sdk.placement import Placement, PlaceRequest, default_footprint, place_by_rule

if TYPE_CHECKING:
    import numpy as np

    from robo_loaders_plugin.core.data_size import DataSize
    from robo_loaders_plugin.frames.base import FrameSource


@dataclasses.dataclass(frozen=True)
class StoreEpisodes:
    """What a store is built from: the episodes the framework's dataset serves, each field exactly as it serves it
    (robomimic: ``SequenceDataset``'s dtype rules of the cache modes; LeRobot: frames decoded as ``LeRobotDataset``
    decodes them), read once, one episode at a time, when the store is built. The SDK checks them as they are read
    (every episode holds the same fields, each of one dtype and step shape, ``size.lengths[i]`` rows) and records
    them beside the store (``extend.StoreRecord``, in ``robo-loaders-fields.json``).

    Attributes:
        names: The episodes' names in serving order (robomimic: ``demo_0``...; LeRobot: ``episode_<index>``):
            ``open`` must return a frame source whose episode ``i`` is ``names[i]``.
        cameras: The fields that are camera frames (robomimic: per-step arrays of at least ``FRAME_MIN_BYTES``;
            LeRobot: its camera keys). A store may keep any of them raw (a dtype its codec does not take).
        size: The sizes from metadata (steps per episode, bytes per step), what :meth:`FrameStore.footprint` read.
        read: Called by iteration; yields ``(name, {field: array})`` per episode, in :attr:`names` order.
        guard: Stops a store written on disk before the disk falls below its reserve (``guard.check(bytes about
            to be written, bytes written)``, ``extend.DiskGuard``); ``None`` for a store in RAM.
        ram_budget: The most bytes a store in RAM may write (the backend's ``max_memory``); ``None``: no limit, or
            a store on disk. The SDK checks it once the store is built; a writer may stop earlier.
        in_ram: Whether the store is built in RAM (:attr:`FrameStore.ram`).
    """

    names: tuple[str, ...]
    cameras: frozenset[str]
    size: DataSize
    read: Callable[[], Iterator[tuple[str, dict[str, np.ndarray]]]] = dataclasses.field(repr=False)
    guard: DiskGuard | None = dataclasses.field(default=None, repr=False)
    ram_budget: int | None = None
    in_ram: bool = False

    def __iter__(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        return iter(self.read())

    def __len__(self) -> int:
        return len(self.names)


class FrameStore(abc.ABC):
    """How a backend stores and serves frames: the only part of a backend that is its own idea.

    A subclass sets :attr:`kind` and implements :meth:`build` and :meth:`open`; :meth:`footprint`, :meth:`place`,
    :meth:`verify`, :meth:`key`, :meth:`describe` and :meth:`alternatives` have defaults. It is instantiated without
    arguments (``Store()``) in every process that opens a store, the DataLoader's spawned workers included; keep
    per-store state in what :meth:`open` returns.

    What the SDK does around it (:func:`frame_backend`'s factories), in order: the source's sizes from metadata;
    where the store goes (:meth:`place`: RAM or the cache directory) and what it needs there, checked against the
    machine (host RAM, ``/dev/shm``, GPU, disk) before anything is read, refused with the numbers otherwise
    (``ResourceRefused``), and counted with the other components of a mixture; a cache entry per source and
    :meth:`key` (``build_or_reuse``: atomic, locked, reused while the source is unchanged, its files' sizes
    (manifest) and :meth:`verify` hold), whose build calls :meth:`build` and records the episodes' fields and
    lengths; :meth:`open`, checked against those records and wrapped so that a pickled dataset reopens the store in
    the worker by path (mapped data is never pickled); the serving summary; ``close()``.

    Attributes:
        kind: Names the cache entries (``"jpeg-frames-1"``): change it when the format of the files changes, so
            an old entry is never opened by the new code; a trailing ``-<version>`` removes the entries an earlier
            version wrote once nothing uses them.
        ram: Whether the store may live in RAM: without ``cache_dir`` it is built in this user's RAM directory,
            shared by the host's processes and removed with its last user, when it fits there (and the backend's
            ``max_memory``, :func:`max_memory_option`); else on disk, saying why. Default: always on disk.
        thread_safe: Whether what :meth:`open` returns may be read by several threads at once (its ``take`` and
            ``gather*`` called together by the training process's threads: robomimic's ``num_data_workers``, a
            mixture's batch threads). Default ``False``: the SDK reads it under one lock per opened store; set it
            for a store that reads through maps or per-call file handles, never one shared file position.
    """

    kind: str = ""
    ram: bool = False
    thread_safe: bool = False

    @abc.abstractmethod
    def build(self, directory: str, episodes: StoreEpisodes, options: Options) -> None:
        """Write the store's files into ``directory`` (empty; renamed into place only when this returns).

        Args:
            directory: Where to write.
            episodes: What to store, one episode at a time.
            options: The backend's resolved options object.

        Raises:
            ResourceRefused: a writer that checks the disk as it writes (``episodes.guard``) found it full.
        """

    @abc.abstractmethod
    def open(self, directory: str, options: Options) -> FrameSource:
        """The frame source over a built store (called in the training process and again in every worker).

        Args:
            directory: A complete store (:meth:`build` returned, :meth:`verify` held).
            options: The backend's resolved options object.

        Returns:
            A ``FrameSource`` whose episode ``i`` is ``StoreEpisodes.names[i]`` (its ``lengths`` and ``info()`` may
            come from the SDK's records: ``StoreRecord.read(directory)``); it may define ``close()`` (threads, open
            files, caches), called by the dataset's ``close()``.

        Raises:
            SourceError: the files do not hold what their index says (truncated, replaced), naming the directory.
        """

    def footprint(self, size: DataSize, options: Options) -> Footprint:
        """What serving this dataset will hold and write, from metadata only: ``disk_bytes`` are the store's files
        (an upper bound: where they go is the SDK's :meth:`place`), ``host_bytes`` what it keeps in RAM beside
        them. The default is a store that keeps every non-frame field in RAM and writes every field uncompressed,
        with up to 512 bytes of header per episode and field: an upper bound for a store that writes each field
        once, compressed or not, and a small index beside it. Nothing compares what ``build`` wrote with it (a
        store in RAM is checked against ``max_memory``; on disk, ``episodes.guard`` stops a writer that calls it
        before the disk fills): an override must be an upper bound by construction.

        Args:
            size: The dataset's sizes (steps per episode, bytes per step of frames and other fields).
            options: The backend's resolved options object.

        Returns:
            A ``Footprint`` of the store alone (the SDK adds the batches in flight and its own records).
        """
        return default_footprint(size)

    def place(self, request: PlaceRequest, options: Options) -> Placement:
        """Where the store goes and what serving it needs there. The default is the SDK's rule
        over :meth:`footprint`: in RAM when :attr:`ram`, no ``cache_dir`` and
        it fits, else on disk. Override it for a rule of your own (a compressing store may estimate its size on
        disk from a few sampled frames, ``request.sample_frames``).

        Args:
            request: The sizes, the machine, the batches in flight, and whether a store is already on disk.
            options: The backend's resolved options object.

        Returns:
            The :class:`Placement` (its footprint with ``request.batches``).
        """
        return place_by_rule(self.footprint(request.size, options), request, options, self.ram)

    def verify(self, directory: str) -> bool:
        """Whether a complete store found in the cache is intact (e.g. its checksums hold); one that is not is
        rebuilt. Called after the SDK found every file the size its build wrote (the manifest); on disk, once per
        version of the files. An error it raises (its parser on a damaged file) also rebuilds the store, the error
        named in the log. Default: trusted.

        Args:
            directory: The store.

        Returns:
            Whether to reuse it.
        """
        return True

    def key(self, options: Options) -> dict:
        """The options the store's content depends on: one cache entry per distinct value. Default: every option
        but those declared ``per_host`` (a local path such as ``cache_dir`` changes where, not what) and
        ``max_memory`` (:func:`~robo_loaders_plugin.sdk.max_memory_option`: it decides where the store lives, RAM
        or disk, not what it holds; in the key, two runs of other budgets built two copies of one store in RAM, and a
        changed budget rebuilt a store on disk).

        Args:
            options: The backend's resolved options object.

        Returns:
            A JSON-able ``{name: value}``.
        """
        return {k: v for k, v in options.shared().items() if k != "max_memory"}

    def describe(self, frames: FrameSource, directory: str) -> str:
        """What the store holds, for the serving summary (``"camera frames as JPEG q90 (12.1 MB -> 1.0 MB)"``).

        Args:
            frames: What :meth:`open` returned.
            directory: The store.

        Returns:
            A phrase (default: the bytes of its files, from the SDK's manifest).
        """
        from robo_loaders_plugin.core.units import format_bytes
        from robo_loaders_plugin.storage.cached_dir import entry_files

        files = entry_files(directory)
        return f"{format_bytes(sum(files.values()))} in {len(files)} file{'s' * (len(files) != 1)}"

    def alternatives(self, framework: str) -> tuple[str, ...]:
        """What would fit when the store does not, for the refusal (``"backend 'x' (writes nothing)"``).

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            One phrase each (default: none).
        """
        return ()
