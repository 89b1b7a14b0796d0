"""The public API for writing a backend: everything a third-party backend needs, and nothing it must not touch.

This module *is* the reference (as pytest's ``hookspec.py`` is for pytest plugins): every name below is stable,
typed and documented; anything imported from elsewhere in ``robo_loaders_plugin`` is private and may change.
docs/writing-a-backend.md walks through a complete backend (``examples/jpeg_backend``) built from these names only,
and ``robo_loaders_plugin.testing`` proves a backend serves the native loader's samples.

The short way (the SDK): a backend that keeps frames in its own files writes a :class:`FrameStore` (``build``,
``open``, optionally ``footprint``, ``verify``, ``key``, ``describe``) and registers it with :func:`frame_backend`;
the SDK does the rest for robomimic and LeRobot (the footprint checked before any data is read, the cache entry,
verification on reuse, the serving summary, pickling for DataLoader workers, a ``per_host`` ``cache_dir``,
``close()``). The long way (a backend that is not a frame store: another kind, its own datasets) uses the building
blocks below the same way the SDK and the built-in backends do.

Every name, where it comes from in words (names loaded on first use are marked *lazy*: listing backends must not
import torch or a framework):

=================================== ===========================================================================
name                                what it is
=================================== ===========================================================================
**the SDK**
``FrameStore``                      base class of a store: how a backend writes, checks and reads its frames
``StoreEpisodes``                   what ``FrameStore.build`` is given: episode names, camera fields, sizes, data
``frame_backend``                   a ``BackendSpec`` serving both frameworks from a ``FrameStore``
``StoreFrames``                     (lazy) the pickling wrapper of what ``FrameStore.open`` returns (``.inner``)
``cache_dir_option``                the ``cache_dir`` declaration (``per_host``, checked writable)
``cache_root``                      the cache root a backend writes under (created)
**registration and options**
``hookimpl``                        marks a plugin's ``robo_loaders_backends`` hook
``BackendSpec``                     a backend as its plugin declares it (factories checked at registration)
``BackendChoice``                   a user's choice of a backend, its options resolved
``Option``                          one option's declaration (type, default, help, range, ``per_host``, ...)
``Options``                         base of the typed, frozen options object a factory receives
``SAMPLE``                          kind: the framework's DataLoader drives a pass
``INDEXED``                         kind: the adapter builds whole batches from the framework's sampler
``BATCH``                           kind: the backend orders its passes (``BatchDataset``)
``LOSSLESS``                        promise: byte-identical to the native loader
``LOSSY_FRAMES``                    promise: camera frames within a stated tolerance, the rest identical
``NOT_BIT_IDENTICAL_ON_NVDEC``      promise: identical on the CPU, not with NVDEC
``GPU_NO``                          GPU use: none
``GPU_OPTIONAL``                    GPU use: optional
``GPU_REQUIRED``                    GPU use: required (refused before reading data without CUDA)
``ROBOMIMIC_OPTIONS``               how robomimic users set options (for messages)
``LEROBOT_OPTIONS``                 how LeRobot users set options (for messages)
``pass_options``                    the option declarations of a pipeline-served (``batch``) backend
**errors**
``RoboLoadersError``                base of every error the plugin raises
``BackendOptionError``              an option unknown or of a bad value
``SourceError``                     a source that cannot be served as it is
``StaleSourceError``                a source changed since data was made from it
``ResourceRefused``                 a footprint the machine cannot hold (with the numbers)
**the footprint contract**
``Footprint``                       what a backend will hold and write, from metadata
``Planned``                         a backend's plan for one dataset (footprint, what was measured, alternatives)
``Available``                       what the machine has now (``Available.measure``)
``check_fits``                      refuse a footprint that does not fit, before any data is read
``HEADROOM``                        the fraction of a resource a footprint may use (90%)
``DiskGuard``                       stops a writer before the disk falls below the reserve
``current_training_loop``           the loop the adapter stated while a factory runs (``None``: not known)
``TrainingLoop``                    what it returns: ``batch_size`` and ``workers``
``indexed_in_flight``               the batches in flight of a backend over the framework's sampler, counted
``BatchesInFlight``                 batches alive at once and their bytes (``host_bytes``, ``describe``)
``DataSize``                        (lazy) a dataset's sizes from metadata (steps, bytes per step)
**sources**
``RobomimicHdf5``                   (lazy) robomimic's HDF5: demos, fields, ``data_size``, ``fingerprint``
``robomimic_sequence``              ``SequenceDataset``'s arguments, checked as robomimic checks them
``robomimic_demo_fields``           one demo's fields as ``SequenceDataset`` serves them
``robomimic_sequence_dataset``      robomimic's own ``SequenceDataset`` (to wrap, or for parity)
``lerobot_episodes``                a ``LeRobotDataset``'s episodes, read as it reads them
``LeRobotEpisodes``                 (lazy) what ``lerobot_episodes`` returns: runs, columns, ``read(episode)``
``LeRobotV3``                       (lazy) a LeRobot v3 dataset's files (``LeRobotEpisodes.source``)
``Fingerprint``                     (lazy) what a source's ``fingerprint()`` returns (staleness)
**storage**
``build_or_reuse``                  a cache directory built once per source and options, atomically, locked
``atomic_write_bytes``              write a file so that readers see the old or the new one, whole
``sha256_file``                     a file's SHA-256 (checksums for ``verify``)
**frames, windows, datasets**
``FrameSource``                     (lazy) the one question a storage answers: field F at (episode, step) pairs
``FieldInfo``                       (lazy) how a frame source stores a field (dtype, step shape, frames)
``ClosedFrames``                    (lazy) what a closed dataset reads from (``FrameSource.closed``): refuses reads
``FRAME_MIN_BYTES``                 a field of at least this many bytes per step is camera frames
``BufferPool``                      (lazy) recycles batch arrays (``FrameSource.gather``'s ``pool``)
``SequenceOptions``                 (lazy) ``SequenceDataset``'s window settings
``SequenceWindows``                 (lazy) ``SequenceDataset``'s window rules over episode lengths
``RobomimicSamples``                (lazy) ``SequenceDataset``'s samples from a frame source
``LeRobotSamples``                  (lazy) ``LeRobotDataset``'s items from a frame source
**the serving contract**
``Serving``                         (lazy) what a built dataset declares: summary, batch threads, hold
``IndexedDataset``                  (lazy) ``indexed`` kind: ``collate(indices)``
``BatchDataset``                    (lazy) ``batch`` kind: ``batch_source(plan)``
``BatchSource``                     (lazy) one pass after another (``batches(epoch, start)``), resumable
``SamplingPlan``                    (lazy) what the native loop would serve (batch size, items, seed, rank)
``PipelineDataset``                 (lazy) the torchdata pipeline the built-in ``datapipe`` uses
``PassOptions``                     (lazy) the pipeline's pass options (``PassOptions.of``)
=================================== ===========================================================================

How a backend is put together by hand (the SDK and the built-in ones are built the same way):

1. **Registration** (``robo_loaders_plugin``): a ``@hookimpl`` function ``robo_loaders_backends()`` returning
   :class:`BackendSpec` objects, exposed through the ``robo_loaders`` entry-point group; every option declared once
   as an :class:`Option`. Each factory must follow its framework's protocol (``core/hookspecs.py``:
   ``factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options)``,
   ``factory(native, *, options)``); one that does not is refused by ``robo-loaders list``.
2. **A source reader**: :class:`RobomimicHdf5` (robomimic's HDF5; pass the backend's ``cache_dir`` so its
   validation records go there) or :func:`lerobot_episodes` (a LeRobot v3 dataset, its videos decoded exactly as
   ``LeRobotDataset`` decodes them), each with a ``fingerprint()`` for the staleness rules.
3. **Storage**: :func:`build_or_reuse` gives it a directory in the cache (:func:`cache_root`), built once per
   source and options, atomically, locked, reused only while the source is unchanged. Before it builds anything
   the factory states its :class:`Footprint` (from :class:`DataSize`: ``RobomimicHdf5.data_size``,
   ``LeRobotV3.data_size``) and calls :func:`check_fits` against :meth:`Available.measure`: it serves within the
   bound it states or refuses, before reading any data (:class:`ResourceRefused`); a writer checks the disk as it
   writes (:class:`DiskGuard`).
4. **A frame source** (:class:`FrameSource`): answers "field F at these (episode, step) pairs"; the window rules
   turn sample indices into such pairs. A dataset of the ``sample`` kind is pickled into LeRobot's spawned
   DataLoader workers: the frame source must pickle its path, not its data (a pickled ``np.memmap`` copies it).
5. **A dataset**: :class:`RobomimicSamples` or :class:`LeRobotSamples` over the frame source, with its
   :class:`Serving`; the declared kind says who drives a pass (``sample``/``indexed``: the framework's sampler;
   ``batch``: :class:`PipelineDataset` or your own :class:`BatchSource`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# -- registration and the serving contract (also exported by robo_loaders_plugin) -------------------------------
from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError, SourceError, StaleSourceError  # noqa: F401
from robo_loaders_plugin.core.files import atomic_write_bytes, sha256_file  # noqa: F401  (a backend's own files)

# the footprint contract: what a backend will need, estimated from metadata, checked before any data is read
from robo_loaders_plugin.core.footprint import (  # noqa: F401
    HEADROOM,
    Available,
    DiskGuard,
    Footprint,
    Planned,
    ResourceRefused,
    check_fits,
)
from robo_loaders_plugin.core.hookspecs import hookimpl  # noqa: F401

# the batches a training loop keeps alive beside the data, counted in a footprint (core.in_flight)
from robo_loaders_plugin.core.in_flight import (  # noqa: F401
    BatchesInFlight,
    TrainingLoop,
    current_training_loop,
    indexed_in_flight,
)
from robo_loaders_plugin.core.options import Option, Options  # noqa: F401
from robo_loaders_plugin.core.spec import (  # noqa: F401
    BATCH,
    GPU_NO,
    GPU_OPTIONAL,
    GPU_REQUIRED,
    INDEXED,
    LOSSLESS,
    LOSSY_FRAMES,
    NOT_BIT_IDENTICAL_ON_NVDEC,
    SAMPLE,
    BackendChoice,
    BackendSpec,
)

# the SDK: a backend that only says how it stores and serves frames (light: a plugin's registration imports it)
from robo_loaders_plugin.sdk import FrameStore, StoreEpisodes, cache_dir_option, cache_root, frame_backend  # noqa: F401

if TYPE_CHECKING:  # the rest is imported on first use: listing backends must not import torch or a framework
    from robo_loaders_plugin.core.data_size import DataSize  # noqa: F401
    from robo_loaders_plugin.core.iteration import BatchDataset, BatchSource, IndexedDataset, SamplingPlan, Serving  # noqa: F401
    from robo_loaders_plugin.frames.base import ClosedFrames, FieldInfo, FrameSource  # noqa: F401
    from robo_loaders_plugin.lerobot.dataset import LeRobotSamples  # noqa: F401
    from robo_loaders_plugin.pipeline.batches import PipelineDataset  # noqa: F401
    from robo_loaders_plugin.pipeline.options import PassOptions  # noqa: F401
    from robo_loaders_plugin.robomimic.dataset import RobomimicSamples  # noqa: F401
    from robo_loaders_plugin.sdk.serve import StoreFrames  # noqa: F401
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3  # noqa: F401
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5
    from robo_loaders_plugin.storage.buffers import BufferPool  # noqa: F401
    from robo_loaders_plugin.storage.fingerprint import Fingerprint  # noqa: F401
    from robo_loaders_plugin.windows.robomimic import SequenceOptions, SequenceWindows  # noqa: F401

_LAZY = {
    # the serving contract (core.iteration): what a factory returns and what the adapters read from it
    "Serving": "robo_loaders_plugin.core.iteration",
    "IndexedDataset": "robo_loaders_plugin.core.iteration",
    "BatchDataset": "robo_loaders_plugin.core.iteration",
    "BatchSource": "robo_loaders_plugin.core.iteration",
    "SamplingPlan": "robo_loaders_plugin.core.iteration",
    # frame sources (frames.base): the one question every storage answers
    "FrameSource": "robo_loaders_plugin.frames.base",
    "FieldInfo": "robo_loaders_plugin.frames.base",
    "ClosedFrames": "robo_loaders_plugin.frames.base",
    "BufferPool": "robo_loaders_plugin.storage.buffers",
    # the SDK's pickling wrapper of what a FrameStore opens
    "StoreFrames": "robo_loaders_plugin.sdk.serve",
    # a dataset's sizes from metadata, what a footprint is computed from
    "DataSize": "robo_loaders_plugin.core.data_size",
    # what a source's fingerprint() returns (build_or_reuse records it beside an entry and compares it on reuse)
    "Fingerprint": "robo_loaders_plugin.storage.fingerprint",
    # robomimic: its HDF5, SequenceDataset's window rules, the dataset serving them
    "RobomimicHdf5": "robo_loaders_plugin.sources.robomimic_hdf5",
    "SequenceOptions": "robo_loaders_plugin.windows.robomimic",
    "SequenceWindows": "robo_loaders_plugin.windows.robomimic",
    "RobomimicSamples": "robo_loaders_plugin.robomimic.dataset",
    # LeRobot: its v3 episodes (tables and decoded videos), the dataset serving LeRobotDataset's items
    "LeRobotEpisodes": "robo_loaders_plugin.sources.lerobot_v3",
    "LeRobotV3": "robo_loaders_plugin.sources.lerobot_v3",
    "LeRobotSamples": "robo_loaders_plugin.lerobot.dataset",
    # batch-kind backends: the torchdata pipeline and its pass options
    "PipelineDataset": "robo_loaders_plugin.pipeline.batches",
    "PassOptions": "robo_loaders_plugin.pipeline.options",
}

# robomimic's and LeRobot's option settings, as users type them (for messages that name an option)
ROBOMIMIC_OPTIONS = "train.data_backend_kwargs"
LEROBOT_OPTIONS = "--dataset.backend_kwargs"
# a field whose steps are at least this many bytes is treated as camera frames (FieldInfo.frames)
FRAME_MIN_BYTES = 1024


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'robo_loaders_plugin.extend' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


# -- option declarations ----------------------------------------------------------------------------------------
def pass_options(shuffle_buffer: int | dict, cache_episodes: int = 64, items: str = "windows") -> dict[str, Option]:
    """The declarations of the options every pipeline-served (``batch`` kind) backend takes, the same way the
    built-in ones declare them: ``shuffle_buffer``, ``seed``, ``prefetch``, ``cache_episodes``, ``replacement``
    (read back with :meth:`PassOptions.of`).

    Args:
        shuffle_buffer: The default number of episodes open at once, or ``{framework: default}``.
        cache_episodes: The default number of episodes kept loaded.
        items: What a pass draws, for the help text ("windows", "frames").

    Returns:
        ``{name: Option}``, to merge into a :class:`BackendSpec`'s ``options``.
    """
    from robo_loaders_plugin.core.shared_options import pass_options as declare

    defaults = (
        shuffle_buffer if isinstance(shuffle_buffer, dict) else {"robomimic": shuffle_buffer, "lerobot": shuffle_buffer}
    )
    return declare(defaults, cache_episodes, items)


# -- robomimic ---------------------------------------------------------------------------------------------------
def robomimic_sequence(config, obs_keys, dataset_path=None) -> tuple[SequenceOptions, str]:
    """The ``SequenceDataset`` arguments robomimic's ``dataset_factory`` would pass, checked the way it checks them.

    Args:
        config: robomimic's config (``train.seq_length``, ``frame_stack``, pads, ``goal_mode``, ...).
        obs_keys: The observation keys to load.
        dataset_path: The HDF5 (default: ``config.train.data``).

    Returns:
        ``(SequenceOptions, path of the HDF5)``.

    Raises:
        RoboLoadersError: a setting robomimic's SequenceDataset would reject, or the plugin cannot reproduce.
    """
    from robo_loaders_plugin.robomimic.sequence import sequence_options

    return sequence_options(config, obs_keys, dataset_path)


def robomimic_demo_fields(source: RobomimicHdf5, f, demo: str, opts: SequenceOptions) -> dict:
    """One demo's fields exactly as ``SequenceDataset`` serves them (dtype rules of the cache modes included).

    Args:
        source: The HDF5 source.
        f: An open handle (``with source.open() as f``).
        demo: The demo's name (``demo_0``).
        opts: From :func:`robomimic_sequence`.

    Returns:
        ``{field: array}`` for every field of :meth:`SequenceOptions.field_names`, each ``num_samples`` long.

    Raises:
        SourceError: a key is missing (naming the demo and what it has), unreadable, or of another length.
    """
    from robo_loaders_plugin.robomimic.sequence import read_demo

    return read_demo(source, f, demo, opts, source.length(f, demo))


def robomimic_sequence_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None):
    """robomimic's own ``SequenceDataset``, built by robomimic's own (unpatched) ``dataset_factory``: for a backend
    that wraps the native dataset, and for parity tests.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (default: ``config.train.data``).

    Returns:
        The ``SequenceDataset``.
    """
    from robo_loaders_plugin.backends.native.robomimic import native_dataset

    return native_dataset(config, obs_keys, filter_by_attribute, dataset_path)


# -- LeRobot -----------------------------------------------------------------------------------------------------
def lerobot_episodes(native, decode_device: str = "cpu") -> LeRobotEpisodes:
    """The episodes a ``LeRobotDataset`` selects, read the way it reads them (tables, and videos decoded with
    torchcodec at its tolerance), after checking that robo-loaders reproduces its items exactly.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory built (the factory's first argument).
        decode_device: ``"cpu"`` (byte-identical to LeRobotDataset) or ``"cuda"`` (NVDEC).

    Returns:
        A :class:`LeRobotEpisodes`: ``runs`` (``(episode, start row, end row)`` in the dataset's row order),
        ``columns``, ``arrays`` (tabular columns), ``camera_keys``, ``source`` (its ``LeRobotV3``, with
        ``fingerprint()``, ``video_keys``, ``image_keys``, ``root``) and ``read(episode) -> (fields, camera keys)``.

    Raises:
        CompatError: not LeRobot 0.6.x.
        SourceError: a layout robo-loaders does not reproduce (another video backend, depth or language
            features), or rows that differ from what the ``LeRobotDataset`` object holds.
    """
    from robo_loaders_plugin.lerobot.dataset import check_rows_match, native_source
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes

    source, settings = native_source(native)
    episodes = LeRobotEpisodes(source, settings.tolerance_s, native.episodes, decode_device=decode_device)
    check_rows_match(native, episodes.columns, episodes.arrays["index"], episodes.arrays)
    return episodes


# -- storage -------------------------------------------------------------------------------------------------------
def build_or_reuse(
    *,
    kind: str,
    source,
    key: dict,
    build: Callable[[str], None],
    cache_dir: str | None = None,
    check: Callable[[str], bool] | None = None,
    description: str = "",
    option_prefix: str = "cache_dir",
) -> tuple[str, Any, bool]:
    """A directory in the cache, built once per source and options and reused while the source is unchanged.

    The build writes into a temporary directory renamed into place when complete (a killed build leaves nothing
    that looks finished); concurrent runs build once (the others wait); the entry is never pruned while the
    returned hold lives; a source edited since (size, mtime or content digest) gets a new entry and the old one is
    removed once unused.

    Args:
        kind: Names the backend and format (``"jpeg-frames"``): the entry's name starts with it.
        source: ``RobomimicHdf5``, ``lerobot_episodes(...).source``, or anything with ``fingerprint(recorded)``.
        key: The source's path and every option the content depends on.
        build: ``build(directory)`` writes the entry's files into an empty directory.
        cache_dir: The cache root (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
        check: ``check(path) -> bool`` whether a complete entry is intact (checksums); else it is rebuilt.
        description: For log lines.
        option_prefix: How the user set ``cache_dir`` (for errors), e.g. :data:`ROBOMIMIC_OPTIONS`.

    Returns:
        ``(path, hold, reused)``: pass ``hold`` to :class:`Serving` so the entry stays in use while the dataset
        lives.

    Raises:
        RoboLoadersError: the cache root cannot be created, or another process's build did not finish in time.
    """
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse as build_dir

    return build_dir(
        kind=kind,
        source=source,
        key=key,
        build=build,
        cache_dir=cache_dir,
        check=check,
        description=description,
        option_prefix=option_prefix,
    )


__all__ = sorted(
    [n for n in globals() if not n.startswith("_") and n not in ("annotations", "TYPE_CHECKING", "Any", "Callable")]
    + list(_LAZY)
)
