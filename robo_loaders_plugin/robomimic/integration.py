"""robomimic-facing entry points: the functions the patches install, usable directly as a library too."""
from __future__ import annotations

import torch.utils.data

from robo_loaders_plugin.batch_dataset import is_batch_dataset
from robo_loaders_plugin.registry import get_backend
from robo_loaders_plugin.robomimic.patches import original
from robo_loaders_plugin.spec import RoboLoadersError
from robo_loaders_plugin.threaded_batches import ThreadedBatches

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


def dataset_factory(config, obs_keys, filter_by_attribute=None, dataset_path=None):
    """Drop-in for ``robomimic.utils.train_utils.dataset_factory`` that honours ``train.data_backend``."""
    spec, options = backend_choice(config)
    explicit = config.train.get("data_backend") is not None
    if spec.name == "native" and not explicit:
        return original("dataset_factory")(config, obs_keys, filter_by_attribute=filter_by_attribute,
                                           dataset_path=dataset_path)
    factory = spec.factory_for("robomimic")
    dataset = factory(config, obs_keys, filter_by_attribute=filter_by_attribute, dataset_path=dataset_path,
                      **options)
    split = filter_by_attribute or "all demos"
    summary = getattr(dataset, "build_summary", None) or f"{len(dataset)} samples"
    print(f"{LOG_PREFIX} robomimic data backend: {spec.name} [{split}] {summary}", flush=True)
    return dataset


def load_data_for_training(config, obs_keys):
    """robomimic's own ``load_data_for_training``, after checking the backend choice up front."""
    backend_choice(config)
    return original("load_data_for_training")(config, obs_keys)


def epoch_loader(data_loader):
    """What an epoch should iterate instead of the DataLoader robomimic built: a batch-level backend's batches,
    a sample-level backend's in-process threaded batches (same order, same RNG use), or the DataLoader itself."""
    dataset = getattr(data_loader, "dataset", None)
    if is_batch_dataset(dataset):
        shuffle = isinstance(getattr(data_loader, "sampler", None), torch.utils.data.RandomSampler)
        return dataset.batches(batch_size=data_loader.batch_size, shuffle=shuffle,
                               drop_last=data_loader.drop_last, num_workers=data_loader.num_workers)
    if (getattr(dataset, "in_process_batches", False) and data_loader.batch_sampler is not None
            and data_loader.collate_fn is torch.utils.data.default_collate
            and not data_loader.persistent_workers and data_loader.worker_init_fn is None):
        return ThreadedBatches(dataset.collated, data_loader.batch_sampler, data_loader.generator,
                               data_loader.num_workers)
    return data_loader


def run_epoch(model, data_loader, epoch, validate=False, num_steps=None, obs_normalization_stats=None):
    """robomimic's ``run_epoch`` over :func:`epoch_loader` (robomimic builds its DataLoader inside train())."""
    data_loader = epoch_loader(data_loader)
    return original("run_epoch")(model, data_loader, epoch, validate=validate, num_steps=num_steps,
                                 obs_normalization_stats=obs_normalization_stats)
