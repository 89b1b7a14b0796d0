"""LeRobot-facing entry points: what the patches install (``lerobot.compat``), usable directly as a library too.

The top of the adapter: a config goes down from here, never back. ``make_dataset``/``make_train_eval_datasets``
check what the parser could not (a config built in Python, a resumed run's data) and hand a mixture to ``mixture``,
one dataset to ``single``; ``cycle`` serves lerobot-train's passes of what they built; ``check_command_line`` reads
the plugin's flags before LeRobot's parser does. ``choose`` and ``build_dataset`` are the library's (``flags``,
``single``).
"""

from __future__ import annotations

import torch

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.backend_json import parse_backend_kwargs
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.in_flight import TrainingLoop, training_loop
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.ranks import check_ranks_agree, source_identity
from robo_loaders_plugin.core.units import plural
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.lerobot.dataset_root import check_dataset_root
from robo_loaders_plugin.lerobot.flags import OPTIONS_FLAG, backend_choice, choose, flag_text
from robo_loaders_plugin.lerobot.mixture import make_mixture_datasets, resume_position, save_component_stats
from robo_loaders_plugin.lerobot.mixture_flag import check_mixture_text, mixture_of
from robo_loaders_plugin.lerobot.mixture_resume import check_resumed_dataset
from robo_loaders_plugin.lerobot.single import build_dataset, convert, inside_lerobot_split, native_datasets
from robo_loaders_plugin.mixtures.dataset import MixtureDataset

# the library's: the entry points, and a backend chosen and a LeRobotDataset served from Python (choose,
# build_dataset: docs/mixtures.md, docs/scale.md), which live in flags and single
__all__ = [
    "build_dataset",
    "check_command_line",
    "choose",
    "cycle",
    "make_dataset",
    "make_train_eval_datasets",
    "sampling_plan",
    "save_component_stats",
]

logger = get_logger(__name__)


def make_dataset(cfg):
    """Mirror of ``lerobot.datasets.factory.make_dataset(cfg)`` honouring ``cfg.dataset.backend``.

    The choice is checked before anything is read, and so is a resumed run's data against its checkpoint's
    (``mixture_resume``); a backend reading a remote source has LeRobot build its dataset from a local mirror of the
    tables.

    Args:
        cfg: lerobot-train's config.

    Returns:
        LeRobot's dataset served by the backend (LeRobot's own for ``native``).

    Raises:
        RoboLoadersError: a bad choice, option or source, or a resumed run given other data than its checkpoint
            trained on (``mixture_resume.check_resumed_dataset``).
    """
    choice = backend_choice(cfg.dataset)  # fail on a bad name/option before reading anything
    inside_split = inside_lerobot_split()  # called from make_train_eval_datasets (a component's, too)
    if not inside_split:  # checked there
        check_resumed_dataset(cfg)  # --resume: the data its checkpoint trained on
    with training_loop(training_loop_of(cfg)):  # the batches in flight, counted in the footprints
        if mixture_of(cfg.dataset) is not None:  # --dataset.mixture: one dataset per component
            return make_mixture_datasets(cfg, split=False)[0]
        check_dataset_root(cfg.dataset, choice)  # a config built in Python skipped the parser's check
        native, _ = native_datasets(cfg, split=False)
        if inside_split:  # converted there
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
        RoboLoadersError: a bad choice, option or source, or a resumed run given other data than its checkpoint
            trained on (``mixture_resume.check_resumed_dataset``).
    """
    choice = backend_choice(cfg.dataset)
    check_resumed_dataset(cfg)  # --resume: the data its checkpoint trained on
    with training_loop(training_loop_of(cfg)):  # the batches in flight, counted in the footprints
        if mixture_of(cfg.dataset) is not None:  # --dataset.mixture: each split as LeRobot splits
            return make_mixture_datasets(cfg, split=True)
        check_dataset_root(cfg.dataset, choice)  # a config built in Python skipped the parser's check
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
        RoboLoadersError: the sampler is not an EpisodeAwareSampler (a custom loop's), or lacks its API.
        CompatError: accelerate splits batches in a way not supported (``compat.rank_split``).
    """
    split = compat.rank_split(dataloader)
    batch_sampler = split.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    try:
        items = compat.sampler_indices(sampler)
        state, seed, shuffle = sampler.state_dict(), int(sampler.seed), bool(sampler.shuffle)
    except AttributeError:
        # named by what was given: a custom loop's RandomSampler was blamed on "this LeRobot version" (a reviewer's
        # reproduction); the version is in question only for a sampler of that name without its methods
        name = built.choice.name if built is not None else "this backend"
        if type(sampler).__name__ == "EpisodeAwareSampler":
            raise RoboLoadersError(
                f"LeRobot data backend {name}: this EpisodeAwareSampler lacks what LeRobot 0.6.1's has "
                "(state_dict, seed, shuffle); this LeRobot version is not supported"
            ) from None
        raise RoboLoadersError(
            f"LeRobot data backend {name}: cycle() needs a DataLoader with lerobot-train's EpisodeAwareSampler "
            f"(batch_size=N, sampler=EpisodeAwareSampler(...)), found {type(sampler).__name__}; or iterate the "
            "DataLoader itself, item by item"
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
        sampler_counts_passes=True,  # its EpisodeAwareSampler's epoch, as LeRobot's own order
        start_batch=start_batch,
        pin_memory=bool(getattr(dataloader, "pin_memory", False)) and torch.cuda.is_available(),
        rank=split.rank,
        world_size=split.world_size,
        worker_context=getattr(dataloader, "multiprocessing_context", None),
        prefetch_factor=getattr(dataloader, "prefetch_factor", None),
        worker_processes=int(dataloader.num_workers),  # --num_workers=0: no worker process, as LeRobot's own
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
    drop = getattr(getattr(dataloader, "dataset", None), "sampler_drop", None)
    if drop is not None:  # a converted rate: the policy's drop_n_last_frames in its steps (lerobot.single.convert)
        compat.drop_sampler_frames(dataloader, dataloader.dataset._native, drop, resume_position)
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
            # which episodes (ranks of the same frame count could serve other ones; a reviewer's reading)
            **({} if mixed else {"--dataset.episodes": _episodes_of(dataset)}),
            **({"--dataset.mixture (components, weights)": [dataset.names, dataset.weights]} if mixed else {}),
            "source (file sizes)": (
                [source_identity(r) for r in dataset.roots] if mixed else source_identity(str(dataset.root))
            ),
        },
        f"LeRobot data backend {built.choice.name}",
    )


def _episodes_of(dataset) -> str | None:
    """The episodes a dataset serves, as a short hash (``None``: every episode)."""
    from robo_loaders_plugin.storage.cache import short_hash

    episodes = getattr(dataset, "episodes", None)
    return None if episodes is None else short_hash([int(e) for e in episodes])


def check_command_line(argv: list[str]) -> list[str]:
    """``--dataset.backend_kwargs`` on lerobot-train's command line must be a JSON object (its ``--help`` says so),
    and ``--dataset.mixture`` a mixture (``mixture_flag``), checked before LeRobot's parser reads them.

    Why: LeRobot's parser reads it as YAML, which accepts ``{codec: zstd}``, answers a malformed object with a long
    traceback, and reads JSON numbers in exponent form (``1e9``, ``5e-2``) as strings; an empty value
    (``--dataset.backend_kwargs=``, an empty shell variable) failed inside its parser with ``AttributeError``. Bad
    JSON exits with one line naming the flag, as LeRobot's parser does for a bad value; an empty or blank value
    means no options, as everywhere else options are typed (``core.backend_json``), and is handed on as ``{}``.
    The numbers are given their JSON types after LeRobot's parser by ``flags.command_line_options``.

    Args:
        argv: The command line without the program (``sys.argv[1:]``).

    Returns:
        The command line LeRobot's parser is to read: ``argv``, with an empty value replaced by ``{}``.

    Raises:
        SystemExit: with status 1, after printing ``error: ...`` to stderr.
    """
    import sys

    argv = list(argv)
    try:
        check_mixture_text(argv)  # a mixture's JSON, read as JSON before LeRobot's parser reads it as YAML
    except RoboLoadersError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    found = flag_text(argv)
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
