"""LeRobot-facing entry points: what the patches install, usable directly as a library too."""
from __future__ import annotations

import json
import threading

from robo_loaders_plugin.registry import get_backend
from robo_loaders_plugin.spec import RoboLoadersError

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
    out = spec.factory_for("lerobot")(dataset, **options)
    summary = getattr(out, "build_summary", None) or f"{len(out)} samples"
    print(f"{LOG_PREFIX} lerobot data backend: {spec.name} [{cfg.dataset.repo_id}] {summary}", flush=True)
    return out


def make_dataset(cfg):
    """Mirror of ``lerobot.datasets.factory.make_dataset(cfg)`` honouring ``cfg.dataset.backend``."""
    from robo_loaders_plugin.lerobot.patches import original

    backend_choice(cfg.dataset)  # fail on a bad name/option before reading anything
    native = original("make_dataset")(cfg)
    if getattr(_state, "raw", False):  # called from make_train_eval_datasets: converted there
        return native
    return convert(native, cfg)


def make_train_eval_datasets(cfg):
    """Mirror of 0.6.1's ``make_train_eval_datasets(cfg)``: LeRobot splits episodes, then each split is served
    by the configured backend (the full dataset is not cached when it is split)."""
    from robo_loaders_plugin.lerobot.patches import original

    backend_choice(cfg.dataset)
    _state.raw = True
    try:
        train, evaluation = original("make_train_eval_datasets")(cfg)
    finally:
        _state.raw = False
    return convert(train, cfg), convert(evaluation, cfg)


def cycle(dataloader):
    """``lerobot-train``'s ``cycle(dataloader)``: a dataset with its own training pipeline serves the batches
    (it reads the sampler's frames, seed, epoch and offset off ``dataloader``); otherwise LeRobot's cycle."""
    from robo_loaders_plugin.lerobot.patches import ORIGINALS

    dataset = getattr(dataloader, "dataset", None)
    if hasattr(dataset, "cycle"):
        return dataset.cycle(dataloader)
    if "cycle" in ORIGINALS:
        return ORIGINALS["cycle"](dataloader)
    from lerobot.utils.utils import cycle as lerobot_cycle

    return lerobot_cycle(dataloader)
