"""The factories and footprints :func:`~robo_loaders_plugin.sdk.frame_backend` declares, light to import (a backend's
registration imports this module): each follows its framework's protocol (``robo_loaders_plugin.extend``, the
contracts) and imports the serving half (``sdk.serve``: torch, the framework, the store) only when it runs.

Why ``functools.partial`` of these instead of one function per backend: a factory is found by the registry either
as ``"module:function"`` or as a callable, and a partial of a module-level function pickles by reference, carries
which store and backend it serves, and has a signature the registration checks like any other factory's.
"""

from __future__ import annotations


def robomimic_factory(
    config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, store: str, backend: str
):
    """robomimic's ``SequenceDataset`` samples served from a frame store.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (``None``: ``config.train.data``).
        options: The backend's resolved options object.
        store: The store class, ``"module:Class"``.
        backend: The backend's name.

    Returns:
        The dataset (``sdk.serve.robomimic_dataset``).
    """
    from robo_loaders_plugin.sdk.serve import robomimic_dataset

    return robomimic_dataset(store, backend, config, obs_keys, filter_by_attribute, dataset_path, options=options)


def lerobot_factory(native, *, options, store: str, backend: str):
    """``LeRobotDataset``'s items served from a frame store.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own ``make_dataset`` built.
        options: The backend's resolved options object.
        store: The store class, ``"module:Class"``.
        backend: The backend's name.

    Returns:
        The dataset (``sdk.serve.lerobot_dataset``).
    """
    from robo_loaders_plugin.sdk.serve import lerobot_dataset

    return lerobot_dataset(store, backend, native, options=options)


def robomimic_footprint(
    config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options, committed, store: str, backend: str
):
    """What :func:`robomimic_factory` will need for this file, placed as it places the store, with ``committed``
    held beside it (``BackendSpec.footprints``): metadata only, nothing read or built.

    Args:
        config: robomimic's config.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (``None``: ``config.train.data``).
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.
        store: The store class, ``"module:Class"``.
        backend: The backend's name.

    Returns:
        A ``core.footprint.Planned`` (``sdk.serve.robomimic_plan``).
    """
    from robo_loaders_plugin.sdk.serve import robomimic_plan

    return robomimic_plan(
        store, backend, config, obs_keys, filter_by_attribute, dataset_path, options=options, committed=committed
    )


def lerobot_footprint(native, *, options, committed, store: str, backend: str):
    """What :func:`lerobot_factory` will need for this dataset, placed as it places the store, with ``committed``
    held beside it (``BackendSpec.footprints``): ``meta/`` only, nothing read or built.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own ``make_dataset`` built.
        options: The backend's resolved options object.
        committed: A ``core.footprint.Footprint`` other datasets hold beside this one.
        store: The store class, ``"module:Class"``.
        backend: The backend's name.

    Returns:
        A ``core.footprint.Planned`` (``sdk.serve.lerobot_plan``).
    """
    from robo_loaders_plugin.sdk.serve import lerobot_plan

    return lerobot_plan(store, backend, native, options=options, committed=committed)
