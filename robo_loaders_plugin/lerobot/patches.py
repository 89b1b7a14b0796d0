"""Every monkeypatch this plugin applies to LeRobot, in one place.

Applied lazily by the import hook (``robo_loaders_plugin._autopatch``) right after LeRobot's own module code
runs, or by :func:`apply_all` when LeRobot imports the plugin through
``--dataset.discover_packages_path=robo_loaders_plugin`` (see ``robo_loaders_plugin.lerobot_discover``).
Each patch is idempotent and keeps the original in :data:`ORIGINALS`.

1. ``lerobot.configs.train.TrainPipelineConfig.dataset`` is re-typed to a ``DatasetConfig`` subclass with
   ``backend`` and ``backend_kwargs`` (``robo_loaders_plugin.lerobot.config``).
2. ``lerobot.datasets.factory.make_dataset`` and ``make_train_eval_datasets`` build LeRobot's dataset, then serve
   it through the configured backend.
3. ``lerobot.scripts.lerobot_train.make_train_eval_datasets`` (0.6.1) / ``make_dataset`` (0.4.x): the training
   script from-imports the factory; rebound when the script was imported before the factory was patched.
4. ``lerobot.scripts.lerobot_train.cycle``: for a dataset that brings its own training pipeline (``datapipe``),
   the loop's ``cycle(dataloader)`` yields the pipeline's batches; any other dataset goes to LeRobot's ``cycle``.
"""
from __future__ import annotations

import functools
import sys

ORIGINALS: dict[str, object] = {}
_MARK = "__robo_loaders_patched__"
FACTORY_FUNCS = ("make_dataset", "make_train_eval_datasets")


def original(name: str):
    if name in ORIGINALS:
        return ORIGINALS[name]
    import lerobot.datasets.factory as factory

    return getattr(factory, name)


def patch_train_config(module) -> None:
    from robo_loaders_plugin.lerobot.config import install

    install(module.TrainPipelineConfig)


def patch_factory(module) -> None:
    from robo_loaders_plugin.lerobot import integration

    for name in FACTORY_FUNCS:
        current = getattr(module, name, None)
        if current is None or getattr(current, _MARK, False):
            continue
        ORIGINALS[name] = current
        new = getattr(integration, name)

        @functools.wraps(current)
        def wrapper(*args, __new=new, **kwargs):
            return __new(*args, **kwargs)

        setattr(wrapper, _MARK, True)
        setattr(module, name, wrapper)
    _rebind_script()


def patch_train_script(module) -> None:
    _rebind_script(module)
    current = getattr(module, "cycle", None)
    if current is not None and not getattr(current, _MARK, False):
        ORIGINALS["cycle"] = current
        from robo_loaders_plugin.lerobot import integration

        @functools.wraps(current)
        def cycle(dataloader):
            return integration.cycle(dataloader)

        setattr(cycle, _MARK, True)
        module.cycle = cycle


def _rebind_script(module=None) -> None:
    module = module or sys.modules.get("lerobot.scripts.lerobot_train")
    factory = sys.modules.get("lerobot.datasets.factory")
    if module is None or factory is None:
        return
    for name in FACTORY_FUNCS:
        if hasattr(module, name) and not getattr(getattr(module, name), _MARK, False):
            setattr(module, name, getattr(factory, name))


def apply_all() -> None:
    import lerobot.configs.train as train_config
    import lerobot.datasets.factory as factory

    patch_train_config(train_config)
    patch_factory(factory)
    script = sys.modules.get("lerobot.scripts.lerobot_train")
    if script is not None:
        patch_train_script(script)
