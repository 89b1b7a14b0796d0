"""The ``native`` backend on robomimic: robomimic's own ``SequenceDataset``, the reference every other backend is
compared with.
"""

from __future__ import annotations


def native_dataset(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options=None):
    """robomimic's own SequenceDataset, built by robomimic's own (unpatched) dataset_factory: the ``native``
    backend, the baseline every other one is compared with.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to serve.
        filter_by_attribute: A filter key under ``mask/`` selecting the demos (``None``: every demo).
        dataset_path: The HDF5 file (``None``: ``config.train.data``).
        options: Unused (``native`` declares no options).

    Returns:
        robomimic's ``SequenceDataset``.
    """
    from robo_loaders_plugin.robomimic.compat import original

    return original("dataset_factory")(
        config, obs_keys, filter_by_attribute=filter_by_attribute, dataset_path=dataset_path
    )
