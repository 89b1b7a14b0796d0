"""The plugin author's module: every name a third-party backend needs, and the contracts it implements.

This module *is* the reference (as pytest's ``hookspec.py`` is for pytest plugins): every name below is stable,
typed and documented, and defined once in the package (``robo_loaders_plugin`` itself re-exports the few a *user*
needs, the same objects: ``list_backends``, ``get_backend`` and the errors); anything imported from elsewhere in
``robo_loaders_plugin`` is private and may change. docs/writing-a-backend.md walks through a complete backend
(``examples/jpeg_backend``) built from these names only, and ``robo_loaders_plugin.testing`` proves a backend serves
the native loader's samples.

The short way (the SDK): a backend that keeps frames in its own files writes a :class:`FrameStore` (``build``,
``open``, optionally ``footprint``, ``place``, ``verify``, ``key``, ``describe``, ``alternatives``) and registers
it with :func:`frame_backend`; the SDK does the rest for robomimic and LeRobot (where the store goes, RAM or disk,
and its footprint there, checked before any data is read and counted in a mixture's; the cache entry, its files'
sizes and ``verify`` checked on reuse; the episodes' fields and lengths recorded and checked; the serving summary;
pickling for DataLoader workers; a ``per_host`` ``cache_dir``; ``close()``). The built-in ``compressed_cache`` is
such a store. The long way (a backend that is not a frame store: another kind, its own datasets) uses the building
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
``PlaceRequest``                    what ``FrameStore.place`` is given: sizes, the machine, the batches in flight
``Placement``                       what it returns: in RAM or on disk, the footprint there, why it was spilled
``StoreRecord``                     (lazy) what the SDK recorded of a built store: names, lengths, ``info(field)``
``StoreFrames``                     (lazy) the checked, pickling wrapper of what ``FrameStore.open`` returns
``cache_dir_option``                the ``cache_dir`` declaration (``per_host``, checked writable)
``max_memory_option``               the ``max_memory`` declaration (the RAM a store that may live in RAM may take)
``cache_root``                      the cache root a backend writes under (created)
**registration and options**
``hookimpl``                        marks a plugin's ``robo_loaders_backends`` hook (the contracts, below)
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
``list_backends``                   the registered backends' names, the default (the framework's own loader) first
``get_backend``                     a registered backend's ``BackendSpec`` by name
``get_plugin_manager``              the process's pluggy ``PluginManager`` the backends are read from
**errors**
``RoboLoadersError``                base of every error the plugin raises
``UnknownBackendError``             a backend name nothing registered (the message names the close ones)
``BackendOptionError``              an option unknown or of a bad value
``SourceError``                     a source that cannot be served as it is
``StaleSourceError``                a source changed since data was made from it
``CompatError``                     an installed framework version the plugin does not reproduce
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
``build_or_reuse``                  (lazy) a cache directory built once per source and options, atomically, locked
``atomic_write_bytes``              write a file so that readers see the old or the new one, whole
``sha256_file``                     a file's SHA-256 (checksums for ``verify``)
``inner_bars_quiet``                whether a bar made now is inside a mixture's bar (pass it as ``disable``)
**frames, windows, datasets**
``FrameSource``                     (lazy) the one question a storage answers: field F at (episode, step) pairs
``FieldInfo``                       (lazy) how a frame source stores a field (dtype, step shape, frames)
``ClosedFrames``                    (lazy) what a closed dataset reads from (``FrameSource.closed``): refuses reads
``JoinedField``                     (lazy) one field of several sources read as one (``FrameSource.join_field``)
``FRAME_MIN_BYTES``                 (lazy) a field of at least this many bytes per step is camera frames
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
``PipelineDataset``                 (lazy) the torchdata pipeline of the built-in pipeline-served backends
``PassOptions``                     (lazy) the pipeline's pass options (``PassOptions.of``)
=================================== ===========================================================================

The contracts a backend implements (each is checked where it says):

- **The hook**, ``robo_loaders_backends() -> Iterable[BackendSpec]``, a ``@hookimpl`` function of a module the
  ``robo_loaders`` entry-point group names (``[project.entry-points.robo_loaders]`` ``my_backend =
  "my_package.plugin"``). It is called once per process, the first time a backend is looked up (``robo-loaders
  list``, robomimic's ``train.data_backend``, ``lerobot-train --dataset.backend``), and must be cheap: factories
  are ``"module:function"`` strings, so listing imports neither the backend's code nor torch nor a framework.
  Backend names are unique across plugins. A plugin that fails to import, whose hook raises or returns anything
  but ``BackendSpec`` objects, or that declares a built-in's name, is skipped with one line naming its entry point
  and distribution (``robo-loaders list``: an ``error:`` line, exit status 1); a name two plugins declare is
  refused for both.
- **The factories** (``BackendSpec.factories``), called exactly so by the adapters; one whose signature cannot
  take the call is refused when the backends are registered. robomimic:
  ``factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options)`` builds what robomimic's
  ``dataset_factory`` would (``config``: robomimic's config, ``train.*`` decides the windows; ``obs_keys``: the
  observation keys; ``filter_by_attribute``: a filter key of the HDF5's masks, ``None`` for every demo;
  ``dataset_path``: the HDF5, ``None`` for ``config.train.data``). LeRobot: ``factory(native, *, options)``, from
  the ``LeRobotDataset`` LeRobot's own ``make_dataset`` built (its episodes, ``delta_timestamps``, transforms and
  tolerance decide the items). ``options`` is the backend's resolved, typed options object. What a factory
  returns, by ``BackendSpec.kind``: ``sample``, a map-style ``torch.utils.data.Dataset`` in the framework's
  sample layout; ``indexed``, an :class:`IndexedDataset` (``collate(indices)``); ``batch``, a
  :class:`BatchDataset` (``batch_source(plan)``). The adapter checks it against the kind and names the backend
  otherwise.
- **A frame source** (:class:`FrameSource`), what the window rules and datasets read through: ``lengths``
  (steps per episode; every episode stores a field the same way); ``info(field)`` returns the field's
  :class:`FieldInfo` and ``take(field, episodes, steps, out)`` writes ``out[b, ...] =
  field[episodes[b]][steps[b, ...]]`` (both required); ``gather(field, episodes, steps, pool=None)`` (one array,
  new or from the pool; a device-resident source returns a tensor where its data lives),
  ``gather_fields(fields, episodes, steps, pool=None)`` (several fields at the same rows, the rows found once),
  ``gather_low_dim(fields, episodes, steps)`` (a mixture's start reading every component's low-dim rows; a source
  loading whole episodes may read them without their frames), ``low_dim_of_unit(fields, episode)`` (one episode's
  low-dim rows, whole: what a mixture keeps of it at the first batch reaching it when the class attribute
  ``low_dim_up_front`` is false, as for a source reading whole episode records, whose every record a start would
  otherwise read), ``close()`` (release files, maps and threads now), ``closed(where)`` (what a closed dataset
  reads from) and the
  classmethod ``join_field(parts)`` (one field of several sources of the class as one :class:`JoinedField`
  whose ``take(parts, episodes, steps, rows, out)`` reads a mixture's joined batch in one call; the default
  declines) have defaults.
  ``FieldInfo(dtype, shape, frames)``: the field's dtype, the shape of one step, and whether it is camera frames
  (stored compressed or decoded per step, copied row by row).

How a backend is put together by hand (the SDK and the built-in ones are built the same way):

1. **Registration**: a ``@hookimpl`` function ``robo_loaders_backends()`` returning :class:`BackendSpec` objects,
   exposed through the ``robo_loaders`` entry-point group; every option declared once as an :class:`Option`; each
   factory following its framework's protocol (the contracts, above), or refused by ``robo-loaders list``.
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

from typing import TYPE_CHECKING

from robo_loaders_plugin.core.errors import (  # noqa: F401
    BackendOptionError,
    CompatError,
    RoboLoadersError,
    SourceError,
    StaleSourceError,
    UnknownBackendError,
)
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
from robo_loaders_plugin.core.options import LEROBOT_OPTIONS, ROBOMIMIC_OPTIONS, Option, Options  # noqa: F401
from robo_loaders_plugin.core.progress import inner_bars_quiet  # noqa: F401  (a store's build bar in a mixture)
from robo_loaders_plugin.core.registry import get_backend, get_plugin_manager, list_backends  # noqa: F401
from robo_loaders_plugin.core.shared_options import pass_options  # noqa: F401
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
from robo_loaders_plugin.sdk import (  # noqa: F401
    FrameStore,
    Placement,
    PlaceRequest,
    StoreEpisodes,
    cache_dir_option,
    cache_root,
    frame_backend,
    max_memory_option,
)

if TYPE_CHECKING:  # the rest is imported on first use: listing backends must not import torch or a framework
    from robo_loaders_plugin.core.data_size import DataSize  # noqa: F401
    from robo_loaders_plugin.core.iteration import BatchDataset, BatchSource, IndexedDataset, SamplingPlan, Serving  # noqa: F401
    from robo_loaders_plugin.frames.base import ClosedFrames, FieldInfo, FrameSource, JoinedField  # noqa: F401
    from robo_loaders_plugin.lerobot.dataset import LeRobotSamples  # noqa: F401
    from robo_loaders_plugin.pipeline.batches import PipelineDataset  # noqa: F401
    from robo_loaders_plugin.pipeline.options import PassOptions  # noqa: F401
    from robo_loaders_plugin.robomimic.dataset import RobomimicSamples  # noqa: F401
    from robo_loaders_plugin.sdk.records import StoreRecord  # noqa: F401
    from robo_loaders_plugin.sdk.serve import StoreFrames  # noqa: F401
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3  # noqa: F401
    from robo_loaders_plugin.sources.robomimic_hdf5 import FRAME_MIN_BYTES, RobomimicHdf5  # noqa: F401
    from robo_loaders_plugin.storage.buffers import BufferPool  # noqa: F401
    from robo_loaders_plugin.storage.cached_dir import build_or_reuse  # noqa: F401
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
    "JoinedField": "robo_loaders_plugin.frames.base",
    "BufferPool": "robo_loaders_plugin.storage.buffers",
    # the SDK's checked, pickling wrapper of what a FrameStore opens, and what it recorded when the store was built
    "StoreFrames": "robo_loaders_plugin.sdk.serve",
    "StoreRecord": "robo_loaders_plugin.sdk.records",
    # a dataset's sizes from metadata, what a footprint is computed from
    "DataSize": "robo_loaders_plugin.core.data_size",
    # what a source's fingerprint() returns (build_or_reuse records it beside an entry and compares it on reuse)
    "Fingerprint": "robo_loaders_plugin.storage.fingerprint",
    # a directory in the cache, built once per source and options
    "build_or_reuse": "robo_loaders_plugin.storage.cached_dir",
    # robomimic: its HDF5 (and which of its fields are camera frames), SequenceDataset's window rules, the dataset
    "RobomimicHdf5": "robo_loaders_plugin.sources.robomimic_hdf5",
    "FRAME_MIN_BYTES": "robo_loaders_plugin.sources.robomimic_hdf5",
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


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'robo_loaders_plugin.extend' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


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
    from robo_loaders_plugin.lerobot.dataset import native_episodes

    return native_episodes(native, decode_device)


__all__ = sorted([n for n in globals() if n[0] != "_" and n not in ("annotations", "TYPE_CHECKING")] + [*_LAZY])
