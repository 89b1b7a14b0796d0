"""Every monkeypatch this plugin applies to robomimic, in one place.

Applied lazily by the import hook (``robo_loaders_plugin._autopatch``) right after robomimic's own module code
runs, or explicitly by ``robo-loaders robomimic-train`` / :func:`apply_all`. Each patch is idempotent and keeps the
original in :data:`ORIGINALS`.

1. ``robomimic.config.base_config.BaseConfig.train_config``: adds ``train.data_backend`` (null = robomimic's own
   SequenceDataset) and ``train.data_backend_kwargs`` (free dict) to every algorithm's config, so a JSON config
   carrying them loads.
2. ``robomimic.utils.train_utils.dataset_factory``: builds the configured backend's dataset. ``load_data_for_training``
   looks it up as a module global, so train and validation sets both go through it.
3. ``robomimic.utils.train_utils.load_data_for_training``: checks the backend name and options first, so a typo
   fails before any data is read (and before any training step).
4. ``robomimic.utils.train_utils.run_epoch``: when the DataLoader wraps a batch-level backend, the epoch pulls
   whole batches from the backend instead (robomimic builds its DataLoader inside ``train()``).
"""
from __future__ import annotations

import functools

ORIGINALS: dict[str, object] = {}
_MARK = "__robo_loaders_patched__"


def original(name: str):
    """The unpatched robomimic function ``name`` (works whether or not the patches are applied)."""
    if name in ORIGINALS:
        return ORIGINALS[name]
    if name == "train_config":
        from robomimic.config.base_config import BaseConfig

        return BaseConfig.train_config
    import robomimic.utils.train_utils as TrainUtils

    return getattr(TrainUtils, name)


def patch_base_config(module) -> None:
    BaseConfig = module.BaseConfig
    orig = BaseConfig.train_config
    if getattr(orig, _MARK, False):
        return
    ORIGINALS["train_config"] = orig

    @functools.wraps(orig)
    def train_config(self):
        orig(self)
        self.train.data_backend = None       # null = robomimic's own SequenceDataset
        self.train.data_backend_kwargs = {}  # a plain dict: stays open to any key after lock()

    setattr(train_config, _MARK, True)
    BaseConfig.train_config = train_config


def patch_train_utils(module) -> None:
    if getattr(module.dataset_factory, _MARK, False):
        return
    from robo_loaders_plugin.robomimic import integration

    for name, new in (("dataset_factory", integration.dataset_factory),
                      ("load_data_for_training", integration.load_data_for_training),
                      ("run_epoch", integration.run_epoch)):
        ORIGINALS[name] = getattr(module, name)
        wrapper = functools.wraps(ORIGINALS[name])(functools.partial(new))
        setattr(wrapper, _MARK, True)
        setattr(module, name, wrapper)


def apply_all() -> None:
    """Import robomimic's patched modules and patch them now (for users who disabled the import hook)."""
    import robomimic.config.base_config as base_config
    import robomimic.utils.train_utils as train_utils

    patch_base_config(base_config)
    patch_train_utils(train_utils)
