"""The serving half of the SDK (``robo_loaders_plugin.sdk``): a :class:`~robo_loaders_plugin.sdk.FrameStore` placed
in RAM or the cache directory, built once per source and options, checked against what its build recorded, and
served as robomimic's and LeRobot's samples, with the footprint checked first, the store reopened in every worker
by path, and an explicit ``close()``. Also each framework's plan of a store from metadata alone, which a mixture
sums before building any component (``BackendSpec.footprints``).

Imported when a factory first runs (torch, the frameworks' window rules and datasets, the store's module).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.footprint import OWN_LOADER, Available, DiskGuard, Footprint, Planned, check_fits
from robo_loaders_plugin.core.in_flight import BatchesInFlight, indexed_in_flight
from robo_loaders_plugin.core.iteration import Serving
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.options import LEROBOT_OPTIONS, ROBOMIMIC_OPTIONS
from robo_loaders_plugin.core.units import format_bytes, plural
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource
from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.lerobot.dataset import sample_bytes as lerobot_sample_bytes
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples
from robo_loaders_plugin.robomimic.sequence import (
    data_size,
    read_demo,
    sample_bytes,
    sequence_options,
    training_loop_of,
)
from robo_loaders_plugin.sdk.placement import Placement, PlaceRequest, planned
from robo_loaders_plugin.sdk.records import Recorder, StoreRecord, records_bytes
from robo_loaders_plugin.sdk.store import FrameStore, StoreEpisodes
from robo_loaders_plugin.storage import cache

if TYPE_CHECKING:
    from robo_loaders_plugin.core.data_size import DataSize
    from robo_loaders_plugin.windows.robomimic import SequenceOptions

logger = get_logger(__name__)


@functools.cache
def load_store(ref: str) -> FrameStore:
    """The store of a ``"module:Class"`` reference, one instance per process.

    Args:
        ref: ``"package.module:Class"``.

    Returns:
        The :class:`FrameStore`.

    Raises:
        RoboLoadersError: the module cannot be imported, the class is missing or is not a ``FrameStore``, or
            making it raised.
    """
    module, _, name = ref.partition(":")
    try:  # a store's module needing a package not installed was a traceback naming no store (a reviewer's find)
        cls = getattr(importlib.import_module(module), name, None)
    except Exception as exc:  # a third party's import: whatever it raises, named
        raise RoboLoadersError(
            f"frame store {ref!r} cannot be imported: {type(exc).__name__}: {exc} (declare what it needs in "
            "frame_backend(requires=...), or install it)"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, FrameStore)):
        raise RoboLoadersError(
            f"frame store {ref!r} is not a FrameStore subclass (robo_loaders_plugin.extend."
            "FrameStore); fix the store= of frame_backend()"
        )
    if not cls.kind:
        raise RoboLoadersError(f"frame store {ref!r} sets no kind (it names the cache entries: 'my-frames-1')")
    return _named_errors(ref, "__init__()", cls)


def _named_errors(store: str, call: str, method, *args, directory: str = ""):
    """``method(*args)``, a frame store's own code: an error it raises that is not the plugin's (whose message names
    what to do) is re-raised naming the store and the call, its traceback chained. An ``OSError`` or a
    ``MemoryError`` keeps its type, the store and the call in a note: a loop that retries on an I/O error or a
    smaller batch on ``MemoryError`` no longer saw them (a reviewer's reproduction). A built store's reads name its
    directory too (``directory``): the store's own error may name only a file inside it, or nothing.

    Raises:
        RoboLoadersError: the store's error, as ``frame store '<module:Class>' (<directory>): take() failed:
            <error>``.
        OSError: the store's, noted ``frame store '<module:Class>' (<directory>): take() failed``.
        MemoryError: the store's, noted likewise.
    """
    try:
        return method(*args)
    except RoboLoadersError:
        raise
    except (OSError, MemoryError) as exc:
        exc.add_note(f"{_store_named(store, directory)}: {call} failed")
        raise
    except Exception as exc:
        named = _store_named(store, directory)
        raise RoboLoadersError(f"{named}: {call} failed: {type(exc).__name__}: {exc}") from exc


def _store_named(store: str, directory: str) -> str:
    """``frame store '<module:Class>'``, with its directory when it has one (made only on an error: every read of a
    store passes through :func:`_named_errors`)."""
    return f"frame store {store!r}" + (f" ({directory})" if directory else "")


def _ref_of(store: FrameStore) -> str:
    """A store object's ``"module:Class"``, for messages naming it where its reference is not at hand."""
    return f"{type(store).__module__}:{type(store).__qualname__}"


class StoreFrames(FrameSource):
    """The frame source a :class:`FrameStore` opened, checked against what the SDK recorded when the store was built
    (its episodes' lengths, each field's dtype and step shape) and made safe to pickle: a copy (a spawned
    DataLoader worker) carries only the store's class, directory and options and reopens the store there, so mapped
    or loaded data is never pickled (a pickled ``np.memmap`` copies its whole data into the payload).

    Args:
        store: The store class, ``"module:Class"``.
        directory: The built store.
        options: The backend's resolved options object (pickled by value).
        check: Check what the store opened against the record (the process that built or found the store; a
            worker's copy reopens what was checked).

    Attributes:
        inner: What :meth:`FrameStore.open` returned in this process.
        directory: The store's directory.
        record: What the SDK recorded when the store was built (``sdk.records.StoreRecord``).

    Raises:
        RoboLoadersError: ``open()`` returned something other than a ``FrameSource``.
        SourceError: what it opened disagrees with the record (naming the directory and the field).
    """

    def __init__(self, store: str, directory: str, options, check: bool = True):
        self._store, self.directory, self._options = store, directory, options
        self.record = StoreRecord.read(directory)
        frame_store = load_store(store)
        # a store that does not say it may be read by several threads at once is read by one at a time: the
        # training process's threads (robomimic's num_data_workers, a mixture's batch threads) call take() together,
        # and a store reading rows through one file handle (seek, read) served other samples' rows (a reviewer's
        # reproduction)
        self._lock = None if frame_store.thread_safe else threading.Lock()
        self.inner = _named_errors(store, "open()", frame_store.open, directory, options, directory=directory)
        if not isinstance(self.inner, FrameSource):
            raise RoboLoadersError(
                f"frame store {store!r}: open() returned {type(self.inner).__name__}, not a FrameSource"
            )
        self.lengths = np.asarray(getattr(self.inner, "lengths", self.record.lengths), dtype=np.int64)
        if check:
            self._check(store)

    def _check(self, store: str) -> None:
        """What the store opened is what was recorded: the same episodes' lengths, every field served as stored."""
        if not np.array_equal(self.lengths, self.record.lengths):
            self.close()
            raise SourceError(
                f"{self.directory}: the store opens {len(self.lengths)} episodes of other lengths than the "
                f"{len(self.record.lengths)} it was built from ({store}: does open() return the episodes in the order "
                "build() was given them?); delete it to rebuild it"
            )
        for field, want in self.record.fields.items():
            got = _named_errors(store, "info()", self.inner.info, field, directory=self.directory)
            if np.dtype(got.dtype) != want.dtype or tuple(got.shape) != want.shape:
                self.close()
                raise SourceError(
                    f"{self.directory}: the store serves {field} as {np.dtype(got.dtype)}{tuple(got.shape)}, it was "
                    f"built from {want.dtype}{want.shape} ({store}: info() must give each field's dtype and step "
                    "shape as stored)"
                )

    def __getstate__(self):
        return {"store": self._store, "directory": self.directory, "options": self._options}

    def __setstate__(self, state):
        StoreFrames.__init__(self, state["store"], state["directory"], state["options"], check=False)

    def info(self, field: str) -> FieldInfo:
        """See :meth:`FrameSource.info`.

        Args:
            field: The field's name.
        """
        return self.inner.info(field)

    def _read(self, call: str, method, *args):
        """``method(*args)`` of the store's frame source: under the lock of a store not declared thread-safe, and an
        error of the store's own named with it (a bare ``ValueError: could not broadcast ...`` named no backend)."""
        if self._lock is None:
            return _named_errors(self._store, call, method, *args, directory=self.directory)
        with self._lock:
            return _named_errors(self._store, call, method, *args, directory=self.directory)

    def take(self, field, episodes, steps, out) -> None:
        """See :meth:`FrameSource.take`.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            out: The destination.
        """
        self._read("take()", self.inner.take, field, episodes, steps, out)

    def gather(self, field, episodes, steps, pool=None):
        """See :meth:`FrameSource.gather` (the store's own, for device-resident sources).

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            pool: Recycles the output array, or ``None``.
        """
        return self._read("gather()", self.inner.gather, field, episodes, steps, pool)

    def gather_fields(self, fields, episodes, steps, pool=None) -> dict:
        """See :meth:`FrameSource.gather_fields` (the store's own: it may find the rows once for every field).

        Args:
            fields: The fields' names.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            pool: Recycles the output arrays, or ``None``.
        """
        return self._read("gather_fields()", self.inner.gather_fields, fields, episodes, steps, pool)

    @property
    def low_dim_up_front(self) -> bool:  # type: ignore[override]
        """The store's own (:attr:`FrameSource.low_dim_up_front`): a mixture read every episode whole at its start
        for a store saying it reads whole records (a reviewer's reproduction: the wrapper gave the default)."""
        return bool(getattr(self.inner, "low_dim_up_front", True))

    def gather_low_dim(self, fields, episodes, steps) -> dict:
        """See :meth:`FrameSource.gather_low_dim` (the store's own).

        Args:
            fields: The fields' names (none of them frames).
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
        """
        return self._read("gather_low_dim()", self.inner.gather_low_dim, fields, episodes, steps)

    def low_dim_of_unit(self, fields, episode: int) -> dict:
        """See :meth:`FrameSource.low_dim_of_unit` (the store's own).

        Args:
            fields: The fields' names (none of them frames).
            episode: The episode's index.
        """
        return self._read("low_dim_of_unit()", self.inner.low_dim_of_unit, fields, episode)

    @classmethod
    def join_field(cls, parts):
        """See :meth:`FrameSource.join_field`: the stores' own, when every part's store is of one class.

        Args:
            parts: ``(source, field)`` pairs, every source a ``StoreFrames``.

        Returns:
            The stores' class's joined reader, or ``None``.
        """
        inner = [(source.inner, field) for source, field in parts]
        kinds = {type(source) for source, _ in inner}
        return kinds.pop().join_field(inner) if len(kinds) == 1 else None

    def close(self) -> None:
        """Close the store's frame source (its ``close()``) and refuse reads afterwards, naming the store."""
        inner, self.inner = self.inner, self.inner.closed(self.directory)
        del inner


class StoreRobomimicSamples(RobomimicSamples):
    """``RobomimicSamples`` over a frame store (``close()`` and ``with``: ``core.iteration.ServedDataset``)."""


class StoreLeRobotSamples(LeRobotSamples):
    """``LeRobotSamples`` over a frame store (``close()`` and ``with``: ``core.iteration.ServedDataset``)."""


@dataclasses.dataclass(frozen=True)
class _Source:
    """What both frameworks give the SDK about one dataset: the store's episodes and where they come from."""

    framework: str
    source: Any  # has fingerprint(recorded=None): RobomimicHdf5, LeRobotV3
    path: str  # the source file or directory (for the stat-only reuse check)
    size: DataSize  # lengths in the store's order
    names: tuple[str, ...]
    cameras: frozenset[str]
    key: dict  # the source and every setting the store's content depends on
    option_prefix: str
    batches: BatchesInFlight
    read: Callable[[], Iterator] | None = None  # yields (name, {field: array}) per episode (None: not to be read)
    sample_frames: Callable | None = None  # a few camera frames, for a store measuring its codec


def _place(
    store: FrameStore,
    backend: str,
    src: _Source,
    options,
    available: Available,
    sample: bool,
    reusable: bool | None = None,
) -> Placement:
    """Where the store goes (:meth:`FrameStore.place`), with the SDK's own records counted where it goes;
    ``reusable=None``: whether a complete store of this source and key is on disk, from the files' stat."""
    root = available.disk_dir or cache.location(getattr(options, "cache_dir", None))
    in_ram = False
    if reusable is None:
        reusable = cache.holds_current(
            root, store.kind, _key(store, src, options), src.path, _recorded, for_placement=True
        )
        in_ram = _held_in_ram(store, src, options)
    records = records_bytes(len(src.size.lengths), len(src.size.frame_step_bytes) + src.size.other_fields)
    request = PlaceRequest(
        size=src.size,
        # the room the SDK's own records take beside a store in RAM left out: a store placed in RAM by a few kB,
        # then refused once they were added, instead of going to disk (a reviewer's reproduction). On disk the
        # records are added to the store's footprint below and checked with it (what a refusal reports is the
        # disk as measured)
        available=available.less(Footprint(shm_bytes=records)),
        batches=src.batches,
        reusable=reusable,
        reusable_in_ram=in_ram,
        backend=backend,
        framework=src.framework,
        option_prefix=src.option_prefix,
        sample_frames=src.sample_frames if sample else None,
    )
    placement = _named_errors(_ref_of(store), "place()", store.place, request, options)
    fp = placement.footprint
    if placement.in_ram and not in_ram:  # a store found in RAM has its records there already
        fp = dataclasses.replace(fp, shm_bytes=fp.shm_bytes + records)
    elif fp.disk_bytes:
        fp = dataclasses.replace(fp, disk_bytes=fp.disk_bytes + records)
    return dataclasses.replace(placement, footprint=fp)


def _held_in_ram(store: FrameStore, src: _Source, options) -> bool:
    """Whether this user's RAM directory holds a current store of this source and options (a run of the host built
    it and holds it). Why asked: a second run placed its store against the RAM left beside the first one's, found
    no room, and built a second copy on disk (a reviewer's reproduction; docs/multi-process.md: one cache per
    host)."""
    from robo_loaders_plugin.storage import ramfile

    if not os.path.isdir(ramfile.ram_root_path()):  # no RAM store of this user on the host (nothing created)
        return False
    try:
        root = ramfile.ram_root()
    except RoboLoadersError:
        return False  # not ours to use: the build says so
    return cache.holds_current(root, store.kind, _key(store, src, options), src.path, _recorded, for_placement=True)


def _recorded(path: str):
    from robo_loaders_plugin.storage.cached_dir import recorded_source

    return recorded_source(path)


def _key(store: FrameStore, src: _Source, options) -> dict:
    """The cache key of a store's entry: what the SDK reads from the source, what the store's content depends on
    and the store's class, each apart.

    Why apart: merged, a store option named like one of the SDK's entries (``cache_mode``, ``episodes``) replaced it,
    so a store built under another robomimic cache mode was reused and served another dtype (a reviewer's
    reproduction); and two stores of one ``kind`` found each other's entries, one checking and rebuilding the
    other's files in place."""
    ref = _ref_of(store)
    return {"sdk": src.key, "store": _named_errors(ref, "key()", store.key, options), "class": ref}


def _alternatives(store: FrameStore, framework: str) -> list:
    """The store's ``alternatives(framework)``, an error it raises named with the store."""
    return _named_errors(_ref_of(store), "alternatives()", store.alternatives, framework)


def _root(options, option_prefix: str) -> str:
    return cache.cache_root(getattr(options, "cache_dir", None), f"{option_prefix}.cache_dir")


def _checked_placement(store: FrameStore, backend: str, src: _Source, options) -> Placement:
    """Where the store goes, its footprint checked against the machine before anything is read (a store found on
    disk writes nothing); a store spilled to disk says so in the log."""
    root = _root(options, src.option_prefix)
    available = Available.measure(disk_dir=root)
    placement = _place(store, backend, src, options, available, sample=True)
    check_fits(
        placement.footprint, available, backend=backend, option_prefix=src.option_prefix,
        alternatives=_alternatives(store, src.framework),
    )  # fmt: skip
    if placement.spilled:
        logger.info(
            f"{backend}: spilled to disk: {placement.spilled}; the store is kept in {root} (mapped where the store "
            "maps its files: the page cache keeps what training touches), serving the same samples"
        )
    return placement


def _open(store: FrameStore, ref: str, backend: str, src: _Source, options, placement: Placement):
    """Find or build the placed store's entry and open it: what both frameworks share. Returns ``(frames,
    directory, hold, reused)``."""
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse

    footprint = placement.footprint
    alternatives = _alternatives(store, src.framework)
    in_ram = placement.in_ram
    budget = getattr(options, "max_memory", None) if in_ram else None
    key = _key(store, src, options)

    def build(directory: str) -> None:
        if not in_ram:  # the disk again, now (another run may have filled it meanwhile; a found store was rebuilt)
            need = footprint
            if not need.disk_bytes:  # placed as found on disk, but it was not usable: what a build writes
                need = _place(
                    store, backend, src, options, Available.measure(disk_dir=directory), False, False
                ).footprint
            check_fits(
                dataclasses.replace(need, host_bytes=0, shm_bytes=0, device_bytes=0),
                Available.measure(disk_dir=directory),
                backend=backend,
                option_prefix=src.option_prefix,
                alternatives=alternatives,
            )
        assert src.read is not None  # a source to build from, not one planned from metadata
        _check_reading(src, backend, footprint if in_ram else None, alternatives)
        recorder = Recorder(src.names, src.size.lengths, src.cameras, src.read, f"{backend} store of {src.path}")
        guard = None
        if not in_ram:
            guard = DiskGuard(directory, f"building the {backend} store {directory}", footprint.disk_bytes or None)
        episodes = StoreEpisodes(
            src.names, src.cameras, src.size, recorder.read, guard=guard, ram_budget=budget, in_ram=in_ram
        )
        _named_errors(ref, "build()", store.build, directory, episodes, options)
        recorder.write(directory, ref)
        if budget is not None and cache.path_bytes(directory) > budget:
            from robo_loaders_plugin.storage.ramfile import MemoryBudgetExceeded

            raise MemoryBudgetExceeded(
                f"the {backend} store needs more than {src.option_prefix}.max_memory={format_bytes(budget)} "
                f"({format_bytes(cache.path_bytes(directory))} written); raise max_memory, or keep it on disk "
                "with cache_dir"
            )

    directory, hold, reused = build_or_reuse(
        kind=store.kind,
        source=src.source,
        key=key,
        build=build,
        cache_dir=getattr(options, "cache_dir", None),
        check=functools.partial(_intact, store, ref),
        description=f"{backend} store",
        option_prefix=src.option_prefix,
        in_ram=in_ram,
        ram_budget=budget,
    )
    try:
        frames = StoreFrames(ref, directory, options)  # an entry of another store class has another key (_key)
        expected = np.asarray(src.size.lengths, dtype=np.int64)
        if frames.record.names != src.names or not np.array_equal(frames.lengths, expected):
            frames.close()
            raise SourceError(
                f"{directory} holds {len(frames.lengths)} episodes of other names or lengths than the "
                f"{len(expected)} selected; delete it to rebuild it"
            )
    except BaseException:
        hold.release()
        raise
    return frames, directory, hold, reused


def _check_reading(src: _Source, backend: str, in_ram: Footprint | None, alternatives) -> None:
    """Refuse, before the build reads anything, an episode the machine cannot hold while it is read whole
    (``DataSize.reading_bytes``): measured now, beside the RAM store being filled (``in_ram``: its footprint), as
    nothing else of the run is held yet.

    Why the store's ``alternatives`` are named only when the episode alone would fit (beside a RAM store that
    leaves too little): every store is built from episodes read whole, so otherwise the other backends they name
    would not fit either (a reviewer's reading), and the framework's own loader is what would."""
    reading = src.size.reading_bytes()
    if not reading:
        return
    longest = int(np.argmax(src.size.lengths))
    bound = (
        f"building reads each {src.size.unit} whole: the largest, {src.names[longest]} "
        f"({int(src.size.lengths[longest])} steps), is {format_bytes(reading)} decoded"
    )
    need = Footprint(host_bytes=reading, shm_bytes=in_ram.shm_bytes if in_ram is not None else 0, bound=bound)
    available = Available.measure()
    alone = in_ram is not None and available.fits_host(reading)
    would = [*alternatives, OWN_LOADER] if alone else [OWN_LOADER]
    check_fits(need, available, backend=backend, option_prefix=src.option_prefix, alternatives=would)


def _intact(store: FrameStore, ref: str, directory: str) -> bool:
    """An entry's check before it is reused: the SDK's record reads and matches its own checksum (else the entry is
    built again, the reason logged), then the store's own ``verify``.

    Why any error of ``verify`` means "rebuild": it reads files that may be damaged, where a store's own code raises
    whatever its parser does (``json.JSONDecodeError`` on a flipped byte); raised as such, every run failed on the
    damaged entry without naming it, and it was never rebuilt (a reviewer's reproduction)."""
    StoreRecord.read(directory)  # raises SourceError (a RoboLoadersError) naming what is wrong: rebuilt
    try:
        return bool(store.verify(directory))
    except RoboLoadersError:
        raise
    except Exception as exc:  # the store's own parser on a damaged file: the entry is rebuilt
        raise SourceError(f"frame store {ref!r}: verify() raised {type(exc).__name__}: {exc}") from exc


def _summary(store: FrameStore, frames: StoreFrames, directory: str, reused: bool, footprint: Footprint, head: str):
    """The serving summary: what is served, what the store holds and where, what it needs (nothing to build when
    it was reused) and how it stays within that."""
    needs = dataclasses.replace(footprint, build_s=None) if reused else footprint
    holds = _named_errors(_ref_of(store), "describe()", store.describe, frames.inner, directory)
    return (
        f"{head}, {holds} at {'reused ' if reused else ''}{directory} ({needs.describe()}); bounded: {footprint.bound}"
    )


def served_head(episodes: int, samples: int, unit: str) -> str:
    """The start of the serving summary, in the framework's words: ``18 demos, 945 samples``.

    Args:
        episodes: Episodes served.
        samples: Samples served.
        unit: What the framework calls an episode (robomimic: ``demo``; LeRobot: ``episode``).

    Returns:
        The phrase.
    """
    return f"{plural(episodes, unit)}, {plural(samples, 'sample')}"


def _planned(store: FrameStore, backend: str, src: _Source, options, committed: Footprint) -> Planned:
    """The store's plan from metadata (a mixture's component): what it needs, and what stays held once built (the
    store, not the batches in flight: a mixture counts its batches once)."""
    measured = Available.measure(disk_dir=cache.location(getattr(options, "cache_dir", None)))
    placement = _place(store, backend, src, options, measured.less(committed), sample=False)
    return planned(placement, measured, _alternatives(store, src.framework), src.batches)


# -- robomimic ---------------------------------------------------------------------------------------------------
def _robomimic_source(
    config, obs_keys, filter_by_attribute, dataset_path, options
) -> tuple[_Source, SequenceOptions, str]:
    """The robomimic file's demos and sizes from its metadata (no array read): ``(source, sequence options,
    path)``."""
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

    opts, path = sequence_options(config, obs_keys, dataset_path)
    source = RobomimicHdf5(path, cache_dir=getattr(options, "cache_dir", None))  # its records in the same cache
    with source.open() as f:
        demos = source.demos(f, filter_by_attribute)
        if not demos:
            raise SourceError(f"{path}: no demos selected (filter key {filter_by_attribute!r} is empty)")
        size = data_size(source, f, demos, opts)

    def read():
        with source.open() as f:
            for demo in demos:
                yield demo, read_demo(source, f, demo, opts, source.length(f, demo))

    def sample_frames():
        with source.open() as f:
            return source.sample_frames(f, demos, size.frame_step_bytes)

    key = {
        "source": os.path.realpath(path),
        "demos": demos,
        "fields": opts.field_names(),
        "cache_mode": opts.hdf5_cache_mode,
        "framework": "robomimic",
    }
    if any("/" in k for k in opts.dataset_keys):  # served as stored since 2026-12-05 (stores built before: float32)
        key["observation_dataset_keys"] = "as stored"
    src = _Source(
        framework="robomimic",
        source=source,
        path=path,
        size=size,
        names=tuple(demos),
        cameras=frozenset(size.frame_step_bytes),
        key=key,
        option_prefix=ROBOMIMIC_OPTIONS,
        batches=indexed_in_flight(sample_bytes(size, opts), training_loop_of(config)),
        read=read,
        sample_frames=sample_frames,
    )
    return src, opts, path


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
    from robo_loaders_plugin.windows.robomimic import SequenceWindows

    store = load_store(ref)
    src, opts, path = _robomimic_source(config, obs_keys, filter_by_attribute, dataset_path, options)
    # a demo robomimic would fail on is refused before the store is built (the store opens these very lengths)
    windows = SequenceWindows(src.size.lengths, opts, names=src.names, where=path)
    placement = _checked_placement(store, backend, src, options)
    frames, directory, hold, reused = _open(store, ref, backend, src, options, placement)
    footprint = placement.footprint
    head = served_head(len(src.names), len(windows), "demo")
    return StoreRobomimicSamples(
        frames,
        windows,
        demos=list(src.names),
        hdf5_path=path,
        filter_by_attribute=filter_by_attribute,
        backend_name=backend,
        location=directory,
        serving=Serving(_summary(store, frames, directory, reused, footprint, head), hold=hold, reused=reused),
    )


def robomimic_plan(
    ref: str, backend: str, config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, committed
) -> Planned:
    """What :func:`robomimic_dataset` will need for this file, with ``committed`` held beside it, from metadata.

    Args:
        ref: The store class, ``"module:Class"``.
        backend: The backend's name.
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (``None``: ``config.train.data``).
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        SourceError: not a robomimic file, or no demo selected.
    """
    src, _, _ = _robomimic_source(config, obs_keys, filter_by_attribute, dataset_path, options)
    return _planned(load_store(ref), backend, src, options, committed)


# -- LeRobot -----------------------------------------------------------------------------------------------------
def _lerobot_meta(native, options):
    """``meta/`` only: the dataset's source, sizes (episode-index order) and key, the batches in flight, the reader
    settings; once per dataset object in a mixture's build (``lerobot.dataset.checked_once``: its plan and its
    build)."""
    from robo_loaders_plugin.lerobot.dataset import checked_once

    return checked_once(native, "sdk.lerobot_meta", lambda: _lerobot_meta_read(native))


def _lerobot_meta_read(native):
    """What :func:`_lerobot_meta` gives, read now."""
    from robo_loaders_plugin.lerobot.dataset import native_source, windows_at_risk
    from robo_loaders_plugin.sources.lerobot_v3 import decoder_identity

    source, settings = native_source(native)
    size = source.data_size(native.episodes)
    batches = indexed_in_flight(lerobot_sample_bytes(size, settings))
    key = {
        "root": str(source.root),
        "episodes": native.episodes,
        "tolerance_s": settings.tolerance_s,
        "framework": "lerobot",
        # frames decoded by another torchcodec/FFmpeg are another store (PNG images need no decoder)
        "decoder": decoder_identity() if source.video_keys else None,
    }
    risk = windows_at_risk(source, settings)
    if risk:  # a store built without these windows' check is not theirs (gaps_at_risk); absent, keys are as before
        key["window_gaps"] = risk
    return source, size, batches, key, settings


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
    from robo_loaders_plugin.lerobot.dataset import native_episodes

    store = load_store(ref)
    source, size, batches, key, settings = _lerobot_meta(native, options)  # meta/ only: nothing read before the check
    meta_src = _Source(
        framework="lerobot",
        source=source,
        path=str(source.root),
        size=size,
        names=(),
        cameras=frozenset(size.frame_step_bytes),
        key=key,
        option_prefix=LEROBOT_OPTIONS,
        batches=batches,
        sample_frames=lambda: source.sample_frames(native.episodes),
    )
    # placed and checked before any row is read (the rows are read, and checked against the dataset, next)
    placement = _checked_placement(store, backend, meta_src, options)
    episodes = native_episodes(native, checked=(source, settings))  # meta/ checked above, moments ago
    # the store's episodes in the dataset's row order (meta's sizes are in episode-index order)
    size = dataclasses.replace(size, lengths=np.asarray([e - s for _, s, e in episodes.runs], dtype=np.int64))

    def read():
        for ep, _, _ in episodes.runs:
            yield f"episode_{ep}", episodes.read(ep)[0]

    src = dataclasses.replace(
        meta_src,
        size=size,
        names=tuple(f"episode_{ep}" for ep, _, _ in episodes.runs),
        cameras=frozenset(episodes.camera_keys),
        read=read,
    )
    frames, directory, hold, reused = _open(store, ref, backend, src, options, placement)
    footprint = placement.footprint
    head = served_head(len(src.names), int(frames.lengths.sum()), "episode")
    return StoreLeRobotSamples(
        native,
        frames,
        episodes.runs,
        episodes.columns,
        source.video_keys,
        source.image_keys,
        backend_name=backend,
        location=directory,
        serving=Serving(_summary(store, frames, directory, reused, footprint, head), hold=hold, reused=reused),
    )


def lerobot_plan(ref: str, backend: str, native, *, options, committed) -> Planned:
    """What :func:`lerobot_dataset` will need for this dataset, with ``committed`` held beside it, from ``meta/``.

    Args:
        ref: The store class, ``"module:Class"``.
        backend: The backend's name.
        native: The ``LeRobotDataset`` LeRobot's own ``make_dataset`` built.
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.

    Returns:
        A ``core.footprint.Planned``.

    Raises:
        CompatError: the installed LeRobot is not the version the backends support.
        SourceError: the dataset is not supported.
    """
    source, size, batches, key, _ = _lerobot_meta(native, options)
    src = _Source(
        framework="lerobot",
        source=source,
        path=str(source.root),
        size=size,
        names=(),
        cameras=frozenset(size.frame_step_bytes),
        key=key,
        option_prefix=LEROBOT_OPTIONS,
        batches=batches,
    )
    return _planned(load_store(ref), backend, src, options, committed)
