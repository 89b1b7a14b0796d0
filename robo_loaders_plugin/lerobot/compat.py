"""Everything this plugin changes in LeRobot, or reads from its inside: LeRobot 0.6.x, in one module.

Patches (the mechanics are here; which adapter function each patch point gets is ``lerobot.patches``, applied by
the start-up import hook right after LeRobot's module code runs, or by ``lerobot.patches.apply_all`` when LeRobot
imports the plugin through ``--dataset.discover_packages_path=robo_loaders_plugin``; each is idempotent and keeps
the original in :data:`ORIGINALS`). This module imports nothing from the adapter: it is a leaf.

1. ``lerobot.configs.train.TrainPipelineConfig.dataset`` is re-typed to a ``DatasetConfig`` subclass with
   ``backend`` and ``backend_kwargs`` (``robo_loaders_plugin.lerobot.config``): draccus reads field types with
   ``typing.get_type_hints`` when it parses, so the flags parse, show in ``--help`` and are saved.
2. ``lerobot.datasets.factory.make_dataset`` and ``make_train_eval_datasets`` build LeRobot's dataset, then serve
   it through the configured backend.
3. ``lerobot.scripts.lerobot_train.make_train_eval_datasets``: the script from-imports the factory; rebound when
   the script was imported before the factory was patched.
4. ``lerobot.scripts.lerobot_train.cycle``: the loop's ``cycle(dataloader)`` yields what the backend's kind says
   (``core.iteration``); LeRobot's own ``cycle`` for its own datasets.
   ``lerobot.scripts.lerobot_train.train``: the command line is checked first (``--dataset.backend_kwargs`` must
   be a JSON object; LeRobot's parser would read it as YAML), then the script's own ``train`` runs; the plugin's
   errors that end it are one line (``sys.excepthook``, command line only).
   ``lerobot.configs.parser.wrap``: run as ``python -m lerobot.scripts.lerobot_train``, the script is
   ``__main__`` (no import of ``lerobot.scripts.lerobot_train`` for the hook to see, and its ``main()`` runs as its
   body ends), so the ``train`` it decorates patches the script at its first call (:func:`patch_parser`).

5. ``lerobot.datasets.dataset_reader.DatasetReader._check_cached_episodes_sufficient``, only inside
   :func:`tables_only` (a backend streaming a remote source): LeRobot builds its dataset object from a
   local copy of the tables while the videos stay remote, so missing local video files must not send it to the Hub.
6. ``lerobot.datasets.dataset_metadata.load_episodes`` and ``load_tasks``, ``lerobot.datasets.dataset_reader
   .load_nested_dataset`` and ``DatasetReader._check_cached_episodes_sufficient``, only inside
   :func:`tables_read_directly` (a mixture's components built): the same tables read with pyarrow instead of
   through the datasets cache (:class:`ParquetReads`), the local copy checked per video file.

Private reads (the settings of ``LeRobotDataset``'s private ``DatasetReader``, which decide what an item is):
``reader._tolerance_s``, ``reader._video_backend``, ``reader._image_transforms``, ``reader._return_uint8``,
``reader.delta_indices`` (:func:`reader_settings`); ``DatasetReader._query_videos`` (timed by the benchmark only);
accelerate's ``BatchSamplerShard`` attributes (``batch_sampler``, ``process_index``, ``num_processes``,
``split_batches``, ``even_batches``) on the DataLoader ``accelerator.prepare`` returns (:func:`rank_split`).

Hugging Face ``datasets`` internals (LeRobot holds its tables in a ``datasets.Dataset``; the backends compare what
they serve with it): ``Dataset._indices``, the selection ``select``/``shuffle`` leave over the Arrow table
(:func:`hf_column`, :func:`hf_selection_digest`), ``Dataset._fingerprint`` (:func:`hf_fingerprint`), and the Arrow
storage under it, ``Dataset.data`` and ``Dataset.cache_files`` (public, but the library's storage:
:func:`hf_column`, :func:`hf_cache_files`); a ``Dataset``'s own attributes (:data:`DATASET_ATTRIBUTES`: its
``_data``, ``_info``, ``_fingerprint``, ``_indexes``, ``_format_kwargs`` set on a copy by
:meth:`ParquetReads.dataset`, which copies only a ``Dataset`` with exactly these). No other module reads them
(``tests/test_compat_private_reads.py``);
``robo-loaders doctor`` checks them on a real ``datasets.Dataset`` (:func:`checks`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import sys
import typing

import numpy as np

from robo_loaders_plugin.core import checks as checks_module
from robo_loaders_plugin.core.checks import Check
from robo_loaders_plugin.core.errors import (
    CompatError,
    RoboLoadersError,
    install_one_line_excepthook,
    pass_through,
)

SUPPORTED_PREFIX = "0.6."
ORIGINALS: dict[str, object] = {}
_MARK = "__robo_loaders_patched__"
FACTORY_FUNCS = ("make_dataset", "make_train_eval_datasets")
READER_ATTRS = ("_tolerance_s", "_video_backend", "_image_transforms", "_return_uint8", "delta_indices")
PATCHED = (
    ("lerobot.datasets.factory", "make_dataset", ("cfg",)),
    ("lerobot.datasets.factory", "make_train_eval_datasets", ("cfg",)),
    ("lerobot.scripts.lerobot_train", "cycle", ("iterable",)),
    ("lerobot.scripts.lerobot_train", "save_checkpoint", ("checkpoint_dir", "step", "cfg")),
    ("lerobot.configs.parser", "wrap", ("config_path",)),
)


def installed_version() -> str | None:
    """The installed LeRobot version (``None`` when LeRobot is not installed)."""
    return checks_module.installed_version("lerobot")


def check_version() -> None:
    """Items are built the way LeRobot 0.6's DatasetReader builds them; 0.4.x differs (float32 video frames, no
    reader object, another training script), so refuse rather than risk other samples."""
    found = installed_version()
    if not (found or "").startswith(SUPPORTED_PREFIX):
        raise CompatError(
            f"robo-loaders backends for LeRobot support lerobot {SUPPORTED_PREFIX}x, found "
            f"{found or 'none'}; use --dataset.backend=native (see docs/lerobot.md, 'LeRobot 0.4.4'). "
            "'robo-loaders doctor' lists what differs"
        )


@dataclasses.dataclass(frozen=True)
class ReaderSettings:
    """What decides an item of a ``LeRobotDataset`` besides its data: its private DatasetReader's settings.

    Attributes:
        tolerance_s: How far a requested timestamp may be from a frame's (``reader._tolerance_s``).
        video_backend: The video decoder LeRobot uses (``reader._video_backend``).
        image_transforms: The transforms applied to camera frames (``reader._image_transforms``).
        return_uint8: Whether camera frames are returned as uint8 (``reader._return_uint8``).
        delta_indices: ``{key: frame offsets}`` from ``delta_timestamps``, or ``None``.
    """

    tolerance_s: float
    video_backend: str
    image_transforms: object
    return_uint8: bool
    delta_indices: dict | None


def reader_settings(native) -> ReaderSettings:
    """What decides an item of ``native`` besides its data: read from its private DatasetReader.

    Args:
        native: A ``LeRobotDataset`` (0.6.x).

    Returns:
        The :class:`ReaderSettings`.

    Raises:
        CompatError: the reader lacks one of the attributes (another LeRobot version).
    """
    reader = native.reader
    try:
        return ReaderSettings(
            float(reader._tolerance_s),
            reader._video_backend,
            reader._image_transforms,
            bool(reader._return_uint8),
            reader.delta_indices,
        )
    except AttributeError as exc:
        raise CompatError(
            f"LeRobotDataset's reader has no attribute {exc.name!r} in this LeRobot version; "
            "robo-loaders cannot reproduce its items (use --dataset.backend=native)"
        ) from None


def set_windows(native, delta_timestamps: dict | None) -> None:
    """Give a built ``LeRobotDataset`` other ``delta_timestamps`` windows, as if LeRobot's factory had built it with
    them: checked against its rate by LeRobot's own check, then its reader's ``delta_indices`` (a private write of
    LeRobot 0.6's ``DatasetReader``) and the dataset's ``delta_timestamps`` (a reader created again takes them).

    Why: LeRobot's factory gives a key a window by its name (``action``, ``next.reward``, ``observation.*``); a
    mixture's component whose key is renamed onto such a name (``"rename": {"actions": "action"}``) was built
    without the window the policy gives that name, and served a single step where the others served a chunk (a
    reviewer's reproduction).

    Args:
        native: The ``LeRobotDataset``.
        delta_timestamps: ``{key: offsets in seconds}`` by its own key names, or ``None``.

    Raises:
        CompatError: the reader lacks ``delta_indices`` (another LeRobot version).
        ValueError: LeRobot's check refuses an offset (not a multiple of 1/fps within its tolerance).
    """
    from lerobot.datasets.feature_utils import check_delta_timestamps, get_delta_indices

    reader = native.reader
    if not hasattr(reader, "delta_indices"):
        raise CompatError(
            "LeRobotDataset's reader has no delta_indices in this LeRobot version; a mixture component's windows "
            "cannot follow its renamed keys (use LeRobot 0.6.x)"
        )
    fps = native.meta.fps
    if delta_timestamps:
        check_delta_timestamps(delta_timestamps, fps, float(getattr(reader, "_tolerance_s", 1e-4)))
    native.delta_timestamps = delta_timestamps or None
    reader.delta_indices = get_delta_indices(delta_timestamps, fps) if delta_timestamps else None


def policy_windows(trained_cfg, names, fps: float) -> dict | None:
    """The ``delta_timestamps`` LeRobot's factory gives a dataset whose features are ``names`` (LeRobot's own
    ``resolve_delta_timestamps``: it reads the features' names and the rate only).

    Args:
        trained_cfg: What is trained (lerobot-train's ``cfg.trainable_config``: the policy or the reward model).
        names: The feature names.
        fps: The rate.

    Returns:
        ``{name: offsets in seconds}``, or ``None`` when no name has a window.
    """
    import types

    from lerobot.datasets.factory import resolve_delta_timestamps

    return resolve_delta_timestamps(trained_cfg, types.SimpleNamespace(features=dict.fromkeys(names), fps=fps))


def retype_dataset_field(cls, new_type, expected) -> bool:
    """Point ``cls.dataset`` (TrainPipelineConfig) at ``new_type``. Idempotent.

    Args:
        cls: ``TrainPipelineConfig``.
        new_type: The ``DatasetConfig`` subclass adding the plugin's flags.
        expected: The type the field must have before (``DatasetConfig``): anything else was re-typed by someone else.

    Returns:
        Whether it re-typed the field (``False``: it already was ``new_type`` or a subclass).

    Raises:
        RuntimeError: another plugin already re-typed it.
    """
    current = typing.get_type_hints(cls).get("dataset")
    if isinstance(current, type) and issubclass(current, new_type):
        return False
    if current is not expected:
        raise RuntimeError(
            f"{cls.__qualname__}.dataset is already re-typed to {current!r} by another plugin; "
            "robo-loaders cannot add --dataset.backend"
        )
    cls.__annotations__["dataset"] = new_type
    cls.__dataclass_fields__["dataset"].type = new_type
    return True


def original(name: str):
    """LeRobot's own dataset factory ``name``, unpatched (whether or not the patches are applied).

    Args:
        name: ``make_dataset`` or ``make_train_eval_datasets`` (any name :data:`ORIGINALS` holds, else an attribute of
            ``lerobot.datasets.factory``).
    """
    if name in ORIGINALS:
        return ORIGINALS[name]
    import lerobot.datasets.factory as factory

    return getattr(factory, name)


def patch_train_config(module, new_type) -> None:
    """Re-type ``TrainPipelineConfig.dataset`` (``lerobot.configs.train``) to ``new_type``.

    Args:
        module: ``lerobot.configs.train``, freshly imported.
        new_type: A ``DatasetConfig`` subclass adding the plugin's flags.

    Raises:
        CompatError: the installed LeRobot is not 0.6.x.
        RuntimeError: another plugin already re-typed the field.
    """
    check_version()
    from lerobot.configs.default import DatasetConfig

    retype_dataset_field(module.TrainPipelineConfig, new_type, DatasetConfig)


def patch_factory(module, replacements) -> None:
    """Replace ``make_dataset`` and ``make_train_eval_datasets`` of ``lerobot.datasets.factory``.

    Args:
        module: ``lerobot.datasets.factory``, freshly imported.
        replacements: ``{name: function}`` for the names in :data:`FACTORY_FUNCS`.
    """
    check_version()
    for name in FACTORY_FUNCS:
        current = getattr(module, name, None)
        if current is None or getattr(current, _MARK, False):
            continue
        ORIGINALS[name] = current
        new = replacements[name]

        @pass_through
        @functools.wraps(current)
        def wrapper(*args, __new=new, **kwargs):
            return __new(*args, **kwargs)

        setattr(wrapper, _MARK, True)
        setattr(module, name, wrapper)
    _rebind_script()


def patch_train_script(module, cycle, check_command_line, after_checkpoint=None) -> None:
    """Replace the training script's ``cycle`` and check its command line before its ``train`` parses it.

    Run from the command line, the plugin's errors that end the run (a refusal once the dataset is built: an
    unknown ``delta_timestamps`` key, a footprint that does not fit) are printed as one line, exit status 1, not
    after a traceback (``core.errors.install_one_line_excepthook``); any other error keeps its traceback, without
    this wrapper's frame (``core.errors.pass_through``): LeRobot's own errors read as LeRobot's.

    Args:
        module: ``lerobot.scripts.lerobot_train``, freshly imported.
        cycle: Replaces ``cycle(dataloader)``.
        check_command_line: Called with ``sys.argv[1:]`` when ``train()`` is called without a config (the
            command-line entry point), before LeRobot's parser reads it; returns the command line the parser reads.
        after_checkpoint: Called as ``after_checkpoint(checkpoint_dir, cfg)`` after the script's
            ``save_checkpoint`` wrote a checkpoint (``None``: not patched).
    """
    check_version()
    _rebind_script(module)
    saver = getattr(module, "save_checkpoint", None)
    if after_checkpoint is not None and saver is not None and not getattr(saver, _MARK, False):
        ORIGINALS["save_checkpoint"] = saver

        @functools.wraps(saver)
        def save_checkpoint(checkpoint_dir, *args, **kwargs):
            saver(checkpoint_dir, *args, **kwargs)
            cfg = kwargs.get("cfg", args[1] if len(args) > 1 else None)
            after_checkpoint(checkpoint_dir, cfg)

        setattr(save_checkpoint, _MARK, True)
        module.save_checkpoint = save_checkpoint
    current = getattr(module, "cycle", None)
    if current is not None and not getattr(current, _MARK, False):
        ORIGINALS["cycle"] = current

        @functools.wraps(current)
        def patched_cycle(dataloader):
            return cycle(dataloader)

        setattr(patched_cycle, _MARK, True)
        module.cycle = patched_cycle
    train = getattr(module, "train", None)
    if train is not None and not getattr(train, _MARK, False):
        ORIGINALS["train"] = train

        @pass_through  # an error LeRobot's train raises prints as LeRobot's, without this frame
        @functools.wraps(train)
        def checked_train(*args, **kwargs):
            if not args and "cfg" not in kwargs:  # the command line: LeRobot's parser.wrap reads sys.argv
                sys.argv[1:] = check_command_line(sys.argv[1:])
                install_one_line_excepthook()
            return train(*args, **kwargs)

        setattr(checked_train, _MARK, True)
        module.train = checked_train


TRAIN_SCRIPT = "lerobot.scripts.lerobot_train"


def train_script():
    """LeRobot's training script's module, imported (``lerobot-train``) or run as ``python -m`` (``__main__``,
    whose spec names the script); ``None`` when neither runs in this process."""
    script = sys.modules.get(TRAIN_SCRIPT)
    if script is not None:
        return script
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return main if spec is not None and spec.name == TRAIN_SCRIPT else None


def patch_parser(module, patch_script) -> None:
    """Wrap ``lerobot.configs.parser.wrap`` so that the training script run as ``python -m`` is patched too.

    Why: ``python -m lerobot.scripts.lerobot_train`` (the form LeRobot's docs print) runs the script as
    ``__main__``: the import hook never sees it, and its ``main()`` runs as its body ends. Only the dataset factory
    was patched, so the log named the backend while the loop's ``cycle`` was LeRobot's: a mixture's weights were
    ignored, a pipeline backend's batches not served, with nothing said (a reviewer's reproduction). The ``train`` the
    script decorates with ``parser.wrap()`` is the first point where its module is complete: at its first call
    the script is patched (``patch_script``) and its patched ``train`` runs instead.

    Args:
        module: ``lerobot.configs.parser``, freshly imported.
        patch_script: Called with the script's module (:func:`patch_train_script` with the adapter's functions).
    """
    wrap = getattr(module, "wrap", None)
    if wrap is None or getattr(wrap, _MARK, False):
        return
    ORIGINALS["wrap"] = wrap

    @functools.wraps(wrap)
    def patched_wrap(*args, **kwargs):
        decorator = wrap(*args, **kwargs)

        def decorate(fn):
            wrapped = decorator(fn)
            if getattr(fn, "__module__", None) != "__main__" or getattr(fn, "__name__", None) != "train":
                return wrapped

            @pass_through
            @functools.wraps(wrapped)
            def train_of_main(*a, **kw):
                script = train_script()
                if script is not None and getattr(script, "train", None) is train_of_main:
                    patch_script(script)  # script.train is now the patched one, handing on to this function
                    return script.train(*a, **kw)
                return wrapped(*a, **kw)

            return train_of_main

        return decorate

    setattr(patched_wrap, _MARK, True)
    module.wrap = patched_wrap


def fresh_video_decoders() -> None:
    """Give this process a video decoder cache of its own (LeRobot's module-level ``VideoDecoderCache``).

    Why: a forked worker inherits the training process's open decoders, each reading its file through a Python file
    object whose descriptor, and so whose offset, the processes share: two processes seeking and reading one file
    move the offset under each other and decode the wrong bytes. The inherited entries are dropped here (their
    handles closed in this process only), so that each worker opens its own, as in a fresh process.
    """
    from lerobot.datasets import video_utils

    video_utils._default_decoder_cache = video_utils.VideoDecoderCache()


def native_cycle(dataloader):
    """LeRobot's own ``cycle`` (the script's original, or ``lerobot.utils.utils.cycle``).

    Args:
        dataloader: What to cycle over.

    Returns:
        LeRobot's endless iterator over ``dataloader``.
    """
    if "cycle" in ORIGINALS:
        return ORIGINALS["cycle"](dataloader)
    from lerobot.utils.utils import cycle

    return cycle(dataloader)


def _rebind_script(module=None) -> None:
    module = module or train_script()
    factory = sys.modules.get("lerobot.datasets.factory")
    if module is None or factory is None:
        return
    for name in FACTORY_FUNCS:
        if hasattr(module, name) and not getattr(getattr(module, name), _MARK, False):
            setattr(module, name, getattr(factory, name))


@contextlib.contextmanager
def tables_only():
    """Let LeRobot build a dataset whose video files are not local (they are streamed from elsewhere): while this
    is active, its "is the local copy complete" check looks at the tables only (LeRobot 0.6.1 checks the episodes
    in the loaded table, then that every video file exists locally)."""
    from lerobot.datasets.dataset_reader import DatasetReader

    orig = DatasetReader._check_cached_episodes_sufficient

    def tables_sufficient(self) -> bool:
        return _requested_episodes_held(self) is not None

    DatasetReader._check_cached_episodes_sufficient = tables_sufficient
    try:
        yield
    finally:
        DatasetReader._check_cached_episodes_sufficient = orig


# a data directory read into memory by tables_read_directly() at most this big on disk; a bigger one is read by
# LeRobot itself (memory-mapped from its datasets cache: a big table is not held in RAM per component)
DIRECT_DATA_BYTES = 64 << 20


def _file_key(path) -> tuple:
    """A file as it is now: its name, size, mtime and inode (an edit or a replacement changes one of them)."""
    import os

    st = os.stat(path)
    return (os.fspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


# a datasets.Dataset's attributes as datasets 4 sets them (``ParquetReads.dataset`` copies one only when these are
# all it has: the table, fingerprint, info, search indexes and format its own, the split and indices shared)
DATASET_ATTRIBUTES = frozenset(
    {
        "_data",
        "_fingerprint",
        "_format_columns",
        "_format_kwargs",
        "_format_type",
        "_indexes",
        "_indices",
        "_info",
        "_output_all_columns",
        "_split",
    }
)


class ParquetReads:
    """Parquet files read with pyarrow, each file once while its name, size, mtime and inode stay the same.

    Why: lerobot-train's factory builds a component's metadata, then its dataset builds the same metadata again,
    so ``meta/episodes`` and ``meta/tasks.parquet`` are read twice per component of a mixture; the second read is
    the first's table (Arrow tables are immutable), unless the file changed between them. Held for the duration of
    one :func:`tables_read_directly` block, never across runs: when the block ends it is closed (:meth:`close`), so
    a backend's source still pointing at it neither keeps its tables in memory for the run nor adds to them.
    """

    def __init__(self, kept=None):
        self._tables: dict = {}
        self._open = True
        self._kept = kept  # mixtures.kept_tables.KeptTables: checked copies kept across starts (None: none)

    def close(self) -> None:
        """Let go of every table read; later reads read the file and keep nothing, :meth:`held` finds nothing."""
        self._open = False
        self._tables.clear()

    def _keep(self, key, value):
        if self._open:
            self._tables[key] = value
        return value

    def read(self, path, columns=None):
        """The table of ``path`` (only ``columns`` when given), from an earlier read of the same file as it is now.

        Args:
            path: A parquet file.
            columns: Column names to read (``None``: all).

        Returns:
            A ``pyarrow.Table``.
        """

        import pyarrow.parquet as pq

        key = _file_key(path) + (None if columns is None else tuple(columns),)
        table = self._tables.get(key)
        if table is None:
            if self._kept is None:
                table = pq.ParquetFile(path).read(columns=columns)
            else:
                what = "all" if columns is None else json.dumps(list(columns))
                table = self._kept.read(path, what, lambda: pq.ParquetFile(path).read(columns=columns))
            table = self._keep(key, table)
        return table

    def held(self, path, columns=None):
        """The table of ``path`` (``columns``) when this block read it and the file is as it was then, else
        ``None`` (nothing is read: a reader that needs fewer columns reads them itself).

        Args:
            path: A parquet file.
            columns: The column names it was read with (``None``: all).

        Returns:
            A ``pyarrow.Table`` or ``None``.
        """
        return self._tables.get(_file_key(path) + (None if columns is None else tuple(columns),))

    def read_except(self, path, prefix: str):
        """The table of ``path`` without the columns whose names start with ``prefix`` (``meta/episodes`` without
        its ``stats/`` columns), its schema and its columns read through one open of the file, kept as
        :meth:`column_names` and :meth:`read` keep them.

        Why one open: opening a parquet file parses its footer (~0.9 ms for an episodes file's hundred ``stats/``
        columns), and reading the names, then the columns, opened it twice, for each component of a mixture.

        Args:
            path: A parquet file.
            prefix: The names' start to leave out.

        Returns:
            A ``pyarrow.Table``.
        """
        import pyarrow.parquet as pq

        key = _file_key(path)
        names = self._tables.get(key + ("schema",))
        if names is not None:
            return self.read(path, [n for n in names if not n.startswith(prefix)])
        held = self._tables.get(key + ("except", prefix))
        if held is not None:
            return held

        def from_parquet():
            f = pq.ParquetFile(path)
            names = self._keep(key + ("schema",), f.schema_arrow.names)
            columns = [n for n in names if not n.startswith(prefix)]
            table = self._tables.get(key + (tuple(columns),))
            return table if table is not None else f.read(columns=columns)

        # a kept copy (self._kept) is found without opening the file: its schema's names are then not read
        table = from_parquet() if self._kept is None else self._kept.read(path, f"except:{prefix}", from_parquet)
        self._keep(key + (tuple(table.column_names),), table)  # as read(path, columns) finds it
        return self._keep(key + ("except", prefix), table)

    def column_names(self, path) -> list[str]:
        """The column names of ``path``, from an earlier read of its schema while the file is as it is now.

        Args:
            path: A parquet file.

        Returns:
            The names, in the file's order.
        """
        import pyarrow.parquet as pq

        key = _file_key(path) + ("schema",)
        names = self._tables.get(key)
        if names is None:
            names = self._keep(key, pq.read_schema(path).names)
        return list(names)

    def episodes(self, root):
        """``meta/episodes`` as LeRobot's ``load_episodes`` gives it (a ``datasets.Dataset`` of every column but the
        ``stats/`` ones, the files concatenated in path order), read with pyarrow into memory.

        Why: LeRobot reads the files through ``datasets.Dataset.from_parquet``, which builds an Arrow copy in its cache
        and derives the features of every ``stats/`` column before dropping them: ~0.15 s a component, three times
        per component of a mixture (the index's first read, the factory's metadata, the dataset's), against a few ms
        here. The values are the files' own (no cache keyed by mtimes between them and the run).

        Args:
            root: The dataset's local root.

        Returns:
            The table, held in memory (it is small: the stats columns are left out).

        Raises:
            FileNotFoundError: no ``meta/episodes/*/*.parquet`` under ``root`` (as LeRobot's reader).
        """
        from pathlib import Path

        import pyarrow as pa

        paths = sorted((Path(root) / "meta" / "episodes").glob("*/*.parquet"))
        if not paths:
            raise FileNotFoundError(
                f"Provided directory does not contain any parquet file: {Path(root) / 'meta/episodes'}"
            )
        # the files as they are before they are read: one replaced during the reads is then not found under its new
        # stat holding the old table (the next caller reads it again)
        stats = list(map(_file_key, paths))
        first = self.read_except(paths[0], "stats/")
        columns = first.column_names
        # the factory's metadata and the dataset's get one Dataset while the files are unchanged (building one was
        # ~3 ms a component; LeRobot replaces ``meta.episodes`` when it writes, never changes it in place)
        key = ("episodes", *stats, *columns)
        held = self._tables.get(key)
        if held is None:
            table = pa.concat_tables([first] + [self.read(path, columns) for path in paths[1:]])
            held = self._keep(key, self.dataset(table))
        return held

    def tasks(self, root):
        """``meta/tasks.parquet`` as LeRobot's ``load_tasks`` gives it (a ``pandas.DataFrame`` indexed by task, a
        fresh frame each call: LeRobot may add tasks to it).

        Why a copy of the first frame: a table's conversion to pandas (its schema's pandas metadata) was ~1 ms,
        twice per component of a mixture; a deep copy of a frame of a few tasks is a fraction of that.

        Args:
            root: The dataset's local root.

        Returns:
            The frame.
        """
        from pathlib import Path

        from lerobot.datasets.utils import DEFAULT_TASKS_PATH

        path = Path(root) / DEFAULT_TASKS_PATH
        key = ("tasks", _file_key(path))
        held = self._tables.get(key)
        if held is None:
            held = self.read(path).to_pandas()
            held.index.name = "task"
            self._keep(key, held)
        return held.copy(deep=True)

    def data(self, pq_dir, features=None, episodes=None, *, original):
        """LeRobot's ``load_nested_dataset`` (``data/*/*.parquet`` as one ``datasets.Dataset``, cast to
        ``features``, only the rows of ``episodes``), read with pyarrow into memory when the files are small
        (:data:`DIRECT_DATA_BYTES`); bigger ones, or files pyarrow cannot put in one table of ``features``' schema,
        by ``original`` (LeRobot's read through its datasets cache, memory-mapped).

        Args:
            pq_dir: The dataset's ``data`` directory.
            features: The ``datasets.Features`` to cast to (``None``: the files' own).
            episodes: Episode indices to keep (``None``: all).
            original: LeRobot's ``load_nested_dataset``.

        Returns:
            The ``datasets.Dataset``.

        Raises:
            FileNotFoundError: no ``*/*.parquet`` under ``pq_dir`` (as LeRobot's reader).
        """
        import os
        from pathlib import Path

        import pyarrow as pa
        import pyarrow.compute as pc

        paths = sorted(Path(pq_dir).glob("*/*.parquet"))
        if not paths:
            raise FileNotFoundError(f"Provided directory does not contain any parquet file: {pq_dir}")
        if sum(os.path.getsize(p) for p in paths) > DIRECT_DATA_BYTES:
            return original(pq_dir, features=features, episodes=episodes)
        try:
            table = pa.concat_tables([self.read(p) for p in paths])
            if episodes is not None:
                wanted = pa.array(list(episodes), type=table.schema.field("episode_index").type)
                table = table.filter(pc.is_in(table["episode_index"], value_set=wanted))
            if features is not None:
                table = table.cast(features.arrow_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError, ValueError):
            return original(pq_dir, features=features, episodes=episodes)  # LeRobot's own read, and its error
        return self.dataset(table, features)

    def dataset(self, table, features=None):
        """``datasets.Dataset(table, info=DatasetInfo(features=features))`` held in memory, with a fingerprint of its
        own; built by datasets' constructor once per schema in this block, then as a copy of that first one's
        attributes with this table.

        Why: the constructor derives the features from the schema, checks them against ``features`` and writes them
        into the schema's metadata, ~1.5 ms a table whatever its rows, twice per component (its episodes, its data):
        ~1.2 s of a 400-component mixture's start, where the components share a few schemas. The copy is taken
        only where the constructor kept the table's schema as given (no cast), ``features`` equal the first's and
        its attributes are the ones this copy sets or shares (:data:`DATASET_ATTRIBUTES`: another datasets release
        with state of its own per object is built by its constructor);
        it has its own table, info, fingerprint, search indexes and format (a transform set on one is not on
        another). Why a fingerprint of its own: datasets would hash the whole table with
        dill (~70 ms a component), and a table held in memory has no cache files for one to find again.

        Args:
            table: A ``pyarrow.Table`` (cast to ``features``' schema when they are given).
            features: The ``datasets.Features`` (``None``: derived from the schema, as datasets does).

        Returns:
            The ``datasets.Dataset``.
        """
        import copy
        import uuid

        import datasets
        from datasets.table import InMemoryTable

        schema = table.schema
        key = ("dataset", schema, tuple(sorted((schema.metadata or {}).items())), features is None)
        first = self._tables.get(key)
        copyable = first is not None and set(vars(first)) == DATASET_ATTRIBUTES
        if copyable and (features is None or first.info.features == features):
            made = copy.copy(first)
            made._info = copy.copy(first._info)  # its own info; the features object shared (``features`` copies it)
            made._data = InMemoryTable(table.replace_schema_metadata(first._data.schema.metadata))
            made._fingerprint = uuid.uuid4().hex
            made._indexes, made._format_kwargs = {}, dict(first._format_kwargs)  # its own mutable attributes
            return made
        info = datasets.DatasetInfo(features=features) if features is not None else None
        made = datasets.Dataset(table, info=info, fingerprint=uuid.uuid4().hex)
        if made._data.schema.equals(schema, check_metadata=False) and made._indices is None:
            self._keep(key, copy.copy(made))  # its attributes as built, before a caller sets a transform on it
        return made


def _requested_episodes_held(reader) -> set[int] | None:
    """The episodes LeRobot's ``DatasetReader`` requests, when its loaded table holds every one of them (the first
    half of LeRobot's ``_check_cached_episodes_sufficient``, shared by :func:`tables_only` and
    :func:`cached_episodes_sufficient`); ``None`` when the table is empty or lacks one."""
    import pyarrow.compute as pc

    hf = reader.hf_dataset
    if hf is None or len(hf) == 0:
        return None
    available = set(pc.unique(hf_column(hf, "episode_index")).to_pylist())
    meta = reader._meta
    requested = set(range(meta.total_episodes)) if reader.episodes is None else {int(e) for e in reader.episodes}
    return requested if requested.issubset(available) else None


def cached_episodes_sufficient(reader, original) -> bool:
    """LeRobot's ``DatasetReader._check_cached_episodes_sufficient`` (the local copy holds every requested episode
    and each one's video files), with each distinct video file checked once instead of one table row read per
    episode and camera (~14 ms a small component).

    Args:
        reader: LeRobot's ``DatasetReader``.
        original: LeRobot's own method (used where its answer is an error: an episode past the episode table).

    Returns:
        Whether the local copy is sufficient.
    """
    requested = _requested_episodes_held(reader)
    if requested is None:
        return False
    meta = reader._meta
    keys = list(meta.video_keys)
    if not keys or not requested:
        return True
    table = meta.episodes
    if table is None or max(requested) >= len(table):
        return original(reader)
    rows = sorted(requested)
    files = set()
    for key in keys:
        chunks = hf_column(table, f"videos/{key}/chunk_index").take(rows).to_pylist()
        numbers = hf_column(table, f"videos/{key}/file_index").take(rows).to_pylist()
        files.update((key, c, f) for c, f in zip(chunks, numbers))
    root = reader.root
    return all(
        (root / meta.video_path.format(video_key=key, chunk_index=c, file_index=f)).exists() for key, c, f in files
    )


@contextlib.contextmanager
def tables_read_directly(kept=None):
    """While active, LeRobot reads a dataset's tables with pyarrow (patch 6): ``meta/episodes``
    (:meth:`ParquetReads.episodes`), ``meta/tasks.parquet`` (:meth:`ParquetReads.tasks`), each file once while it
    is unchanged, and a small ``data/`` (:meth:`ParquetReads.data`); the local copy's completeness checked per
    video file (:func:`cached_episodes_sufficient`).

    Why: a mixture builds every component's metadata (twice: the factory's, the dataset's) and its dataset object;
    at 400 components LeRobot's own reads through its datasets cache were most of the start-up (issue 44 item 3).

    Args:
        kept: A ``mixtures.kept_tables.KeptTables``: each parquet file read is then served from its checked Arrow
            copy kept by an earlier start while the file is unchanged (``None``: every file read from parquet).

    Yields:
        The block's :class:`ParquetReads` (its reads end with the block).
    """
    from lerobot.datasets import dataset_metadata, dataset_reader

    reads = ParquetReads(kept)
    saved = {
        (dataset_metadata, "load_episodes"): reads.episodes,
        (dataset_metadata, "load_tasks"): reads.tasks,
    }
    nested = getattr(dataset_reader, "load_nested_dataset", None)
    if callable(nested):
        saved[(dataset_reader, "load_nested_dataset")] = functools.partial(reads.data, original=nested)
    check = getattr(getattr(dataset_reader, "DatasetReader", None), "_check_cached_episodes_sufficient", None)
    if callable(check):
        saved[(dataset_reader.DatasetReader, "_check_cached_episodes_sufficient")] = functools.partialmethod(
            cached_episodes_sufficient, check
        )
    # another layout of LeRobot's reader: its own read where a patch point is gone (``robo-loaders doctor`` says so)
    present = {(owner, name): getattr(owner, name) for owner, name in saved if callable(getattr(owner, name, None))}
    try:
        _ACTIVE_READS.append(reads)
        for (owner, name), value in saved.items():
            if (owner, name) in present:
                setattr(owner, name, value)
        yield reads
    finally:
        for (owner, name), value in present.items():
            setattr(owner, name, value)
        if reads in _ACTIVE_READS:
            _ACTIVE_READS.remove(reads)
        reads.close()  # the sources built in the block keep a reference: they must not keep the tables


_ACTIVE_READS: list[ParquetReads] = []  # the tables_read_directly() blocks open in this process, innermost last


def active_reads() -> ParquetReads | None:
    """The innermost :func:`tables_read_directly` block's reads (``None`` outside one): what a backend's source of
    a dataset built in the block reads its tables through (``sources.lerobot_v3.LeRobotV3(table_reads=...)``), so a
    file LeRobot read moments ago and unchanged since is not read again.

    Returns:
        The :class:`ParquetReads`, or ``None``.
    """
    return _ACTIVE_READS[-1] if _ACTIVE_READS else None


@dataclasses.dataclass(frozen=True)
class RankSplit:
    """How accelerate split lerobot-train's DataLoader across processes: the batch sampler lerobot-train built
    (its EpisodeAwareSampler inside) and this process's rank among ``world_size``."""

    batch_sampler: object
    rank: int
    world_size: int


def rank_split(dataloader) -> RankSplit:
    """Undo accelerate's wrapping to find what lerobot-train asked for.

    With several processes ``accelerator.prepare`` replaces the DataLoader's batch sampler by a
    ``BatchSamplerShard`` serving batch ``i`` of the pass to rank ``i % world_size`` (``even_batches``: the last
    batches completed from the start of the pass). A backend ordering its own passes reads the sampler inside and
    splits the pass itself (``core.ranks.rank_share``), with the same batch count per rank; an ``indexed``
    backend iterates the shard as the DataLoader would.

    Args:
        dataloader: The DataLoader lerobot-train iterates (prepared by accelerate or not).

    Returns:
        The :class:`RankSplit`; rank 0 of 1 when accelerate did not split it.

    Raises:
        CompatError: accelerate splits with ``split_batches=True`` or ``even_batches=False``.
    """
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    try:
        from accelerate.data_loader import BatchSamplerShard
    except ImportError:  # accelerate comes with lerobot[training]; without it nothing was split
        BatchSamplerShard = ()
    if not isinstance(batch_sampler, BatchSamplerShard):
        return RankSplit(batch_sampler, 0, 1)
    if batch_sampler.split_batches or not batch_sampler.even_batches:
        raise CompatError(
            "accelerate splits lerobot-train's batches with split_batches=True or even_batches=False; "
            "robo-loaders backends that order their own passes support accelerate's defaults only "
            "(split_batches=False, even_batches=True): use --dataset.backend=native or those defaults"
        )
    return RankSplit(batch_sampler.batch_sampler, int(batch_sampler.process_index), int(batch_sampler.num_processes))


_SAMPLER_ATTRS = ("_starts", "_cum_lengths", "_absolute_to_relative")


def sampler_indices(sampler) -> np.ndarray:
    """``EpisodeAwareSampler.indices`` (the frames of a pass, unshuffled) as an int64 array, computed with numpy
    from the sampler's episode table: the public property calls a Python method per frame (~7 s for a million
    frames, at every start of a batch-kind backend). Private reads of LeRobot 0.6's sampler
    (``_starts``, ``_cum_lengths``, ``_absolute_to_relative``), exactly what its ``_frame_index`` computes; any
    other sampler, or another version, goes through the public property.

    Args:
        sampler: lerobot-train's ``EpisodeAwareSampler`` (or any sampler with an ``indices`` property).

    Returns:
        The frame indices of a pass, in the sampler's unshuffled order.
    """
    if not (installed_version() or "").startswith(SUPPORTED_PREFIX) or not all(
        hasattr(sampler, a) for a in _SAMPLER_ATTRS
    ):
        return np.asarray(sampler.indices, dtype=np.int64)
    starts = np.asarray(sampler._starts, dtype=np.int64)
    cum = np.asarray(sampler._cum_lengths, dtype=np.int64)
    total = int(cum[-1]) if len(cum) else 0
    position = np.arange(total, dtype=np.int64)
    episode = np.searchsorted(cum, position, side="right")
    absolute = starts[episode] + position - np.concatenate([[0], cum[:-1]])[episode]
    mapping = sampler._absolute_to_relative
    if mapping is None:
        return absolute
    keys = np.fromiter(mapping.keys(), dtype=np.int64, count=len(mapping))
    values = np.fromiter(mapping.values(), dtype=np.int64, count=len(mapping))
    order = np.argsort(keys)
    at = np.searchsorted(keys[order], absolute)
    if np.any(at >= len(keys)) or np.any(keys[order][np.minimum(at, len(keys) - 1)] != absolute):
        return np.asarray(sampler.indices, dtype=np.int64)  # a frame the mapping lacks: LeRobot's own error
    return values[order][at]


_EPOCH_ATTRS = ("_epoch", "_start_index", "_num_frames", "shuffle", "_epoch_generator")


def episode_sampler(native, drop_n_last_frames: int, shuffle: bool = False, seed: int = 0):
    """LeRobot's own ``EpisodeAwareSampler`` over ``native``, built as lerobot-train 0.6.1 builds it for one dataset
    (its episode table, its episode filter, ``drop_n_last_frames``), its episode bounds read in place
    (:func:`episode_boundaries`).

    Args:
        native: The ``LeRobotDataset``.
        drop_n_last_frames: Frames left out at each episode's end.
        shuffle: Whether its passes are shuffled.
        seed: Its order's seed.

    Returns:
        The sampler.

    Raises:
        ValueError: LeRobot's own: no frame is left (every episode shorter than ``drop_n_last_frames``).
    """
    from lerobot.datasets import EpisodeAwareSampler

    starts, ends = episode_boundaries(native.meta.episodes)
    return EpisodeAwareSampler(
        starts,
        ends,
        episode_indices_to_use=getattr(native, "episodes", None),
        drop_n_last_frames=int(drop_n_last_frames),
        shuffle=shuffle,
        seed=seed,
        absolute_to_relative_idx=getattr(native, "absolute_to_relative_idx", None),
    )


def drop_sampler_frames(dataloader, native, drop: int, position) -> None:
    """Make lerobot-train's ``EpisodeAwareSampler`` leave out ``drop`` frames at each episode's end instead of the
    count it was built with (the policy's ``drop_n_last_frames``), keeping the epoch and the step ``--resume``
    positioned it at.

    Why here: lerobot-train builds its sampler from the policy's count in recorded frames; at a converted rate the
    count is the policy's steps (``windows.rates.recorded_frames``), and the sampler is what every pass's order,
    in process or in LeRobot's workers, comes from. Private writes of LeRobot 0.6's sampler (its frames:
    ``_starts``, ``_cum_lengths``, ``_num_frames``; its position: ``_epoch``, ``_start_index``), copied from a
    sampler LeRobot builds itself with the new count.

    Args:
        dataloader: The DataLoader lerobot-train iterates (prepared by accelerate or not).
        native: The ``LeRobotDataset`` its dataset serves (episode table, episode filter, index mapping).
        drop: Recorded frames to leave out at each episode's end.
        position: ``position(state, sampler_frames, pass_length, batch_size, world_size) -> (epoch, batch)``: the
            new pass's place of the old sampler's (``lerobot.mixture.resume_position``).

    Raises:
        CompatError: the sampler is not LeRobot 0.6's ``EpisodeAwareSampler``.
        RoboLoadersError: no frame is left (every episode shorter than ``drop``).
    """
    split = rank_split(dataloader)
    sampler = getattr(split.batch_sampler, "sampler", None)
    attrs = ("_starts", "_cum_lengths", "_num_frames", "_epoch", "_start_index", "seed", "shuffle")
    if (
        type(sampler).__name__ != "EpisodeAwareSampler"
        or not (installed_version() or "").startswith(SUPPORTED_PREFIX)
        or not all(hasattr(sampler, a) for a in attrs)
    ):
        raise CompatError(
            f"at target_fps the policy's drop_n_last_frames counts its steps ({drop} recorded frames here), and "
            f"this DataLoader's sampler ({type(sampler).__name__}) cannot be told so; use LeRobot "
            f"{SUPPORTED_PREFIX}x's lerobot-train, or leave target_fps out"
        )
    try:
        fresh = episode_sampler(native, drop, shuffle=bool(sampler.shuffle), seed=int(sampler.seed))
    except ValueError as exc:
        raise RoboLoadersError(
            f"at target_fps the policy's drop_n_last_frames leaves out {drop} recorded frames of each episode of "
            f"{native.repo_id}, and no frame is left ({exc}); give a higher target_fps or longer episodes"
        ) from None
    batch_size = int(getattr(split.batch_sampler, "batch_size", 1) or 1)
    state = {"epoch": sampler._epoch, "start_index": sampler._start_index}
    epoch, batch = position(state, int(sampler._num_frames), int(fresh._num_frames), batch_size, split.world_size)
    sampler._starts, sampler._cum_lengths, sampler._num_frames = fresh._starts, fresh._cum_lengths, fresh._num_frames
    sampler._epoch, sampler._start_index = int(epoch), int(batch) * batch_size * split.world_size


def sampler_batches(batch_sampler):
    """The index batches of one pass of lerobot-train's ``BatchSampler(EpisodeAwareSampler)``, computed with numpy.

    Why: ``EpisodeAwareSampler`` yields each index through a Python method (a ``searchsorted`` and a tensor read per
    frame, about 10 µs), which is over half a millisecond per batch of 64 in the training process, as long as an
    in-RAM backend takes to build the batch itself. This is what LeRobot 0.6's ``__iter__``/``_iter_epoch`` compute:
    the pass's epoch and start position are read and advanced as ``__iter__`` does (at the first batch, as
    ``BatchSampler.__iter__`` first calls it), the permutation is drawn from the same per-epoch generator, and each
    position maps to its frame as ``_frame_index`` does (:func:`sampler_indices`). Private reads of LeRobot 0.6's
    sampler; any other batch sampler (accelerate's shards, a custom one) or version returns ``None``.

    Args:
        batch_sampler: The DataLoader's batch sampler.

    Returns:
        A generator of index lists, the batches ``iter(batch_sampler)`` would give, or ``None`` (iterate
        ``batch_sampler`` itself).
    """
    from torch.utils.data import BatchSampler

    sampler = getattr(batch_sampler, "sampler", None)
    if (
        type(batch_sampler) is not BatchSampler
        or type(sampler).__name__ != "EpisodeAwareSampler"
        or not (installed_version() or "").startswith(SUPPORTED_PREFIX)
        or not all(hasattr(sampler, a) for a in _SAMPLER_ATTRS + _EPOCH_ATTRS)
    ):
        return None
    return _episode_batches(sampler, int(batch_sampler.batch_size), bool(batch_sampler.drop_last))


def _episode_batches(sampler, batch_size: int, drop_last: bool):
    import torch

    epoch, start = sampler._epoch, sampler._start_index
    sampler._epoch, sampler._start_index = epoch + 1, 0
    frames = sampler_indices(sampler)
    if sampler.shuffle:
        order = torch.randperm(int(sampler._num_frames), generator=sampler._epoch_generator(epoch)).numpy()
        frames = frames[order]
    frames = frames[int(start) :]
    for i in range(0, len(frames), batch_size):
        chunk = frames[i : i + batch_size]
        if drop_last and len(chunk) < batch_size:
            return
        yield chunk.tolist()


def hf_cache_files(table) -> list[str]:
    """The Arrow files under the datasets cache (``HF_DATASETS_CACHE``) that hold a ``datasets.Dataset``'s table
    (``table.cache_files``): where LeRobot's values come from, named in the messages saying how to refresh them,
    and part of what a backend records of a table its rows were checked against.

    Args:
        table: A ``datasets.Dataset`` (LeRobot's ``hf_dataset`` or ``meta.episodes``), or ``None``.

    Returns:
        The files' paths, sorted, each once; empty when the table is held in memory (or is ``None``).
    """
    return sorted({c["filename"] for c in getattr(table, "cache_files", None) or []})


def hf_table_digest(table) -> str:
    """A digest of the values of the Arrow table under a ``datasets.Dataset`` (``table.data``): every column's
    name, type, nullability and values, whatever chunks and buffers hold them.

    Why: a table LeRobot holds in memory (``tables_read_directly``) has no cache files whose names, sizes and
    mtimes a record of a check could name; its content can (a file edited with its mtime kept gives another
    digest). Why the values and not the buffers: the same file read from parquet (a first start) and from its kept
    Arrow copy (``mixtures.kept_tables``, every later start) lays them out differently (parquet gives each chunk
    a validity bitmap of all ones, the copy none), so a digest of the buffers differed between the first run and
    the second, and a backend recording its row check by this digest compared every row of every component again
    at the second start (docs/mixtures.md). The columns are joined into one chunk each and written as an
    Arrow IPC stream, whose writer leaves out the bitmap of a column without nulls and cuts each buffer to its
    values: equal values give equal bytes.

    Args:
        table: A ``datasets.Dataset``.

    Returns:
        The sha256 hex digest.
    """
    import hashlib

    import pyarrow as pa

    arrow = table.data.table
    # the fields without metadata (a parquet reader's field ids are no value), the columns in one chunk each
    schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in arrow.schema])
    joined = pa.Table.from_arrays(arrow.combine_chunks().columns, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(joined)
    return hashlib.sha256(memoryview(sink.getvalue())).hexdigest()


def hf_column(hf, name: str):
    """Column ``name`` of a ``datasets.Dataset`` in the order the dataset serves its rows, as Arrow, without
    decoding a row to Python: the table's column (``hf.data``) taken through the dataset's selection
    (``hf._indices``, which ``select``/``shuffle`` set instead of rewriting the table), so that value ``i`` is
    ``hf[i][name]``'s.

    Args:
        hf: A ``datasets.Dataset`` (LeRobot's ``hf_dataset``).
        name: A column of it.

    Returns:
        A ``pyarrow.ChunkedArray``, one value per row of ``hf``.
    """
    indices = getattr(hf, "_indices", None)
    col = hf.data.column(name)
    return col.take(indices.column(0)) if indices is not None else col


class HFColumns:
    """A ``datasets.Dataset``'s columns read in place (:func:`hf_column`), with the Arrow table's ``num_rows``,
    ``column_names`` and ``column(name)``: what comparing its numeric columns needs.

    Why not ``hf.with_format("arrow")[:]``: ``with_format`` copies the dataset object (``copy.deepcopy``, the
    features deep-copied three times over), which a mixture paid once per component at every start (issue 44 item 3:
    9 s of a 100-component start), and ``[:]`` then materialises the table.

    Args:
        hf: A ``datasets.Dataset`` (LeRobot's ``meta.episodes``).
    """

    def __init__(self, hf):
        self._hf = hf
        self.num_rows = len(hf)
        self.column_names = list(hf.column_names)

    def column(self, name: str):
        """Column ``name``, one value per row the dataset serves (:func:`hf_column`).

        Args:
            name: The column's name in LeRobot's table (e.g. ``"episode_index"``).

        Returns:
            Its values in the dataset's row order (a row selection respected).
        """
        return hf_column(self._hf, name)


def hf_table_columns(hf) -> HFColumns:
    """:class:`HFColumns` of ``hf``.

    Args:
        hf: A ``datasets.Dataset``.

    Returns:
        Its columns, read in place.
    """
    return HFColumns(hf)


def episode_boundaries(episodes) -> tuple[np.ndarray, np.ndarray]:
    """Every episode's ``dataset_from_index`` and ``dataset_to_index`` in LeRobot's ``meta.episodes``, in its row
    order, read in place (:func:`hf_column`).

    Why not ``episodes["dataset_from_index"]``: ``datasets`` formats a column read so through Python objects, one
    per episode; a mixture read both columns of every component two times at every start (issue 44 item 3: 6 s of a
    100-component start, ``sampler_rows`` and ``mixture_episodes``).

    Args:
        episodes: LeRobot's ``meta.episodes`` (a ``datasets.Dataset``).

    Returns:
        ``(from, to)``, int64 arrays of one value per episode row.
    """
    starts = np.asarray(hf_column(episodes, "dataset_from_index").to_numpy(), dtype=np.int64)
    ends = np.asarray(hf_column(episodes, "dataset_to_index").to_numpy(), dtype=np.int64)
    return starts, ends


def hf_fingerprint(hf) -> str | None:
    """The fingerprint ``datasets`` gives a ``Dataset``'s content and every transform applied to it
    (``hf._fingerprint``): part of what a backend records of the table its rows were checked against.

    Args:
        hf: A ``datasets.Dataset``.

    Returns:
        The fingerprint, or ``None`` when this ``datasets`` version keeps none (the record then rests on the cache
        files and the selection).
    """
    return getattr(hf, "_fingerprint", None)


def hf_selection_digest(hf) -> str | None:
    """A SHA-256 of the rows a ``datasets.Dataset`` selects from its table (``hf._indices``, see :func:`hf_column`):
    the same cache files serve other rows after a ``select``.

    Args:
        hf: A ``datasets.Dataset``.

    Returns:
        The hex digest of the selected row numbers, or ``None`` when the dataset serves its table as it is.
    """
    import hashlib

    indices = getattr(hf, "_indices", None)
    return None if indices is None else hashlib.sha256(np.asarray(indices.column(0)).tobytes()).hexdigest()


def _hf_checks() -> list[Check]:
    """``robo-loaders doctor``'s rows for the ``datasets`` internals read here, tried on a real (tiny, in-memory)
    ``datasets.Dataset``: a renamed attribute is a row naming it, not a rows check that fails on every run."""
    try:
        import datasets
    except ImportError as exc:
        return [Check("HF datasets (LeRobot's tables)", False, str(exc))]
    version = getattr(datasets, "__version__", "?")
    try:  # in memory: nothing is written to the datasets cache
        table = datasets.Dataset.from_dict({"index": [10, 11, 12, 13]})
        picked = table.select([3, 1])
        served = hf_column(picked, "index").to_pylist()
        fingerprints = {hf_fingerprint(table), hf_fingerprint(picked)}
    except Exception as exc:  # noqa: BLE001  (doctor reports what another version does, it does not stop)
        failed = f"datasets {version}: {type(exc).__name__}: {exc}"
        return [
            Check(
                "HF datasets private read Dataset._indices (with Dataset.data)",
                False,
                f"{failed}; rows cannot be compared",
            ),
            Check("HF datasets private read Dataset._fingerprint", False, failed, required=False),
        ]
    ok = served == [13, 11] and hf_selection_digest(picked) is not None and hf_selection_digest(table) is None
    rows = [
        Check(
            "HF datasets private read Dataset._indices (with Dataset.data)",
            ok,
            f"datasets {version}: "
            + (
                "how the rows a backend serves are compared with LeRobot's"
                if ok
                else f"the rows [13, 11] selected read as {served}: rows cannot be compared"
            ),
        )
    ]
    ok = None not in fingerprints and len(fingerprints) == 2
    rows.append(
        Check(
            "HF datasets private read Dataset._fingerprint",
            ok,
            "the record of rows already checked (shards reused across runs)"
            + ("" if ok else ": missing, the record rests on the cache files"),
            required=False,
        )
    )
    return rows


def time_video_queries(spent: list) -> None:
    """Benchmark only: add the wall time of every ``DatasetReader._query_videos`` call (all cameras of a sample)
    to ``spent[0]``, in this process. Not undone.

    Args:
        spent: A one-element list, added to in place.
    """
    import time

    from lerobot.datasets.dataset_reader import DatasetReader

    orig = DatasetReader._query_videos

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            spent[0] += time.perf_counter() - t

    DatasetReader._query_videos = timed


def checks() -> list[Check]:
    """Rows for ``robo-loaders doctor``."""
    found = installed_version()
    rows = [
        Check(
            f"lerobot {found or 'not installed'}",
            (found or "").startswith(SUPPORTED_PREFIX),
            f"supported: {SUPPORTED_PREFIX}x" + ("" if found else "; LeRobot backends unavailable"),
            required=found is not None,
        )
    ]
    if found is None:
        return rows
    try:  # not a function: a dataclass field whose type draccus reads at parse time
        from lerobot.configs.train import TrainPipelineConfig

        hints = typing.get_type_hints(TrainPipelineConfig)
        ok = "dataset" in hints and "dataset" in TrainPipelineConfig.__dataclass_fields__
        rows.append(
            Check(
                "LeRobot patch point lerobot.configs.train.TrainPipelineConfig.dataset",
                ok,
                f"typed {hints.get('dataset')!r}" if ok else "no 'dataset' field",
            )
        )
    except ImportError as exc:
        rows.append(Check("LeRobot patch point lerobot.configs.train.TrainPipelineConfig", False, str(exc)))
    rows += checks_module.patch_point_checks("LeRobot", PATCHED, ORIGINALS, _MARK)
    try:
        from lerobot.datasets.dataset_reader import DatasetReader

        source = inspect.getsource(DatasetReader)
        for attr in READER_ATTRS:
            ok = f"self.{attr} =" in source or f"self.{attr}:" in source
            rows.append(
                Check(
                    f"LeRobot private read DatasetReader.{attr}",
                    ok,
                    "decides what an item is" + ("" if ok else ": gone, items cannot be reproduced"),
                )
            )
        ok = hasattr(DatasetReader, "_check_cached_episodes_sufficient")
        rows.append(
            Check(
                "LeRobot private method DatasetReader._check_cached_episodes_sufficient",
                ok,
                "a backend reading a remote source replaces it while LeRobot loads the tables",
                required=False,
            )
        )
        from lerobot.datasets import dataset_metadata, dataset_reader

        gone = [
            f"{owner.__name__}.{name}"
            for owner, name in (
                (dataset_metadata, "load_episodes"),
                (dataset_metadata, "load_tasks"),
                (dataset_reader, "load_nested_dataset"),
            )
            if not callable(getattr(owner, name, None))
        ]
        rows.append(
            Check(
                "LeRobot patch points dataset_metadata.load_episodes/load_tasks, dataset_reader.load_nested_dataset",
                not gone,
                "a mixture's components read their tables with pyarrow while they are built"
                + ("" if not gone else f": {', '.join(gone)} gone, LeRobot's own (slower) read is used"),
                required=False,
            )
        )
        ok = hasattr(DatasetReader, "_query_videos")
        rows.append(
            Check(
                "LeRobot private read DatasetReader._query_videos", ok, "benchmark's decode split only", required=False
            )
        )
        from lerobot.datasets import EpisodeAwareSampler

        public = all(hasattr(EpisodeAwareSampler, a) for a in ("indices", "state_dict", "load_state_dict"))
        rows.append(
            Check(
                "LeRobot EpisodeAwareSampler.indices/state_dict",
                public,
                "what a pipeline-served backend serves per pass, and where --resume continues",
            )
        )
        source = inspect.getsource(EpisodeAwareSampler)
        private = [a for a in ("_epoch", "_start_index", "_num_frames", *_SAMPLER_ATTRS) if f"self.{a} =" not in source]
        ok = not private and hasattr(EpisodeAwareSampler, "_epoch_generator")
        rows.append(
            Check(
                "LeRobot private reads EpisodeAwareSampler._epoch/_start_index/_epoch_generator/_cum_lengths/...",
                ok,
                "computing a pass's indices with numpy"
                + ("" if ok else f": {', '.join(private) or '_epoch_generator'} gone, the sampler is iterated instead"),
                required=False,
            )
        )
    except (ImportError, OSError) as exc:
        rows.append(Check("LeRobot DatasetReader", False, str(exc)))
    return rows + _hf_checks()
