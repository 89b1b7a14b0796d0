"""robomimic adapter: with robo_loaders_plugin.lerobot, the only package that touches a framework; every patch and
private read is in ``compat``."""

from __future__ import annotations


def dataset_factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, rank=None, world_size=None):
    """Same signature and contract as ``robomimic.utils.train_utils.dataset_factory``, plus the ranks.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (default: ``config.train.data``).
        rank: This process's rank (``None``: torch.distributed's, else 0); docs/multi-process.md.
        world_size: The number of processes (``None``: torch.distributed's, else 1).

    Returns:
        The dataset of the backend named by ``config.train.data_backend`` (robomimic's SequenceDataset when it is
        null).
    """
    from robo_loaders_plugin.robomimic.integration import dataset_factory as _factory

    return _factory(
        config,
        obs_keys,
        filter_by_attribute=filter_by_attribute,
        dataset_path=dataset_path,
        rank=rank,
        world_size=world_size,
    )


__all__ = ["dataset_factory"]
