"""LeRobot adapter: with robo_loaders_plugin.robomimic, the only package that touches a framework; every patch and
private read is in ``compat``.

Kept import-safe and light: LeRobot's ``--dataset.discover_packages_path=robo_loaders_plugin`` imports the
plugin's direct submodules, and this one is among them.
"""

from __future__ import annotations


def make_dataset(cfg):
    """Same contract as ``lerobot.datasets.factory.make_dataset(cfg)``; honours ``cfg.dataset.backend``.

    Args:
        cfg: lerobot-train's ``TrainPipelineConfig``.

    Returns:
        LeRobot's dataset, or the configured backend's dataset serving it.
    """
    from robo_loaders_plugin.lerobot.integration import make_dataset as _make

    return _make(cfg)


def make_train_eval_datasets(cfg):
    """Same contract as LeRobot 0.6.1's ``make_train_eval_datasets(cfg)``; honours ``cfg.dataset.backend``.

    Args:
        cfg: lerobot-train's ``TrainPipelineConfig``.

    Returns:
        ``(train, eval)`` datasets, each served by the configured backend.
    """
    from robo_loaders_plugin.lerobot.integration import make_train_eval_datasets as _make

    return _make(cfg)


__all__ = ["make_dataset", "make_train_eval_datasets"]
