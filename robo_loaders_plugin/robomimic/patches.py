"""Which adapter function each robomimic patch point gets (the mechanics, and every private read, are in
``robomimic.compat``). The start-up import hook (``_autopatch``) calls these with robomimic's freshly imported
modules; :func:`apply_all` patches them on demand (``robo-loaders robomimic-train``, users without the hook)."""

from __future__ import annotations

from robo_loaders_plugin.robomimic import compat


def patch_base_config(module) -> None:
    """``robomimic.config.base_config``: every algorithm's config gets ``train.data_backend(_kwargs)``.

    Args:
        module: ``robomimic.config.base_config``, freshly imported.
    """
    compat.patch_base_config(module)


def patch_train_utils(module) -> None:
    """``robomimic.utils.train_utils``: the backend's dataset, the choice checked up front, its passes.

    Args:
        module: ``robomimic.utils.train_utils``, freshly imported.
    """
    from robo_loaders_plugin.robomimic import integration

    compat.patch_train_utils(
        module,
        {
            "dataset_factory": integration.dataset_factory,
            "load_data_for_training": integration.load_data_for_training,
            "run_epoch": integration.run_epoch,
            "get_exp_dir": integration.get_exp_dir,
        },
    )


def patch_file_utils(module) -> None:
    """``robomimic.utils.file_utils``: a mixture's padded shapes for ``train.data``.

    Args:
        module: ``robomimic.utils.file_utils``, freshly imported.
    """
    from robo_loaders_plugin.robomimic import integration

    compat.patch_file_utils(module, integration.shape_metadata, integration.check_obs_keys, integration.own_obs_keys)


def apply_all() -> None:
    """Import robomimic's patched modules and patch them now (for users who disabled the import hook)."""
    import robomimic.config.base_config as base_config
    import robomimic.utils.file_utils as file_utils
    import robomimic.utils.train_utils as train_utils

    patch_base_config(base_config)
    patch_train_utils(train_utils)
    patch_file_utils(file_utils)
