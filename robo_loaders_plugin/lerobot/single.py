"""One LeRobot dataset, built and served: LeRobot's own, built by LeRobot's own factory (:func:`native_datasets`),
then served through the chosen backend (:func:`convert`, :func:`build_dataset`). A backend reading a remote source
has LeRobot build its object from a local mirror of the tables (:func:`remote_tables`).

The entry points (``integration``) build a run's dataset with these, the mixture (``mixture``) each component.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.in_flight import TrainingLoop, current_training_loop, training_loop
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, SAMPLE, BackendChoice
from robo_loaders_plugin.core.threads import ordered_map
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.dataset_root import ROOT_FLAG, local_copy_required, remote_source
from robo_loaders_plugin.lerobot.flags import OPTIONS_FLAG, backend_choice, drop_n_last_frames_of
from robo_loaders_plugin.sources.lerobot_v3 import mirror_tables
from robo_loaders_plugin.windows.rates import recorded_frames

logger = get_logger(__name__)

_state = threading.local()


def inside_lerobot_split() -> bool:
    """Whether LeRobot's own ``make_train_eval_datasets`` is running on this thread (:func:`native_datasets` with
    ``split=True``): the ``make_dataset`` it calls, the patched one, is to give LeRobot's own dataset, neither
    checked again nor converted (both are done to each split afterwards).

    Returns:
        ``True`` inside that call.
    """
    return bool(getattr(_state, "raw", False))


def convert(dataset, cfg):
    """Serve ``dataset`` (a LeRobotDataset built by LeRobot's factory) through the configured backend.

    Args:
        dataset: LeRobot's dataset, or ``None`` (a split LeRobot left empty).
        cfg: lerobot-train's config (``cfg.dataset.backend``, ``backend_kwargs``, ``streaming``, ``repo_id``,
            ``cfg.seed``).

    Returns:
        ``dataset`` itself for ``native`` (or ``None``), else the backend's dataset (:func:`build_dataset`).

    Raises:
        RoboLoadersError: a bad choice, a backend combined with ``--dataset.streaming=true``, or a build error.
    """
    choice = backend_choice(cfg.dataset)
    if choice.name == DEFAULT_BACKEND or dataset is None:
        return dataset
    if getattr(cfg.dataset, "streaming", False):
        raise RoboLoadersError(
            f"--dataset.backend={choice.name} replaces LeRobot's map-style dataset; it cannot be "
            "combined with --dataset.streaming=true"
        )
    built = build_dataset(dataset, choice, repo_id=cfg.dataset.repo_id, seed=getattr(cfg, "seed", None))
    target = getattr(built, "target_fps", None)
    drop = drop_n_last_frames_of(cfg)
    if target is not None and drop:  # the policy counts it in its steps (windows.rates.recorded_frames)
        built.sampler_drop = recorded_frames(drop, float(dataset.meta.fps), target)
    return built


def items_choice(native, choice: BackendChoice, where: str = "") -> BackendChoice:
    """The backend choice for a dataset whose items may draw random numbers (LeRobot's image transforms): options
    whose default moves the draws out of lerobot-train's workers take another (``BackendChoice.for_items``), and a
    backend that still builds batches in the training process is refused.

    Why: there LeRobot's image transforms would draw from the training process's RNG, not from lerobot-train's
    workers', and threads draw in no fixed order: the same ``--seed`` gave other augmentations at every run (a
    reviewer's reproduction with an indexed backend, and with a loader option set to threads).

    Args:
        native: The ``LeRobotDataset``.
        choice: The backend choice, with the options the user gave.
        where: Starts the refusal (``--dataset.mixture: ``), or ``""``.

    Returns:
        The choice to build ``native`` with.

    Raises:
        RoboLoadersError: image transforms with a backend (or options) building batches in the training process.
    """
    draws = compat.reader_settings(native).image_transforms is not None
    out = choice.for_items(draw_random=draws)
    if draws and out.kind != SAMPLE:
        from robo_loaders_plugin.core.registry import random_item_backends

        given = ", ".join(f"{k}={v!r}" for k, v in choice.options.given().items() if k in choice.spec.options)
        others = ", ".join(n for n in random_item_backends("lerobot") if n != choice.name)
        # only an option with a default for random items moves them into the workers (a reviewer found the advice
        # to "leave its options to their defaults" given for backends no option of which does)
        movers = [n for n, o in choice.spec.options.items() if "lerobot" in o.random_items_defaults]
        leave = f"leave {', '.join(movers)} to {'its' if len(movers) == 1 else 'their'} default, " if movers else ""
        raise RoboLoadersError(
            f"{where}{choice.name}{f' ({given})' if given else ''} builds batches in the training process, where "
            "LeRobot's image transforms would draw other random numbers than lerobot-train's DataLoader workers (and "
            "its threads in no fixed order): the augmentations would not be LeRobot's, nor the same from run to run; "
            f"{leave}use one of {others}, or train without --dataset.image_transforms.enable=true"
        )
    return out


def build_dataset(
    native,
    choice: BackendChoice,
    repo_id: str | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    num_workers: int = 0,
    log_level: int = logging.INFO,
):
    """Serve a ``LeRobotDataset`` through a backend, as ``lerobot-train --dataset.backend`` does.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory (or user code) built.
        choice: The backend choice (``flags.backend_choice``, or ``choose(name, **options)``).
        repo_id: Shown in the log line (default: ``native.repo_id``).
        seed: lerobot-train's ``--seed`` (recorded; the sampler's own seed is what ``integration.cycle`` checks
            across ranks).
        batch_size: Items per batch of the DataLoader that will serve it, so that the footprint counts the batches
            in flight (``core.in_flight``; ``None``: lerobot-train's, when called from it, else not counted).
        num_workers: That DataLoader's workers.
        log_level: The level of the line saying what is served (a mixture of many components logs its
            components' at ``DEBUG``: ``mixtures.component_lines``).

    Returns:
        The backend's dataset, recorded for the adapter's dispatch (``lerobot-train``'s ``cycle``).

    Raises:
        RoboLoadersError: the choice is not for LeRobot, needs a GPU torch does not see, its cache directory is
            inside the dataset, or its source is wrong.
    """
    if choice.framework != "lerobot":
        raise RoboLoadersError(f"backend choice {choice.name!r} was resolved for {choice.framework}, not LeRobot")
    compat.check_version()
    choice.check_device()
    # before the backend writes anything under its cache root; a backend reading the dataset where it lies writes
    # nothing there for a local one (its cache_dir holds a remote source's tables: a reviewer's reproduction)
    if "cache_dir" in choice.spec.options and not choice.spec.remote_source_option:
        from robo_loaders_plugin.storage.cache import check_root_outside, location

        given = getattr(choice.options, "cache_dir", None)
        check_root_outside(location(given), str(native.root), f"{OPTIONS_FLAG}.cache_dir" if given else None)
    choice = items_choice(native, choice)
    loop = TrainingLoop(int(batch_size), int(num_workers)) if batch_size is not None else current_training_loop()
    with training_loop(loop):
        out = choice.build(native)
    iteration.record_built(out, choice, seed=seed)
    logger.log(
        log_level, f"lerobot data backend: {choice.name} [{repo_id or native.repo_id}] {iteration.summary_of(out)}"
    )
    return out


_MIRRORS_HELD: list = []  # the use locks of the remote tables' mirrors this process reads (remote_tables)


def remote_tables(url: str, choice: BackendChoice) -> str:
    """A local copy of a remote dataset's tables (``meta/`` and ``data/``, refreshed when they change) in the
    backend's cache directory, for LeRobot to build its dataset object from while the backend streams the rest from
    ``url`` (with the backend's ``storage_options``).

    Args:
        url: The dataset's remote root.
        choice: A backend reading a remote source (``BackendSpec.remote_source_option``).

    Returns:
        The local directory holding the tables.

    Raises:
        SourceError: ``url`` holds no LeRobot dataset.
    """
    from robo_loaders_plugin.storage.cache import Entry, cache_root, short_hash

    spec = choice.spec
    root = cache_root(getattr(choice.options, "cache_dir", None), f"{OPTIONS_FLAG}.cache_dir")
    name = f"remote-tables-{short_hash(url)}"
    local = os.path.join(root, name)
    # held (the cache's use lock) for the rest of the process, as every entry a run reads is: a prune or clear
    # (another run's, or `robo-loaders cache clear`) removed the mirror under the run using it (a reviewer's
    # reproduction)
    _MIRRORS_HELD.append(Entry(root, name).hold())
    storage = getattr(choice.options, spec.remote_storage_option) if spec.remote_storage_option else None
    mirror_tables(url, local, storage)
    logger.info(f"{choice.name}: tables of {url} copied to {local}; videos streamed from {url}")  # once they are
    return local


@contextlib.contextmanager
def _streamed_source(cfg):
    """A backend reading a remote source (``BackendSpec.remote_source_option``): LeRobot builds its dataset object
    from a local copy of the tables (:func:`remote_tables`), the rest stays where it is."""
    choice = backend_choice(cfg.dataset)
    url = remote_source(choice)
    if url is None:
        yield
        return
    if cfg.dataset.root is not None:  # replaced without a word before (a reviewer's finding)
        logger.warning(
            f"{ROOT_FLAG}={cfg.dataset.root} ignored: {choice.name} reads the dataset at {url} (its tables are "
            f"copied into {OPTIONS_FLAG}.cache_dir); leave {ROOT_FLAG} unset with a remote source"
        )
    cfg.dataset.root = remote_tables(url, choice)
    with compat.tables_only():
        yield


def native_datasets(cfg, split: bool, where: str | None = None, root_setting: str = ROOT_FLAG):
    """LeRobot's own dataset(s) for ``cfg``, built by LeRobot's own factory, not yet served by a backend (a backend
    reading a remote source has LeRobot build them from a local mirror of the tables).

    Args:
        cfg: lerobot-train's config (one dataset: a mixture's component config, or the run's own).
        split: Split episodes as ``make_train_eval_datasets`` does (``--dataset.eval_split``).
        where: How a refusal names the dataset (default: ``--dataset.repo_id=<repo_id>``).
        root_setting: The setting giving its root, for a refusal (default: ``--dataset.root``).

    Returns:
        ``(train, eval)``; ``eval`` is ``None`` when not split (or ``eval_split`` is 0).

    Raises:
        SourceError: LeRobot went to the Hugging Face Hub with the Hub off (``dataset_root.local_copy_required``).
        RoboLoadersError: ``eval_split`` leaves the dataset no training episode (LeRobot's line, naming it).
    """
    data = cfg.dataset
    where = where or f"--dataset.repo_id={data.repo_id}"
    with local_copy_required(data.repo_id, getattr(data, "root", None), where, root_setting):
        if not split:
            with _streamed_source(cfg):
                return compat.original("make_dataset")(cfg), None
        _state.raw = True
        try:
            with _streamed_source(cfg):
                return compat.original("make_train_eval_datasets")(cfg)
        except ValueError as exc:
            if "eval_split" not in str(exc):
                raise
            # LeRobot's own line names no dataset: a mixture's component that has too few episodes to split was
            # a traceback naming none of them
            raise RoboLoadersError(
                f"{where}: {exc} (the last ceil(episodes x eval_split) of each task are held out); lower "
                "--dataset.eval_split, or give it more episodes"
            ) from None
        finally:
            _state.raw = False


# LeRobot dataset objects of a mixture's components built at once (:func:`natives_built`). Why more than the cores:
# a component's build is ~9 ms when it reads its parquet files, about a third of it with the GIL released; at 400
# components 4 threads took 2.5-2.9 s against 3.7-3.8 s one at a time on this project's 2-core machine. A component
# whose tables come from their kept Arrow copies (``mixtures.kept_tables``) is ~5.4 ms of Python holding the GIL:
# 400 of them took 2.5 s one at a time against 2.7-3.0 s in 2 threads and 3.3-3.4 s in 4 (``serial``)
NATIVE_BUILD_THREADS = 4


def natives_built(build, count: int, alone=(), serial=()) -> list:
    """``build(k)`` for every component ``k`` of a mixture, in the components' order, built by
    :data:`NATIVE_BUILD_THREADS` threads, except those built one after another in the caller's thread.

    Why here and not one at a time: each component's ``LeRobotDataset`` is built by LeRobot's own factory, ~9 ms a
    small one, most of a 400-component mixture's start (issue 44 item 3); part of it is I/O, which threads overlap.
    Why not all in threads: a build that reads no file is Python holding the GIL, which threads only slow down.

    Args:
        build: ``build(k)``: component ``k``'s dataset object(s) (:func:`native_datasets`).
        count: How many components.
        alone: Components built one at a time in the caller's thread, before the others: those whose build patches
            LeRobot for the whole process (a remote component's ``compat.tables_only``, which would let a local
            component being built beside it skip its video files' check).
        serial: Components built one at a time in the caller's thread after the threads' (those whose metadata the
            mixture index served: their tables read from their kept copies, no I/O for threads to overlap).

    Returns:
        ``[build(k) for k in range(count)]``.

    Raises:
        Whatever ``build`` raises for the first component that fails: an ``alone`` one (built first) before any
        other, else the first in the components' order among the threads' ones, then the serial ones; the builds
        queued behind it are cancelled and the running ones waited for.
    """
    from robo_loaders_plugin.mixtures.index import tqdm_lock_made

    out: list = [None] * count
    first = set(alone)
    for k in sorted(first):
        out[k] = build(k)
    later = set(serial) - first
    rest = [k for k in range(count) if k not in first and k not in later]
    tqdm_lock_made()  # HF datasets' parquet loading (a big data/) uses tqdm's class-wide lock: made once, here
    threads = min(NATIVE_BUILD_THREADS, len(rest)) if len(rest) > 1 else 0
    for k, built in zip(
        rest, ordered_map(build, rest, threads, depth=2 * NATIVE_BUILD_THREADS, name="robo-loaders-component")
    ):
        out[k] = built
    for k in sorted(later):
        out[k] = build(k)
    return out
