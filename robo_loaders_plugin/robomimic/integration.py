"""robomimic-facing entry points: the functions the patches install (``robomimic.compat``), usable directly as a
library too."""
from __future__ import annotations

import torch
import torch.utils.data

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.ranks import resolve_ranks
from robo_loaders_plugin.core.registry import get_backend
from robo_loaders_plugin.core.spec import SAMPLE
from robo_loaders_plugin.robomimic import compat

LOG_PREFIX = "[robo-loaders]"


def backend_choice(config):
    """(spec, validated options) of ``config.train.data_backend``; raises listing registered backends."""
    name = config.train.get("data_backend")  # dict.get: configs built without the patch lack the key
    kwargs = config.train.get("data_backend_kwargs") or {}
    if name is None:
        name = "native"
    if not isinstance(name, str):
        raise RoboLoadersError(f"train.data_backend must be a backend name (string) or null, got {name!r}")
    if not isinstance(kwargs, dict):
        raise RoboLoadersError(f"train.data_backend_kwargs must be a JSON object, got {type(kwargs).__name__}")
    spec = get_backend(name)
    if "robomimic" not in spec.frameworks:
        raise RoboLoadersError(f"backend {name!r} does not support robomimic (it supports {list(spec.frameworks)})")
    options = spec.validate_options(dict(kwargs), where="train.data_backend_kwargs")
    return spec, options


def dataset_factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, rank=None, world_size=None):
    """Drop-in for ``robomimic.utils.train_utils.dataset_factory`` that honours ``train.data_backend``.

    ``rank``/``world_size`` (default: ``torch.distributed``, else torchrun's ``RANK``/``WORLD_SIZE``): in a loop
    running one process per GPU, each rank's passes (through robomimic's ``run_epoch``) serve its own share of
    every pass, the same number of batches on every rank, ordered by ``train.seed`` (the same on every rank)."""
    spec, options = backend_choice(config)
    if config.train.get("data_backend") is None:
        return compat.original("dataset_factory")(config, obs_keys, filter_by_attribute=filter_by_attribute,
                                                  dataset_path=dataset_path)
    rank, world_size = resolve_ranks(rank, world_size, "robomimic dataset_factory: ")
    compat.check_version()
    spec.check_device()
    dataset = spec.factory_for("robomimic")(config, obs_keys, filter_by_attribute=filter_by_attribute,
                                            dataset_path=dataset_path, **options)
    iteration.record_built(spec, dataset)
    if world_size > 1:
        if spec.kind == SAMPLE:
            print(f"{LOG_PREFIX} {spec.name} (rank {rank} of {world_size}): this backend serves single samples "
                  "through your DataLoader, which must split passes itself (a DistributedSampler)", flush=True)
        else:
            dataset.rank, dataset.world_size, dataset.order_seed = rank, world_size, int(config.train.seed)
    split = filter_by_attribute or "all demos"
    summary = getattr(dataset, "build_summary", None) or f"{len(dataset)} samples"
    print(f"{LOG_PREFIX} robomimic data backend: {spec.name} [{split}] {summary}", flush=True)
    return dataset


def load_data_for_training(config, obs_keys):
    """robomimic's own ``load_data_for_training``, after checking the backend choice up front."""
    backend_choice(config)
    return compat.original("load_data_for_training")(config, obs_keys)


def sampling_plan(data_loader) -> iteration.SamplingPlan:
    """robomimic's pass, from the DataLoader its ``train()`` builds: shuffled (RandomSampler) or in order, its
    batch size and ``drop_last``, and ``num_data_workers`` as the worker budget. robomimic has no order seed of its
    own (the backend's ``seed`` option, default ``train.seed``, applies). Rank and world size: what
    :func:`dataset_factory` recorded on the dataset."""
    dataset = data_loader.dataset
    return iteration.SamplingPlan(
        batch_size=int(data_loader.batch_size), drop_last=bool(data_loader.drop_last),
        shuffle=isinstance(data_loader.sampler, torch.utils.data.RandomSampler),
        num_workers=int(data_loader.num_workers), seed=getattr(dataset, "order_seed", None),
        pin_memory=bool(data_loader.pin_memory) and torch.cuda.is_available(),
        rank=getattr(dataset, "rank", 0), world_size=getattr(dataset, "world_size", 1))


def epoch_loader(data_loader):
    """What an epoch iterates instead of the DataLoader robomimic built, by the backend's declared kind."""
    return iteration.pass_batches(data_loader, sampling_plan)


def run_epoch(model, data_loader, epoch, validate=False, num_steps=None, obs_normalization_stats=None):
    """robomimic's ``run_epoch`` over :func:`epoch_loader` (robomimic builds its DataLoader inside train())."""
    return compat.original("run_epoch")(model, epoch_loader(data_loader), epoch, validate=validate,
                                        num_steps=num_steps, obs_normalization_stats=obs_normalization_stats)
