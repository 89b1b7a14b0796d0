"""The backend SDK: a third-party backend writes how it stores and serves frames (a :class:`FrameStore`), and
:func:`frame_backend` turns it into a registered backend for robomimic and LeRobot.

Why: every backend that keeps frames in its own files needs the same boilerplate around its idea (registration,
the footprint stated and checked before any data is read, a cache directory built once per source and options and
verified on reuse, the serving summary, pickling for DataLoader workers, a ``per_host`` cache option, an explicit
lifecycle), and a plugin author who copied it from the example got about 85% boilerplate. Here it is done once; the
built-in window rules and datasets serve the frameworks' samples from whatever the store opens.

This module is imported by a plugin's registration (``robo_loaders_backends``), which must stay cheap: it imports
nothing heavier than numpy, and the serving half (``sdk.serve``: torch, the frameworks, the store's own module) is
imported when a factory first runs. The names are public through ``robo_loaders_plugin.extend``.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from robo_loaders_plugin.core.footprint import Footprint
from robo_loaders_plugin.core.options import Option, Options
from robo_loaders_plugin.core.spec import GPU_NO, INDEXED, LOSSLESS, SAMPLE, BackendSpec

if TYPE_CHECKING:
    import numpy as np

    from robo_loaders_plugin.core.data_size import DataSize
    from robo_loaders_plugin.frames.base import FrameSource

# what a frame store's dataset is driven by, by default: robomimic's batches built by threads in the training
# process over its own sampler; LeRobot's DataLoader workers (its image transforms draw from their RNG)
DEFAULT_KIND = {"robomimic": INDEXED, "lerobot": SAMPLE}


@dataclasses.dataclass(frozen=True)
class StoreEpisodes:
    """What a store is built from: the episodes the framework's dataset serves, each field exactly as it serves it
    (robomimic: ``SequenceDataset``'s dtype rules of the cache modes; LeRobot: frames decoded as ``LeRobotDataset``
    decodes them), read once, one episode at a time, when the store is built.

    Attributes:
        names: The episodes' names in serving order (robomimic: ``demo_0``...; LeRobot: ``episode_<index>``):
            ``open`` must return a frame source whose episode ``i`` is ``names[i]``.
        cameras: The fields that are camera frames (robomimic: per-step arrays of at least ``FRAME_MIN_BYTES``;
            LeRobot: its camera keys). A store may keep any of them raw (a dtype its codec does not take).
        size: The sizes from metadata (steps per episode, bytes per step), what :meth:`FrameStore.footprint` read.
        read: Called by iteration; yields ``(name, {field: array})`` per episode, in :attr:`names` order.
    """

    names: tuple[str, ...]
    cameras: frozenset[str]
    size: DataSize
    read: Callable[[], Iterator[tuple[str, dict[str, np.ndarray]]]] = dataclasses.field(repr=False)

    def __iter__(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        return iter(self.read())

    def __len__(self) -> int:
        return len(self.names)


class FrameStore(abc.ABC):
    """How a backend stores and serves frames: the only part of a backend that is its own idea.

    A subclass sets :attr:`kind` and implements :meth:`build` and :meth:`open`; :meth:`footprint`, :meth:`verify`,
    :meth:`key` and :meth:`describe` have defaults. It is instantiated without arguments (``Store()``) in every
    process that opens a store, the DataLoader's spawned workers included; keep per-store state in what
    :meth:`open` returns.

    What the SDK does around it (:func:`frame_backend`'s factories), in order: the source's sizes from metadata;
    :meth:`footprint` checked against the machine (host RAM, ``/dev/shm``, GPU) before anything is read, refused
    with the numbers otherwise (``ResourceRefused``); a cache entry per source and :meth:`key` (``build_or_reuse``:
    atomic, locked, reused while the source is unchanged and :meth:`verify` holds), whose build first checks the
    footprint's disk bytes and then calls :meth:`build`; :meth:`open` wrapped so that a pickled dataset reopens the
    store in the worker by path (mapped data is never pickled); the serving summary; ``close()``.

    Attributes:
        kind: Names the cache entries (``"jpeg-frames-1"``): change it when the format of the files changes, so
            an old entry is never opened by the new code.
    """

    kind: str = ""

    @abc.abstractmethod
    def build(self, directory: str, episodes: StoreEpisodes, options: Options) -> None:
        """Write the store's files into ``directory`` (empty; renamed into place only when this returns).

        Args:
            directory: Where to write.
            episodes: What to store, one episode at a time.
            options: The backend's resolved options object.

        Raises:
            ResourceRefused: a writer that checks the disk as it writes (``DiskGuard``) found it full.
        """

    @abc.abstractmethod
    def open(self, directory: str, options: Options) -> FrameSource:
        """The frame source over a built store (called in the training process and again in every worker).

        Args:
            directory: A complete store (:meth:`build` returned, :meth:`verify` held).
            options: The backend's resolved options object.

        Returns:
            A ``FrameSource`` whose episode ``i`` is ``StoreEpisodes.names[i]``; it may define ``close()``
            (threads, open files, caches), called by the dataset's ``close()``.

        Raises:
            SourceError: the files do not hold what their index says (truncated, replaced), naming the directory.
        """

    def footprint(self, size: DataSize, options: Options) -> Footprint:
        """What serving this dataset will hold and write, from metadata only; the default is a store that keeps
        every non-frame field in RAM and writes the frames uncompressed (an upper bound for a compressing store).

        Args:
            size: The dataset's sizes (steps per episode, bytes per step of frames and other fields).
            options: The backend's resolved options object.

        Returns:
            A ``Footprint`` (its ``disk_dir`` is set to the cache root by the SDK).
        """
        return Footprint(
            host_bytes=size.other_bytes,
            disk_bytes=size.frame_bytes + size.other_bytes,
            build_s=size.build_seconds("lz4", 1),
            bound="frames read from the cache directory per batch, other fields in RAM",
        )

    def verify(self, directory: str) -> bool:
        """Whether a complete store found in the cache is intact (e.g. its checksums hold); one that is not is
        rebuilt. Default: trusted (the build was atomic).

        Args:
            directory: The store.

        Returns:
            Whether to reuse it.
        """
        return True

    def key(self, options: Options) -> dict:
        """The options the store's content depends on: one cache entry per distinct value. Default: every option
        but those declared ``per_host`` (a local path such as ``cache_dir`` changes where, not what).

        Args:
            options: The backend's resolved options object.

        Returns:
            A JSON-able ``{name: value}``.
        """
        return options.shared()

    def describe(self, frames: FrameSource, directory: str) -> str:
        """What the store holds, for the serving summary (``"camera frames as JPEG q90 (12.1 MB -> 1.0 MB)"``).

        Args:
            frames: What :meth:`open` returned.
            directory: The store.

        Returns:
            A phrase (default: ``"frames"``).
        """
        return "frames"


def cache_root(cache_dir: str | None = None, where: str = "cache_dir") -> str:
    """The cache root a backend writes under, created: ``cache_dir``, else ``$ROBO_LOADERS_CACHE``, else
    ``$XDG_CACHE_HOME/robo-loaders`` or ``~/.cache/robo-loaders``.

    Args:
        cache_dir: The backend's ``cache_dir`` option (``~`` expanded), or ``None``.
        where: How the user set it, for the error (``train.data_backend_kwargs.cache_dir``).

    Returns:
        Its absolute path.

    Raises:
        RoboLoadersError: the path is a file, or the directory cannot be created or written in.
    """
    from robo_loaders_plugin.storage.cache import cache_root as root

    return root(cache_dir, where)


def _check_cache_dir(value: str) -> None:
    """A ``cache_dir`` value, at argument parsing: created when missing, and must take a file."""
    from robo_loaders_plugin.core.paths import writable_dir_problem

    problem = writable_dir_problem(value)
    if problem:
        raise ValueError(problem)


def cache_dir_option(help: str = "") -> Option:
    """The declaration of a ``cache_dir`` option, as the built-in backends declare theirs: a string, ``None`` by
    default (the cache root of :func:`cache_root`), checked writable at argument parsing, and ``per_host``.

    Why ``per_host``: the processes of a multi-process run must agree on every option (the run is refused
    otherwise) except those declared ``per_host``, such as a local path each host has its own of.

    Args:
        help: The help line (default: where the store goes and when it is reused).

    Returns:
        The :class:`Option`.
    """
    return Option(
        str,
        None,
        help
        or "the cache directory the store is built in (default: $ROBO_LOADERS_CACHE or "
        "~/.cache/robo-loaders); reused while the source and options are unchanged",
        per_host=True,
        check=_check_cache_dir,
    )


def frame_backend(
    name: str,
    store: str,
    *,
    description: str,
    frameworks: tuple[str, ...] = ("robomimic", "lerobot"),
    kind: str | Mapping[str, str] | None = None,
    lossless: str | Mapping[str, str] = LOSSLESS,
    gpu: str | Mapping[str, str] = GPU_NO,
    options: Mapping[str, Option] | None = None,
    constraints: Callable[[Options], None] | None = None,
    requires: Mapping[str, tuple] | None = None,
) -> BackendSpec:
    """A backend serving robomimic's and LeRobot's samples from a :class:`FrameStore`, for a plugin's
    ``robo_loaders_backends`` hook.

    The factories it declares (``sdk.serve``) follow the frameworks' protocols and return
    ``RobomimicSamples``/``LeRobotSamples`` with ``close()`` (releases the cache entry's hold, closes the frame
    source, drops the batch buffers) and ``with ... as ds:``; garbage collection releases them too.

    Args:
        name: The backend's name (``train.data_backend``, ``--dataset.backend``).
        store: The store class as ``"module:Class"``, imported when a factory first runs (so registering the
            backend imports neither the store nor torch).
        description: One sentence for ``robo-loaders list``.
        frameworks: The frameworks served.
        kind: ``SAMPLE`` or ``INDEXED``, or per framework (default: ``INDEXED`` on robomimic, ``SAMPLE`` on
            LeRobot).
        lossless: What the backend promises about its samples (``LOSSLESS``, ``LOSSY_FRAMES``), or per framework.
        gpu: ``GPU_NO``, ``GPU_OPTIONAL`` or ``GPU_REQUIRED``, or per framework.
        options: The store's own options; a ``cache_dir`` (:func:`cache_dir_option`) is added unless declared.
        constraints: Checks across options (``BackendSpec.constraints``).
        requires: Modules the store needs per framework, with an install hint (``BackendSpec.requires``).

    Returns:
        The :class:`BackendSpec`.

    Raises:
        ValueError: ``store`` is not a ``"module:Class"`` reference, a kind is ``BATCH``, or ``cache_dir`` is
            declared without ``per_host``.
    """
    module, _, cls = store.partition(":")
    if not module or not cls:
        raise ValueError(f"backend {name!r}: store must be 'module:Class', got {store!r}")
    kind = dict(DEFAULT_KIND) if kind is None else kind
    kinds = kind.values() if isinstance(kind, Mapping) else [kind]
    if any(k not in (SAMPLE, INDEXED) for k in kinds):
        raise ValueError(f"backend {name!r}: a frame store serves the sample or indexed kind, got {kind!r}")
    declared = {"cache_dir": cache_dir_option(), **dict(options or {})}
    if not declared["cache_dir"].per_host:
        raise ValueError(
            f"backend {name!r}: option 'cache_dir' is a local path and must be declared per_host=True "
            "(or use cache_dir_option())"
        )
    from robo_loaders_plugin.sdk import factories

    made = {
        "robomimic": functools.partial(factories.robomimic_factory, store=store, backend=name),
        "lerobot": functools.partial(factories.lerobot_factory, store=store, backend=name),
    }
    kind = {fw: kind[fw] for fw in frameworks} if isinstance(kind, Mapping) else kind
    return BackendSpec(
        name=name,
        description=description,
        frameworks=tuple(frameworks),
        kind=kind,
        factories={fw: made[fw] for fw in frameworks},
        options=declared,
        constraints=constraints,
        lossless=lossless,
        gpu=gpu,
        requires=dict(requires or {}),
    )


__all__ = ["DEFAULT_KIND", "FrameStore", "StoreEpisodes", "cache_dir_option", "cache_root", "frame_backend"]
