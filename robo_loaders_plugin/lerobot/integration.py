"""LeRobot-facing entry points: what the patches install (``lerobot.compat``), usable directly as a library too."""
from __future__ import annotations

import contextlib
import json
import os
import threading

import numpy as np
import torch

from robo_loaders_plugin.core import iteration
from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.registry import get_backend
from robo_loaders_plugin.lerobot import compat
from robo_loaders_plugin.sources.lerobot_v3 import is_remote, mirror_tables

LOG_PREFIX = "[robo-loaders]"
_state = threading.local()


def backend_choice(dataset_cfg):
    """(spec, validated options) for ``cfg.dataset``; ``backend`` missing or "native" means LeRobot's own."""
    name = getattr(dataset_cfg, "backend", None) or "native"
    kwargs = getattr(dataset_cfg, "backend_kwargs", None) or {}
    if name == "native":  # a resumed config may carry options of a backend used before: ignore them
        return get_backend("native"), {}
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs) if kwargs.strip() else {}
        except json.JSONDecodeError as exc:
            raise RoboLoadersError(f"--dataset.backend_kwargs must be a JSON object, e.g. "
                                   f"'{{\"codec\": \"zstd\"}}': {exc}") from None
    if not isinstance(kwargs, dict):
        raise RoboLoadersError(f"--dataset.backend_kwargs must be a JSON object, got {type(kwargs).__name__}")
    spec = get_backend(name)
    if "lerobot" not in spec.frameworks:
        raise RoboLoadersError(f"backend {name!r} does not support LeRobot (it supports {list(spec.frameworks)})")
    return spec, spec.validate_options(kwargs, where="--dataset.backend_kwargs")


def convert(dataset, cfg):
    """Serve ``dataset`` (a LeRobotDataset built by LeRobot's factory) through the configured backend."""
    spec, options = backend_choice(cfg.dataset)
    if spec.name == "native" or dataset is None:
        return dataset
    if getattr(cfg.dataset, "streaming", False):
        raise RoboLoadersError(f"--dataset.backend={spec.name} replaces LeRobot's map-style dataset; it cannot be "
                               "combined with --dataset.streaming=true")
    compat.check_version()
    spec.check_device()
    out = spec.factory_for("lerobot")(dataset, **options)
    iteration.record_built(spec, out)
    summary = getattr(out, "build_summary", None) or f"{len(out)} samples"
    print(f"{LOG_PREFIX} lerobot data backend: {spec.name} [{cfg.dataset.repo_id}] {summary}", flush=True)
    return out


@contextlib.contextmanager
def _streamed_source(cfg):
    """A backend streaming from a remote ``source`` (video_stream): LeRobot builds its dataset object from a local
    copy of the tables (``meta/`` and ``data/``, refreshed when they change), the videos stay where they are."""
    spec, options = backend_choice(cfg.dataset)
    url = options.get("source")
    if spec.name != "video_stream" or not is_remote(url):
        yield
        return
    from robo_loaders_plugin.storage.cache import cache_root, short_hash

    local = os.path.join(cache_root(None), f"video-stream-tables-{short_hash(url)}")
    print(f"{LOG_PREFIX} video_stream: tables of {url} copied to {local}; videos streamed from {url}", flush=True)
    cfg.dataset.root = mirror_tables(url, local, options.get("storage_options"))
    with compat.tables_only():
        yield


def make_dataset(cfg):
    """Mirror of ``lerobot.datasets.factory.make_dataset(cfg)`` honouring ``cfg.dataset.backend``."""
    backend_choice(cfg.dataset)  # fail on a bad name/option before reading anything
    with _streamed_source(cfg):
        native = compat.original("make_dataset")(cfg)
    if getattr(_state, "raw", False):  # called from make_train_eval_datasets: converted there
        return native
    return convert(native, cfg)


def make_train_eval_datasets(cfg):
    """Mirror of 0.6.1's ``make_train_eval_datasets(cfg)``: LeRobot splits episodes, then each split is served
    by the configured backend (the full dataset is not cached when it is split)."""
    backend_choice(cfg.dataset)
    _state.raw = True
    try:
        with _streamed_source(cfg):
            train, evaluation = compat.original("make_train_eval_datasets")(cfg)
    finally:
        _state.raw = False
    return convert(train, cfg), convert(evaluation, cfg)


def sampling_plan(dataloader) -> iteration.SamplingPlan:
    """``lerobot-train``'s pass, from the DataLoader it builds: the frames its EpisodeAwareSampler serves (episode
    filter, ``drop_n_last_frames``), its seed, and the epoch/offset ``--resume`` positioned it at; batch size,
    ``drop_last``, ``--num_workers`` and pinned memory from the DataLoader; this process's rank and the world size
    from accelerate's split of it (``compat.rank_split``). Public sampler API only.

    Resume under several processes: LeRobot's ``compute_sampler_state`` puts ``start_index`` at
    ``batches_into_epoch * batch_size * world_size`` (every step consumed one batch on every rank), so every rank
    starts at batch ``start_index // (batch_size * world_size)`` of its own share."""
    split = compat.rank_split(dataloader)
    batch_sampler = split.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    try:
        items = np.asarray(sampler.indices, dtype=np.int64)
        state, seed, shuffle = sampler.state_dict(), int(sampler.seed), bool(sampler.shuffle)
    except AttributeError:
        raise RoboLoadersError(f"this backend expects lerobot-train's EpisodeAwareSampler, found "
                               f"{type(sampler).__name__}; this LeRobot version is not supported") from None
    batch_size = int(batch_sampler.batch_size)
    return iteration.SamplingPlan(
        batch_size=batch_size, drop_last=bool(batch_sampler.drop_last), shuffle=shuffle, seed=seed,
        num_workers=max(1, int(dataloader.num_workers)), items=items, start_epoch=int(state["epoch"]),
        start_batch=int(state["start_index"]) // (batch_size * split.world_size),
        pin_memory=bool(getattr(dataloader, "pin_memory", False)) and torch.cuda.is_available(),
        rank=split.rank, world_size=split.world_size)


def cycle(dataloader):
    """``lerobot-train``'s ``cycle(dataloader)``: passes of what the backend's declared kind says, forever."""
    source = iteration.pass_batches(dataloader, sampling_plan)
    spec = iteration.built_by(getattr(dataloader, "dataset", None))
    if isinstance(source, iteration.BatchSource):
        print(f"{LOG_PREFIX} {spec.name}: lerobot-train's batches come from {source.describe()}", flush=True)
    elif isinstance(source, iteration.SamplerBatches):
        print(f"{LOG_PREFIX} {spec.name}: lerobot-train's batches are built in the training process "
              f"({source.num_threads} threads) over its sampler's order", flush=True)
    return iteration.batch_stream(dataloader, sampling_plan, compat.native_cycle)
