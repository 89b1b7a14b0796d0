"""robomimic-facing entry points: the functions the patches install (``robomimic.compat``), usable directly as a
library too."""

from __future__ import annotations

import os

import torch
import torch.utils.data

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.in_flight import training_loop
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.ranks import check_ranks_agree, resolve_ranks, source_identity
from robo_loaders_plugin.core.registry import choose_backend
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, SAMPLE, BackendChoice
from robo_loaders_plugin.robomimic import compat, mixture
from robo_loaders_plugin.robomimic.sequence import training_loop_of, window_settings
from robo_loaders_plugin.storage.cache import short_hash

logger = get_logger(__name__)


def backend_choice(config) -> BackendChoice:
    """The backend choice of ``config.train.data_backend`` / ``data_backend_kwargs``, resolved once per distinct
    (name, options) (``core.registry.choose_backend``).

    Args:
        config: robomimic's config (one built without the plugin's config patch lacks the keys: native).

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice` (``native`` when ``data_backend`` is null).

    Raises:
        RoboLoadersError: naming ``train.data_backend`` / ``train.data_backend_kwargs`` and what is wrong with it.
    """
    name = config.train.get("data_backend")  # dict.get: configs built without the patch lack the key
    kwargs = config.train.get("data_backend_kwargs") or {}
    if name is None:
        name = DEFAULT_BACKEND
    if not isinstance(name, str):
        raise RoboLoadersError(f"train.data_backend must be a backend name (string) or null, got {name!r}")
    if not isinstance(kwargs, dict):
        raise RoboLoadersError(f"train.data_backend_kwargs must be a JSON object, got {type(kwargs).__name__}")
    return choose_backend(
        "robomimic", name, dict(kwargs), name_where="train.data_backend", options_where="train.data_backend_kwargs"
    )


def dataset_factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, rank=None, world_size=None):
    """Drop-in for ``robomimic.utils.train_utils.dataset_factory`` that honours ``train.data_backend``.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (default: ``config.train.data``).
        rank: This process's rank in a loop running one process per GPU (default: ``torch.distributed``, else
            torchrun's ``RANK``), whose passes (through robomimic's ``run_epoch``) then serve its own share of
            every pass, the same number of batches on every rank, ordered by ``train.seed``. The ranks' setups are
            checked with the ``torch.distributed`` process group when the dataset is built and at its first pass:
            the loop must have initialised the group by then.
        world_size: The number of such processes (default as for ``rank``).

    Returns:
        The dataset robomimic's ``train()`` builds its DataLoader over: with ``train.data_mixture`` set, for
        ``train.data``, the mixture (``robomimic.mixture``) whatever the backend, ``native`` included.

    Raises:
        RoboLoadersError: a bad backend choice, option, source or mixture, named.
    """
    mixed = mixture.applies(config, dataset_path)
    if mixed:
        mixture.mixture_spec(config)  # the mixture's refusals first: they say why an option does not apply
    choice = backend_choice(config)
    if mixed:
        with training_loop(training_loop_of(config)):  # the batches in flight, counted in the footprints
            return mixture.build_mixture(config, obs_keys, choice, filter_by_attribute, rank, world_size)
    if config.train.get("data_backend") is None:
        return compat.original("dataset_factory")(
            config, obs_keys, filter_by_attribute=filter_by_attribute, dataset_path=dataset_path
        )
    return build_dataset(config, obs_keys, choice, filter_by_attribute, dataset_path, rank, world_size)


def build_dataset(
    config, obs_keys, choice: BackendChoice, filter_by_attribute=None, dataset_path=None, rank=None, world_size=None
):
    """Build a backend's dataset for robomimic, as ``train.data_backend`` does (whatever the config says).

    Args:
        config: robomimic's config (``train.*`` decides the windows).
        obs_keys: The observation keys to load.
        choice: The backend choice (:func:`backend_choice`, or :func:`choose`).
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (default: ``config.train.data``).
        rank: See :func:`dataset_factory`.
        world_size: See :func:`dataset_factory`.

    Returns:
        The backend's dataset, recorded for the adapter's dispatch (``run_epoch``).

    Raises:
        RoboLoadersError: the choice is not for robomimic, needs a GPU torch does not see, or its source is wrong.
    """
    if choice.framework != "robomimic":
        raise RoboLoadersError(f"backend choice {choice.name!r} was resolved for {choice.framework}, not robomimic")
    alone = (rank, world_size) == (0, 1)  # given so explicitly: a dataset for this process alone
    rank, world_size = resolve_ranks(rank, world_size, "robomimic dataset_factory: ")
    compat.check_version()
    choice.check_device()
    path = os.path.expanduser(dataset_path if dataset_path is not None else config.train.data)
    with training_loop(training_loop_of(config)):  # the batches in flight, counted in the footprint
        dataset = choice.build(config, obs_keys, filter_by_attribute=filter_by_attribute, dataset_path=dataset_path)

    def setup():  # what every rank must share
        return {
            "train.seed": int(config.train.seed),
            "backend": choice.name,
            "train.data_backend_kwargs": choice.options.shared(),
            "samples": len(dataset),
            "source (file sizes)": source_identity(path),
            # which demos and which windows: ranks of the same sample count built from other demos (another filter
            # key) or windows (another seq_length) kept their shares of different passes (a reviewer's reproduction)
            "filter key": filter_by_attribute,
            "demos": short_hash(list(getattr(dataset, "demos", []) or [])),
            "windows (train.*, obs keys)": window_settings(config, obs_keys),
        }

    # checked now when the process group exists, and again at the first pass: a custom loop may initialise the
    # group after building the dataset (iteration.check_first_pass)
    shared = setup() if world_size > 1 else None
    check_ranks_agree(shared or setup, f"robomimic data backend {choice.name}", (rank, world_size), alone)
    iteration.record_built(dataset, choice, rank, world_size, int(config.train.seed), shared)
    if world_size > 1 and choice.kind == SAMPLE:
        logger.info(
            f"{choice.name} (rank {rank} of {world_size}): this backend serves single samples "
            "through your DataLoader, which must split passes itself (a DistributedSampler)"
        )
    split = filter_by_attribute or "all demos"
    logger.info(f"robomimic data backend: {choice.name} [{split}] {iteration.summary_of(dataset)}")
    return dataset


def choose(backend: str, /, **options) -> BackendChoice:
    """A robomimic backend choice from Python (what ``train.data_backend`` and ``train.data_backend_kwargs`` give).

    Args:
        backend: The backend's name.
        **options: Its options.

    Returns:
        The :class:`~robo_loaders_plugin.core.spec.BackendChoice`, for :func:`build_dataset`.

    Raises:
        RoboLoadersError: an unknown backend, or a bad option, named.
    """
    return choose_backend(
        "robomimic", backend, options, name_where="train.data_backend", options_where="train.data_backend_kwargs"
    )


def load_data_for_training(config, obs_keys):
    """robomimic's own ``load_data_for_training``, after checking the backend choice and the mixture up front
    (before anything is read).

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.

    Returns:
        What robomimic's function returns (train and validation datasets).

    Raises:
        RoboLoadersError: a bad backend choice or option, or a bad ``train.data_mixture``.
    """
    spec = mixture.mixture_spec(config)
    backend_choice(config)
    if spec is not None:
        return _mixture_splits(config, obs_keys)
    # robomimic's own read raises h5py's bare KeyError on a bad filter key (a native run keeps that behaviour)
    if config.train.get("data_backend") is not None:
        _check_filter_keys(config)
    return compat.original("load_data_for_training")(config, obs_keys)


def _mixture_splits(config, obs_keys):
    """robomimic's ``load_data_for_training`` for a mixture: its checks of the config, then the mixture of each
    split, each component's splits checked by the mixture's build (its filter keys, and that its training and
    validation demos are disjoint: ``mixture_meta.check_disjoint_splits``).

    Why not robomimic's own: it reads ``train.data``'s ``mask/<train.hdf5_filter_key>`` and
    ``mask/<train.hdf5_validation_filter_key>`` before building anything, so the first component's own
    ``filter_key`` was never consulted there: a first component selecting its training demos with its own key was
    refused by h5py's ``KeyError`` for the ``train`` mask it does not have, or by robomimic's overlap assertion for a
    ``train`` mask it does not use; a first component without the validation mask was h5py's traceback where any
    other component gets one line (a reviewer's reproduction)."""
    t = config.train
    validate = bool(config.experiment.validate)
    if t.hdf5_validation_filter_key is not None and not validate:
        raise mixture.MixtureError(
            f"train.hdf5_validation_filter_key is {t.hdf5_validation_filter_key!r} but experiment.validate is false "
            "(as robomimic asserts): set experiment.validate to true, or the key to null"
        )
    if validate and t.hdf5_validation_filter_key is None:
        raise mixture.MixtureError(
            "experiment.validate is true but train.hdf5_validation_filter_key is not set (as robomimic asserts): "
            "name the mask/ key of every component's validation demos, or set experiment.validate to false"
        )
    train = dataset_factory(config, obs_keys, filter_by_attribute=t.hdf5_filter_key)
    if not validate:
        return train, None
    return train, dataset_factory(config, obs_keys, filter_by_attribute=t.hdf5_validation_filter_key)


def _check_filter_keys(config) -> None:
    """The filter keys robomimic's ``load_data_for_training`` will read (``train.hdf5_filter_key``, and with
    ``experiment.validate`` ``train.hdf5_validation_filter_key``) are in ``train.data``'s ``mask/``: one line
    naming the file, the key and the keys it has, before robomimic's read fails on it with h5py's ``KeyError``."""
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5, open_hdf5

    keys = [config.train.hdf5_filter_key]
    if config.experiment.validate:
        keys.append(config.train.hdf5_validation_filter_key)
    keys = [k for k in keys if k is not None]
    path = os.path.expanduser(config.train.data)
    if not keys or not os.path.isfile(path):
        return  # nothing to check, or a missing file: the dataset factory says so
    with open_hdf5(path) as f:  # mask/ only: no validation record written (outside the backend's cache_dir)
        for key in keys:
            RobomimicHdf5.demos(f, key)


def check_obs_keys(dataset_path, all_obs_keys) -> None:
    """The observation keys robomimic's ``get_shape_metadata_from_dataset`` reads from the file's first demo are
    there, in a run whose config picks a backend: one line naming the file, the key and what the demo has, before
    robomimic's read fails on it with h5py's ``KeyError`` (a native run keeps robomimic's own behaviour).

    Args:
        dataset_path: The file robomimic reads the shapes of.
        all_obs_keys: The observation keys it reads.

    Raises:
        SourceError: a key the first demo lacks.
    """
    import h5py

    config = _RUN_CONFIG[0] if _RUN_CONFIG else None
    if config is None or config.train.get("data_backend") is None or not all_obs_keys:
        return
    path = os.path.expanduser(str(dataset_path))
    if not os.path.isfile(path) or not h5py.is_hdf5(path):
        return  # the dataset factory names what is wrong with the file itself
    with h5py.File(path, "r") as f:
        demos = list(f["data"].keys()) if "data" in f else []
        if not demos or f"data/{demos[0]}/obs" not in f:
            return
        obs = f[f"data/{demos[0]}/obs"]
        missing = [k for k in all_obs_keys if k not in obs]
        if missing:
            raise SourceError(
                f"{path}: data/{demos[0]}/obs/{missing[0]} is missing (available under {obs.name}: "
                f"{sorted(obs.keys())}); check the obs keys in observation.modalities"
            )


def sampling_plan(data_loader, built: iteration.Built) -> iteration.SamplingPlan:
    """robomimic's pass, from the DataLoader its ``train()`` builds.

    Shuffled (a RandomSampler, or a shuffling DistributedSampler) or in order, its batch size and ``drop_last``, and
    ``num_data_workers`` as the worker budget; rank, world size and the shared order seed (``train.seed``) as
    :func:`dataset_factory` recorded them. In a one-process run robomimic has no order seed of its own (the
    backend's ``seed`` option, default ``train.seed``, applies).

    Args:
        data_loader: The DataLoader robomimic built.
        built: How its dataset was built (rank, world size, seed).

    Returns:
        The :class:`~robo_loaders_plugin.core.iteration.SamplingPlan`.

    Raises:
        RoboLoadersError: a sampler whose order the backend cannot reproduce (:func:`_shuffled`), or a DataLoader
            without a batch size (its own ``batch_sampler``).
    """
    if data_loader.batch_size is None:  # was int(None)'s TypeError (a reviewer's reproduction)
        raise RoboLoadersError(
            f"robomimic data backend {built.choice.name}: the DataLoader has no batch_size (it was given a "
            "batch_sampler), whose batches the backend does not reproduce (it plans each pass itself); build it with "
            "batch_size=N and shuffle=True (or False), or iterate the DataLoader itself instead of epoch_loader"
        )
    return iteration.SamplingPlan(
        batch_size=int(data_loader.batch_size),
        drop_last=bool(data_loader.drop_last),
        shuffle=_shuffled(data_loader.sampler, built),
        num_workers=int(data_loader.num_workers),
        seed=built.seed if built.world_size > 1 else None,
        pin_memory=bool(data_loader.pin_memory) and torch.cuda.is_available(),
        rank=built.rank,
        world_size=built.world_size,
        worker_context=data_loader.multiprocessing_context,
        prefetch_factor=data_loader.prefetch_factor,
    )


def _shuffled(sampler, built: iteration.Built) -> bool:
    """Whether the DataLoader's sampler shuffles, for a pass the backend plans itself (its own order, split across
    ranks by the backend).

    Why a ``DistributedSampler`` is read and any other sampler refused: robomimic's ``train()`` builds its DataLoader
    with ``shuffle=True`` (a ``RandomSampler``), but a custom loop (``examples/robomimic_ddp.py`` for ``native``) may
    give its own sampler, which the backend does not iterate. A shuffling ``DistributedSampler`` was taken for "in
    order": every pass the same unshuffled order, the same tail windows dropped at every epoch (a reviewer's
    reproduction); a weighted or subset sampler's choice of windows was dropped without a word.

    Raises:
        RoboLoadersError: a sampler whose order the backend cannot reproduce.
    """
    if isinstance(sampler, torch.utils.data.RandomSampler):
        return True
    if isinstance(sampler, torch.utils.data.SequentialSampler):
        return False
    if isinstance(sampler, torch.utils.data.distributed.DistributedSampler):
        return bool(sampler.shuffle)  # its split is the backend's own (rank and world size as the dataset was built)
    raise RoboLoadersError(
        f"robomimic data backend {built.choice.name}: the DataLoader's sampler is a {type(sampler).__name__}, whose "
        "order the backend does not reproduce (it plans each pass itself, split across ranks); build the DataLoader "
        "with shuffle=True (or shuffle=False) and no sampler, or a DistributedSampler"
    )


def epoch_loader(data_loader):
    """What an epoch iterates instead of the DataLoader robomimic built, by the backend choice's kind.

    Args:
        data_loader: The DataLoader robomimic built.

    Returns:
        ``data_loader`` itself (``native``, ``sample`` kind), in-process batches over its sampler (``indexed``), or
        the dataset's batch source (``batch``) (``core.iteration.pass_batches``).

    Raises:
        RoboLoadersError: in a multi-process run, at the first pass: the ranks disagree on their setup, or no
            ``torch.distributed`` process group is initialised to check them (``core.iteration.check_first_pass``).
    """
    return iteration.pass_batches(data_loader, sampling_plan)


def run_epoch(model, data_loader, epoch, validate=False, num_steps=None, obs_normalization_stats=None):
    """robomimic's ``run_epoch`` over :func:`epoch_loader` (robomimic builds its DataLoader inside train()).

    Args:
        model: As robomimic's ``run_epoch``.
        data_loader: The DataLoader robomimic built.
        epoch: As robomimic's ``run_epoch``.
        validate: As robomimic's ``run_epoch``.
        num_steps: As robomimic's ``run_epoch`` (``train.epoch_every_n_steps``).
        obs_normalization_stats: As robomimic's ``run_epoch``.

    Returns:
        What robomimic's ``run_epoch`` returns (the epoch's logged statistics).

    Raises:
        RoboLoadersError: as :func:`epoch_loader`.
    """
    return compat.original("run_epoch")(
        model,
        epoch_loader(data_loader),
        epoch,
        validate=validate,
        num_steps=num_steps,
        obs_normalization_stats=obs_normalization_stats,
    )


_RUN_CONFIG: list = []  # the config of the run robomimic's train() is setting up (get_exp_dir's), at most one


def get_exp_dir(config, *args, **kwargs):
    """robomimic's ``get_exp_dir``, remembering the run's config for :func:`shape_metadata`.

    Why here: ``train()`` reads ``train.data``'s shapes (``get_shape_metadata_from_dataset``, which is given a
    path, not the config) before it builds any dataset; ``get_exp_dir(config)`` is its first call with the config.

    Args:
        config: robomimic's config.
        *args: ``get_exp_dir``'s.
        **kwargs: ``get_exp_dir``'s.

    Returns:
        What robomimic's returns.
    """
    _RUN_CONFIG[:] = [config]
    return compat.original("get_exp_dir")(config, *args, **kwargs)


def own_obs_keys(dataset_path) -> dict[str, str]:
    """The observation keys ``train.data`` holds under another name than the config's: those a mixture's first
    component renames (``{config key: its own key}``), for robomimic's read of its shapes.

    Why: robomimic reads the shapes its models are built for from ``train.data`` under the config's names; a first
    component that renames a key has it under its own name, so the read failed (h5py's ``KeyError``, or the one-line
    check blaming an intact file: a reviewer's reproduction).

    Args:
        dataset_path: The file robomimic reads the shapes of.

    Returns:
        The renamed keys (empty: none, or no mixture).
    """
    config = _RUN_CONFIG[0] if _RUN_CONFIG else None
    if config is None or not mixture.applies(config, dataset_path):
        return {}
    spec = mixture.mixture_spec(config)
    rename = dict((spec.components[0].rename or {}) if spec is not None else {})
    return {key: own for own, key in rename.items() if own != key}


def shape_metadata(shape_meta: dict, dataset_path) -> dict:
    """The shapes robomimic's models are built for: ``train.data``'s, or with a mixture (``train.data`` its first
    component) the mixture's padded ones (``mixture.padded_shape_meta``).

    Args:
        shape_meta: What ``get_shape_metadata_from_dataset`` read from ``dataset_path``.
        dataset_path: The file it read.

    Returns:
        ``shape_meta``, padded for a mixture.

    Raises:
        MixtureError: the mixture is refused (its components' metadata), before any data is read.
    """
    config = _RUN_CONFIG[0] if _RUN_CONFIG else None
    if config is None or not mixture.applies(config, dataset_path):
        return shape_meta
    return mixture.padded_shape_meta(config, shape_meta)
