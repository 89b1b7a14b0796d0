"""Which adapter function each LeRobot patch point gets (the mechanics, and every private read, are in
``lerobot.compat``). The start-up import hook (``_autopatch``) calls these with LeRobot's freshly imported
modules; :func:`apply_all` patches them on demand (``--dataset.discover_packages_path=robo_loaders_plugin``)."""

from __future__ import annotations

from robo_loaders_plugin.lerobot import compat


def patch_train_config(module) -> None:
    """``lerobot.configs.train``: ``--dataset.backend`` and ``--dataset.backend_kwargs``.

    Args:
        module: ``lerobot.configs.train``, freshly imported.
    """
    from robo_loaders_plugin.lerobot.config import BackendDatasetConfig

    compat.patch_train_config(module, BackendDatasetConfig)


def patch_factory(module) -> None:
    """``lerobot.datasets.factory``: LeRobot's dataset, then served by the configured backend.

    Args:
        module: ``lerobot.datasets.factory``, freshly imported.
    """
    from robo_loaders_plugin.lerobot import integration

    compat.patch_factory(
        module,
        {"make_dataset": integration.make_dataset, "make_train_eval_datasets": integration.make_train_eval_datasets},
    )


def patch_train_script(module) -> None:
    """``lerobot.scripts.lerobot_train``: its ``cycle`` and a check of ``--dataset.backend_kwargs``.

    Args:
        module: ``lerobot.scripts.lerobot_train``, freshly imported.
    """
    from robo_loaders_plugin.lerobot import integration

    compat.patch_train_script(
        module, integration.cycle, integration.check_command_line, integration.save_component_stats
    )


def patch_parser(module) -> None:
    """``lerobot.configs.parser``: its ``wrap``, so that the training script run as ``python -m`` is patched at
    its ``train``'s first call (``compat.patch_parser``).

    Args:
        module: ``lerobot.configs.parser``, freshly imported.
    """
    compat.patch_parser(module, patch_train_script)


def apply_all() -> None:
    """Import LeRobot's patched modules and patch them now."""
    import lerobot.configs.train as train_config
    import lerobot.datasets.factory as factory

    patch_train_config(train_config)
    patch_factory(factory)
    script = compat.train_script()
    if script is not None:
        patch_train_script(script)
