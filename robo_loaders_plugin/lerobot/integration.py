"""LeRobot-facing entry points: what the patches install (``lerobot.compat``), usable directly as a library too."""

from __future__ import annotations

import contextlib
import os
import threading

import torch

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.backend_json import parse_backend_kwargs
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.in_flight import TrainingLoop, current_training_loop, training_loop
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.ranks import check_ranks_agree, source_identity
from robo_loaders_plugin.core.registry import choose_backend
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, BackendChoice
from robo_loaders_plugin.core.units import plural
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.mixture import resume_position
from robo_loaders_plugin.mixtures.dataset import MixtureDataset
from robo_loaders_plugin.sources.lerobot_v3 import is_remote, mirror_tables

logger = get_logger(__name__)

_state = threading.local()


NAME_FLAG, OPTIONS_FLAG = "--dataset.backend", "--dataset.backend_kwargs"


def backend_choice(dataset_cfg) -> BackendChoice:
    """The backend choice of ``cfg.dataset`` (``backend`` missing or "native": LeRobot's own), resolved once per
    distinct (name, options) (``core.registry.choose_backend``): at argument parsing, then reused.

    Args:
        dataset_cfg: ``cfg.dataset`` (a ``BackendDatasetConfig``, or LeRobot's own ``DatasetConfig``).

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice`.

    Raises:
        RoboLoadersError: naming ``--dataset.backend`` / ``--dataset.backend_kwargs`` and what is wrong.
    """
    name = getattr(dataset_cfg, "backend", None) or DEFAULT_BACKEND  # LeRobot's own DatasetConfig has no such field
    kwargs = getattr(dataset_cfg, "backend_kwargs", None) or {}
    if name == DEFAULT_BACKEND:  # a resumed config may carry options of a backend used before: ignore them
        kwargs = {}
    if isinstance(kwargs, str):
        kwargs = parse_backend_kwargs(kwargs, OPTIONS_FLAG)
    if not isinstance(kwargs, dict):
        raise RoboLoadersError(
            f'{OPTIONS_FLAG} must be a JSON object, e.g. \'{{"codec": "zstd"}}\', got {type(kwargs).__name__}'
        )
    return choose_backend("lerobot", name, kwargs, name_where=NAME_FLAG, options_where=OPTIONS_FLAG)


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
    return build_dataset(dataset, choice, repo_id=cfg.dataset.repo_id, seed=getattr(cfg, "seed", None))


def build_dataset(
    native,
    choice: BackendChoice,
    repo_id: str | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    num_workers: int = 0,
):
    """Serve a ``LeRobotDataset`` through a backend, as ``lerobot-train --dataset.backend`` does.

    Args:
        native: The ``LeRobotDataset`` LeRobot's factory (or user code) built.
        choice: The backend choice (:func:`backend_choice`, or ``choose("video_stream", buffer="lz4")``).
        repo_id: Shown in the log line (default: ``native.repo_id``).
        seed: lerobot-train's ``--seed`` (recorded; the sampler's own seed is what :func:`cycle` checks across
            ranks).
        batch_size: Items per batch of the DataLoader that will serve it, so that the footprint counts the batches
            in flight (``core.in_flight``; ``None``: lerobot-train's, when called from it, else not counted).
        num_workers: That DataLoader's workers.

    Returns:
        The backend's dataset, recorded for the adapter's dispatch (``lerobot-train``'s ``cycle``).

    Raises:
        RoboLoadersError: the choice is not for LeRobot, needs a GPU torch does not see, or its source is wrong.
    """
    if choice.framework != "lerobot":
        raise RoboLoadersError(f"backend choice {choice.name!r} was resolved for {choice.framework}, not LeRobot")
    compat.check_version()
    choice.check_device()
    loop = TrainingLoop(int(batch_size), int(num_workers)) if batch_size is not None else current_training_loop()
    with training_loop(loop):
        out = choice.build(native)
    iteration.record_built(out, choice, seed=seed)
    logger.info(f"lerobot data backend: {choice.name} [{repo_id or native.repo_id}] {iteration.summary_of(out)}")
    return out


def choose(backend: str, **options) -> BackendChoice:
    """A LeRobot backend choice from Python (what ``--dataset.backend=NAME --dataset.backend_kwargs=JSON`` give).

    Args:
        backend: The backend's name.
        **options: Its options.

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice`, for :func:`build_dataset`.

    Raises:
        RoboLoadersError: an unknown backend, or a bad option, named.
    """
    return choose_backend("lerobot", backend, options, name_where=NAME_FLAG, options_where=OPTIONS_FLAG)


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
    from robo_loaders_plugin.storage.cache import cache_root, short_hash

    spec = choice.spec
    root = cache_root(getattr(choice.options, "cache_dir", None), f"{OPTIONS_FLAG}.cache_dir")
    local = os.path.join(root, f"remote-tables-{short_hash(url)}")
    logger.info(f"{choice.name}: tables of {url} copied to {local}; videos streamed from {url}")
    storage = getattr(choice.options, spec.remote_storage_option) if spec.remote_storage_option else None
    return mirror_tables(url, local, storage)


@contextlib.contextmanager
def _streamed_source(cfg):
    """A backend reading a remote source (``BackendSpec.remote_source_option``): LeRobot builds its dataset object
    from a local copy of the tables (:func:`remote_tables`), the rest stays where it is."""
    choice = backend_choice(cfg.dataset)
    spec = choice.spec
    url = getattr(choice.options, spec.remote_source_option) if spec.remote_source_option else None
    if not is_remote(url):
        yield
        return
    cfg.dataset.root = remote_tables(url, choice)
    with compat.tables_only():
        yield


def make_dataset(cfg):
    """Mirror of ``lerobot.datasets.factory.make_dataset(cfg)`` honouring ``cfg.dataset.backend``.

    The choice is checked before anything is read; a backend reading a remote source has LeRobot build its dataset
    from a local mirror of the tables.

    Args:
        cfg: lerobot-train's config.

    Returns:
        LeRobot's dataset served by the backend (LeRobot's own for ``native``).

    Raises:
        RoboLoadersError: a bad choice, option or source.
    """
    backend_choice(cfg.dataset)  # fail on a bad name/option before reading anything
    from robo_loaders_plugin.lerobot import mixture

    with training_loop(training_loop_of(cfg)):  # the batches in flight, counted in the footprints
        if mixture.mixture_of(cfg.dataset) is not None:  # --dataset.mixture: one dataset per component
            return mixture.make_mixture_datasets(cfg, split=False)[0]
        with _streamed_source(cfg):
            native = compat.original("make_dataset")(cfg)
        if getattr(_state, "raw", False):  # called from make_train_eval_datasets: converted there
            return native
        return convert(native, cfg)


def make_train_eval_datasets(cfg):
    """Mirror of 0.6.1's ``make_train_eval_datasets(cfg)``: LeRobot splits episodes, then each split is served
    by the configured backend (the full dataset is not cached when it is split).

    Args:
        cfg: lerobot-train's config.

    Returns:
        ``(train, eval)``, each served by the backend.

    Raises:
        RoboLoadersError: a bad choice, option or source.
    """
    backend_choice(cfg.dataset)
    from robo_loaders_plugin.lerobot import mixture

    with training_loop(training_loop_of(cfg)):  # the batches in flight, counted in the footprints
        if mixture.mixture_of(cfg.dataset) is not None:  # --dataset.mixture: each split as LeRobot splits
            return mixture.make_mixture_datasets(cfg, split=True)
        train, evaluation = native_datasets(cfg, split=True)
        return convert(train, cfg), convert(evaluation, cfg)


def training_loop_of(cfg) -> TrainingLoop | None:
    """The training loop lerobot-train runs with ``cfg``: ``--batch_size`` items per batch, built by
    ``--num_workers`` DataLoader workers (``core.in_flight``); ``None`` for a config without them.

    Args:
        cfg: lerobot-train's config.

    Returns:
        A ``core.in_flight.TrainingLoop``, or ``None``.
    """
    batch_size, workers = getattr(cfg, "batch_size", None), getattr(cfg, "num_workers", None)
    if not isinstance(batch_size, int) or not isinstance(workers, int):
        return None
    return TrainingLoop(batch_size, workers)


def native_datasets(cfg, split: bool):
    """LeRobot's own dataset(s) for ``cfg``, built by LeRobot's own factory, not yet served by a backend (a backend
    reading a remote source has LeRobot build them from a local mirror of the tables).

    Args:
        cfg: lerobot-train's config (one dataset: a mixture's component config, or the run's own).
        split: Split episodes as ``make_train_eval_datasets`` does (``--dataset.eval_split``).

    Returns:
        ``(train, eval)``; ``eval`` is ``None`` when not split (or ``eval_split`` is 0).
    """
    if not split:
        with _streamed_source(cfg):
            return compat.original("make_dataset")(cfg), None
    _state.raw = True
    try:
        with _streamed_source(cfg):
            return compat.original("make_train_eval_datasets")(cfg)
    finally:
        _state.raw = False


def sampling_plan(dataloader, built: iteration.Built | None = None) -> iteration.SamplingPlan:
    """``lerobot-train``'s pass, from the DataLoader it builds. Public sampler API only.

    The frames its EpisodeAwareSampler serves (episode filter, ``drop_n_last_frames``), its seed, and the
    epoch/offset ``--resume`` positioned it at; batch size, ``drop_last``, ``--num_workers`` and pinned memory from
    the DataLoader; this process's rank and the world size from accelerate's split of it (``compat.rank_split``).

    Resume under several processes: LeRobot's ``compute_sampler_state`` puts ``start_index`` at
    ``batches_into_epoch * batch_size * world_size`` (every step consumed one batch on every rank), so every rank
    starts at batch ``start_index // (batch_size * world_size)`` of its own share.

    Args:
        dataloader: The DataLoader lerobot-train iterates.
        built: How its dataset was built (unused: everything comes from the DataLoader; the parameter is the
            ``plan_for`` signature of ``core.iteration``).

    Returns:
        The :class:`~robo_loaders_plugin.core.iteration.SamplingPlan`.

    Raises:
        RoboLoadersError: the sampler is not an EpisodeAwareSampler (another LeRobot version).
        CompatError: accelerate splits batches in a way not supported (``compat.rank_split``).
    """
    split = compat.rank_split(dataloader)
    batch_sampler = split.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    try:
        items = compat.sampler_indices(sampler)
        state, seed, shuffle = sampler.state_dict(), int(sampler.seed), bool(sampler.shuffle)
    except AttributeError:
        raise RoboLoadersError(
            f"this backend expects lerobot-train's EpisodeAwareSampler, found "
            f"{type(sampler).__name__}; this LeRobot version is not supported"
        ) from None
    batch_size = int(batch_sampler.batch_size)
    start_epoch, start_batch = int(state["epoch"]), int(state["start_index"]) // (batch_size * split.world_size)
    dataset = getattr(dataloader, "dataset", None)
    if isinstance(dataset, MixtureDataset) and len(items) != dataset.pass_length:  # another count: the step's place
        start_epoch, start_batch = resume_position(state, len(items), dataset.pass_length, batch_size, split.world_size)
    return iteration.SamplingPlan(
        batch_size=batch_size,
        drop_last=bool(batch_sampler.drop_last),
        shuffle=shuffle,
        seed=seed,
        num_workers=max(1, int(dataloader.num_workers)),
        items=items,
        start_epoch=start_epoch,
        start_batch=start_batch,
        pin_memory=bool(getattr(dataloader, "pin_memory", False)) and torch.cuda.is_available(),
        rank=split.rank,
        world_size=split.world_size,
    )


def cycle(dataloader):
    """``lerobot-train``'s ``cycle(dataloader)``: passes of what the backend's declared kind says, forever.

    For a dataset a backend built, the ranks' setups are checked first (:func:`check_same_setup`) and one line says
    what serves the batches; LeRobot's own datasets get LeRobot's own ``cycle``.

    Args:
        dataloader: The DataLoader lerobot-train built.

    Returns:
        An endless iterator of batches.

    Raises:
        RoboLoadersError: the ranks disagree on their setup.
    """
    built = iteration.built_by(getattr(dataloader, "dataset", None))
    if built is not None:
        check_same_setup(dataloader, built)
    source = iteration.pass_batches(dataloader, sampling_plan, compat.sampler_batches)
    if isinstance(source, iteration.BatchSource):
        logger.info(f"{built.choice.name}: lerobot-train's batches come from {source.describe()}")
    elif isinstance(source, iteration.SamplerBatches):
        logger.info(
            f"{built.choice.name}: lerobot-train's batches are built in the training process "
            f"({plural(source.num_threads, 'thread')}) over its sampler's order"
        )
    return iteration.batch_stream(dataloader, source, compat.native_cycle)


def check_same_setup(dataloader, built: iteration.Built) -> None:
    """Refuse ranks set up differently (``core.ranks.check_ranks_agree``): the sampler's seed, the backend, its
    options, the frame count and the source.

    Why here and not when the dataset is built: lerobot-train builds the dataset on rank 0 first and on the other
    ranks after a barrier, so a collective at build time would wait forever; every rank calls ``cycle`` on its
    training DataLoader at the same point.

    Args:
        dataloader: The training DataLoader.
        built: How its dataset was built.

    Raises:
        RoboLoadersError: naming the first value the ranks disagree on (nothing is checked in a one-process run).
    """
    dataset = dataloader.dataset
    sampler = getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)
    split = compat.rank_split(dataloader)
    seed = getattr(getattr(split.batch_sampler, "sampler", sampler), "seed", None)
    mixed = isinstance(dataset, MixtureDataset)
    check_ranks_agree(
        lambda: {
            "--seed (the sampler's)": seed,
            "--dataset.backend": built.choice.name,
            "--dataset.backend_kwargs": built.choice.options.shared(),
            "frames": len(dataset),
            **({"--dataset.mixture (components, weights)": [dataset.names, dataset.weights]} if mixed else {}),
            "source (file sizes)": (
                [source_identity(r) for r in dataset.roots] if mixed else source_identity(str(dataset.root))
            ),
        },
        f"LeRobot data backend {built.choice.name}",
    )


def flag_text(argv: list[str], flag: str = OPTIONS_FLAG) -> tuple[int, str, str] | None:
    """Where ``flag``'s value is in ``argv``: ``(position, what precedes the value there, the value)`` (``--flag
    value``: ``""``; ``--flag=value``: ``"--flag="``), as LeRobot's parser reads it (given twice, the last one
    counts); ``None`` when it is not there.

    Args:
        argv: The command line without the program.
        flag: The flag (default: ``--dataset.backend_kwargs``).

    Returns:
        The position and text of its value, or ``None``.
    """
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = (i + 1, "", argv[i + 1])
        elif arg.startswith(flag + "="):
            found = (i, flag + "=", arg[len(flag) + 1 :])
    return found


_options_text = flag_text


def check_command_line(argv: list[str]) -> list[str]:
    """``--dataset.backend_kwargs`` on lerobot-train's command line must be a JSON object (its ``--help`` says so),
    and ``--dataset.mixture`` a mixture (``lerobot.mixture``), checked before LeRobot's parser reads them.

    Why: LeRobot's parser reads it as YAML, which accepts ``{codec: zstd}``, answers a malformed object with a long
    traceback, and reads JSON numbers in exponent form (``1e9``, ``5e-2``) as strings; an empty value
    (``--dataset.backend_kwargs=``, an empty shell variable) failed inside its parser with ``AttributeError``. Bad
    JSON exits with one line naming the flag, as LeRobot's parser does for a bad value; an empty or blank value
    means no options, as everywhere else options are typed (``core.backend_json``), and is handed on as ``{}``.
    The numbers are given their JSON types after LeRobot's parser by :func:`command_line_options`.

    Args:
        argv: The command line without the program (``sys.argv[1:]``).

    Returns:
        The command line LeRobot's parser is to read: ``argv``, with an empty value replaced by ``{}``.

    Raises:
        SystemExit: with status 1, after printing ``error: ...`` to stderr.
    """
    import sys

    from robo_loaders_plugin.lerobot.mixture import check_mixture_text

    argv = list(argv)
    try:
        check_mixture_text(argv)  # a mixture's JSON, read as JSON before LeRobot's parser reads it as YAML
    except RoboLoadersError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    found = _options_text(argv)
    if found is None:
        return argv
    at, head, text = found
    try:
        parse_backend_kwargs(text, OPTIONS_FLAG)
    except RoboLoadersError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    if not text.strip():
        argv[at] = head + "{}"
    return argv


def command_line_options(decoded: dict, argv: list[str] | None = None) -> dict:
    """The backend's options with the values typed on the command line read as JSON, over what LeRobot's parser
    made of them (YAML: ``1e9`` is the string ``'1e9'`` there, a number in JSON).

    Why after the parser, too: with ``--dataset.discover_packages_path=robo_loaders_plugin`` (the import hook
    off) the plugin is imported by LeRobot's parser after it read the command line, so :func:`check_command_line`
    never sees it; this runs on both paths, when the config is built.

    Args:
        decoded: ``backend_kwargs`` as LeRobot's parser decoded it (merged with a ``--config_path`` file's).
        argv: The command line (default: ``sys.argv[1:]``).

    Returns:
        ``decoded`` with every option the command line gives taken from its JSON reading.

    Raises:
        BackendOptionError: the command line's value is not a JSON object, naming the flag.
    """
    import sys

    found = _options_text(sys.argv[1:] if argv is None else argv)
    if found is None or not isinstance(decoded, dict):
        return decoded
    return {**decoded, **parse_backend_kwargs(found[2], OPTIONS_FLAG)}
