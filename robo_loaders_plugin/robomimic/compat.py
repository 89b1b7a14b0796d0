"""Everything this plugin changes in robomimic, or reads from its inside: robomimic 0.3.0, in one module.

Patches (the mechanics are here; which adapter function each patch point gets is ``robomimic.patches``, applied by
the start-up import hook right after robomimic's module code runs, or by ``robomimic.patches.apply_all``; each is
idempotent and keeps the original in :data:`ORIGINALS`). This module imports nothing from the adapter: it is a
leaf, so what touches robomimic's inside can be read (and audited against a new robomimic) alone.

1. ``robomimic.config.base_config.BaseConfig.train_config`` also sets ``train.data_backend`` (null),
   ``train.data_backend_kwargs`` ({}) and ``train.data_mixture`` (null), for every algorithm;
2. ``robomimic.utils.train_utils.dataset_factory`` builds the configured backend's dataset;
3. ``robomimic.utils.train_utils.load_data_for_training`` checks the backend choice before anything is read;
4. ``robomimic.utils.train_utils.run_epoch`` iterates what the backend's kind says (``core.iteration``) instead of
   the DataLoader robomimic builds inside ``train()``;
5. ``robomimic.utils.train_utils.get_exp_dir`` also remembers the run's config (the first call ``train()`` makes
   with it), so that
6. ``robomimic.utils.file_utils.get_shape_metadata_from_dataset`` gives a mixture's padded shapes for
   ``train.data`` (its models are built for what the mixture serves: ``robomimic.mixture.padded_shape_meta``),
   reading the keys its first component renames under the file's own names;
7. ``robomimic.config.config.Config.update`` names a plugin key (``data_backend``, ...) given outside ``train``
   in one line instead of robomimic's "key-locked" traceback, which read as the plugin not being installed.

Run by robomimic's training script, the plugin's errors raised through 2-4 end the process with one line and exit
status 1 (:func:`patch_train_utils`), because the script's ``main`` catches every error and exits 0.

Private reads and writes: ``ObsUtils.OBS_KEYS_TO_MODALITIES`` (a mixture component's renamed obs key gets its
mixture key's modality, :func:`register_obs_key_like`; for the one read of ``train.data``'s shapes under its own
names, :func:`patch_file_utils`'s ``own_keys``, then restored); ``SequenceDataset._index_to_demo_id`` (only the
benchmark's episode-mix metric for ``native``); the line ``robomimic.scripts.train`` prints when a run fails
(:data:`TRAIN_FAILED`: its ``main`` catches every error and exits 0, so ``robo-loaders robomimic-train`` watches for
it); the ``input()`` of ``train_utils.get_exp_dir`` (answered by :func:`keep_existing_runs` when there is no
terminal).
Side effects relied on: ``import robomimic.algo`` registers the observation encoders SequenceDataset needs.

On another robomimic version the patches are not applied (robomimic then runs unmodified and says so once) and the
backends refuse to build, naming the version: ``robo-loaders doctor`` shows which symbol moved.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

from robo_loaders_plugin.core import checks as checks_module
from robo_loaders_plugin.core.checks import Check
from robo_loaders_plugin.core.errors import CompatError, RoboLoadersError, exit_with_one_line
from robo_loaders_plugin.core.log import get_logger

logger = get_logger(__name__)

SUPPORTED_VERSION = "0.3.0"
ORIGINALS: dict[str, object] = {}
_MARK = "__robo_loaders_patched__"
# (module, attribute, parameters the plugin relies on)
PATCHED = (
    ("robomimic.config.base_config", "BaseConfig.train_config", ("self",)),
    ("robomimic.utils.train_utils", "dataset_factory", ("config", "obs_keys", "filter_by_attribute", "dataset_path")),
    ("robomimic.utils.train_utils", "load_data_for_training", ("config", "obs_keys")),
    (
        "robomimic.utils.train_utils",
        "run_epoch",
        ("model", "data_loader", "epoch", "validate", "num_steps", "obs_normalization_stats"),
    ),
    ("robomimic.utils.train_utils", "get_exp_dir", ("config",)),
    ("robomimic.utils.file_utils", "get_shape_metadata_from_dataset", ("dataset_path", "all_obs_keys", "verbose")),
    ("robomimic.config.config", "Config.update", ("self",)),
)
# the keys the plugin adds to every algorithm's ``train`` section (patch_base_config)
TRAIN_KEYS = ("data_backend", "data_backend_kwargs", "data_mixture")


def installed_version() -> str | None:
    """The installed robomimic version (``None`` when robomimic is not installed)."""
    return checks_module.installed_version("robomimic")


def check_version() -> None:
    """Refuse any robomimic but :data:`SUPPORTED_VERSION`: the patches and sample rules are written against it.

    Raises:
        CompatError: another version, or none, is installed.
    """
    found = installed_version()
    if found != SUPPORTED_VERSION:
        raise CompatError(
            f"robo-loaders supports robomimic {SUPPORTED_VERSION} (its patches and sample rules are "
            f"written against it); found {found or 'none'}. Install robomimic=={SUPPORTED_VERSION}, or "
            "leave train.data_backend null (robomimic then runs unmodified). 'robo-loaders doctor' "
            "lists what differs"
        )


def original(name: str):
    """The unpatched robomimic function ``name`` (works whether or not the patches are applied).

    Args:
        name: ``train_config`` (``BaseConfig.train_config``), or a function of ``robomimic.utils.train_utils``
            (``dataset_factory``, ``load_data_for_training``, ``run_epoch``).
    """
    if name in ORIGINALS:
        return ORIGINALS[name]
    if name == "train_config":
        from robomimic.config.base_config import BaseConfig

        # the import may have run the start-up hook, which patched it and kept the original
        return ORIGINALS.get(name, BaseConfig.train_config)
    import robomimic.utils.train_utils as TrainUtils

    return ORIGINALS.get(name, getattr(TrainUtils, name))  # as above: the import may have patched it just now


def patch_base_config(module) -> None:
    """Make ``BaseConfig.train_config`` also set ``train.data_backend`` (null: robomimic's own SequenceDataset),
    ``train.data_backend_kwargs`` ({}: a plain dict, open to any key after the config is locked) and
    ``train.data_mixture`` (null: ``train.data`` alone; else a mixture, docs/mixtures.md). Idempotent.

    Args:
        module: ``robomimic.config.base_config``, freshly imported.

    Raises:
        CompatError: the installed robomimic is not the supported version.
    """
    check_version()
    BaseConfig = module.BaseConfig
    orig = BaseConfig.train_config
    if getattr(orig, _MARK, False):
        return
    ORIGINALS["train_config"] = orig

    @functools.wraps(orig)
    def train_config(self):
        orig(self)
        self.train.data_backend = None  # null = robomimic's own SequenceDataset
        self.train.data_backend_kwargs = {}  # a plain dict: stays open to any key after lock()
        self.train.data_mixture = None  # null = train.data alone; a JSON file, inline JSON, object or list

    setattr(train_config, _MARK, True)
    BaseConfig.train_config = train_config
    _patch_config_update(module.Config)


def _patch_config_update(Config) -> None:
    """Make ``Config.update`` refuse a plugin key given outside ``train`` in one line naming it (robomimic's
    training script updates the algorithm's config with the JSON file's; a ``data_backend`` put under
    ``experiment`` or at the top level raised "this config has been key-locked and key 'data_backend' does not
    exist" with a traceback, word for word what the plugin not installed gives: a reviewer's finding)."""
    orig = Config.update
    if getattr(orig, _MARK, False):
        return
    ORIGINALS["update"] = orig  # by its last name, as patch_point_checks reads the originals

    @functools.wraps(orig)
    def update(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        except RuntimeError as exc:
            key = next((k for k in TRAIN_KEYS if f"key '{k}' does not exist" in str(exc)), None)
            if key is None:
                raise
            err = RoboLoadersError(
                f'the config gives "{key}" outside its "train" section; robo-loaders reads it as train.{key}: '
                'move it under "train"'
            )
            if running_train_script():
                exit_with_one_line(err)
            raise err from None

    setattr(update, _MARK, True)
    Config.update = update


def patch_train_utils(module, replacements) -> None:
    """Replace ``dataset_factory``, ``load_data_for_training`` and ``run_epoch`` of ``robomimic.utils.train_utils``.

    Inside robomimic's training script (:func:`running_train_script`), the plugin's errors raised through them end
    the process with one line and exit status 1 (``core.errors.exit_with_one_line``): the script's ``main``
    catches every ``Exception``, prints it with its traceback and exits 0, so a refusal once the run started (a
    footprint that does not fit, a bad option value for this dataset) read as ~35 lines and a finished run. Every
    other error goes to robomimic's handler as before (traceback, exit 0), and called from the user's own code the
    functions raise as usual.

    Args:
        module: ``robomimic.utils.train_utils``, freshly imported.
        replacements: ``{name: function}`` for those three names, called with the original's arguments.
    """
    check_version()
    if getattr(module.dataset_factory, _MARK, False):
        return
    for name, new in replacements.items():
        ORIGINALS[name] = getattr(module, name)

        @functools.wraps(ORIGINALS[name])
        def wrapper(*args, __new=new, **kwargs):
            try:
                return __new(*args, **kwargs)
            except RoboLoadersError as exc:
                if running_train_script():
                    exit_with_one_line(exc)
                raise

        setattr(wrapper, _MARK, True)
        setattr(module, name, wrapper)


@contextlib.contextmanager
def _modalities_of_own_keys(own: dict[str, str]):
    """robomimic's ``OBS_KEYS_TO_MODALITIES`` (private registry) with each file key of ``own`` ({config key: the
    file's key}) given its config key's modality, for one read of the file's shapes; restored after."""
    import robomimic.utils.obs_utils as ObsUtils

    registry = ObsUtils.OBS_KEYS_TO_MODALITIES
    saved = None if registry is None else dict(registry)
    try:
        if saved is not None:
            registry.update({file_key: saved[key] for key, file_key in own.items() if key in saved})
        yield
    finally:
        if saved is not None:
            registry.clear()
            registry.update(saved)


def _named_as_config(shape_meta: dict, own: dict[str, str], asked) -> dict:
    """``shape_meta`` read under the file's own keys, keyed by the config's (``all_shapes`` sorted, as robomimic
    builds it)."""
    back = {file_key: key for key, file_key in own.items()}
    out = dict(shape_meta)
    shapes = shape_meta["all_shapes"]
    out["all_shapes"] = type(shapes)(sorted((back.get(k, k), v) for k, v in shapes.items()))
    out["all_obs_keys"] = asked if asked is not None else [back.get(k, k) for k in shape_meta["all_obs_keys"]]
    return out


def patch_file_utils(module, shape_metadata, check=None, own_keys=None) -> None:
    """Make ``get_shape_metadata_from_dataset`` pass its result through ``shape_metadata``, after ``check``.

    Args:
        module: ``robomimic.utils.file_utils``, freshly imported.
        shape_metadata: ``shape_metadata(shape_meta, dataset_path) -> shape_meta``.
        check: ``check(dataset_path, all_obs_keys)``, called first with the keys as the file names them: may raise
            a ``RoboLoadersError`` naming what is wrong where robomimic's read would raise h5py's bare ``KeyError``
            (``None``: nothing checked).
        own_keys: ``own_keys(dataset_path) -> {config key: the file's key}`` for keys the file holds under another
            name (a mixture's first component that renames them): robomimic reads their shapes under the file's
            names, each with its config key's modality, and the result is keyed by the config's (``None``: none).
    """
    check_version()
    current = module.get_shape_metadata_from_dataset
    if getattr(current, _MARK, False):
        return
    ORIGINALS["get_shape_metadata_from_dataset"] = current

    @functools.wraps(current)
    def get_shape_metadata_from_dataset(dataset_path, all_obs_keys=None, verbose=False):
        try:
            own = own_keys(dataset_path) if own_keys is not None else {}
            read = all_obs_keys if all_obs_keys is None or not own else [own.get(k, k) for k in all_obs_keys]
            if check is not None:
                check(dataset_path, read)
            with _modalities_of_own_keys(own) if own else contextlib.nullcontext():
                shape_meta = current(dataset_path, all_obs_keys=read, verbose=verbose)
            if own:
                shape_meta = _named_as_config(shape_meta, own, all_obs_keys)
            return shape_metadata(shape_meta, dataset_path)
        except RoboLoadersError as exc:
            if running_train_script():
                exit_with_one_line(exc)
            raise

    setattr(get_shape_metadata_from_dataset, _MARK, True)
    module.get_shape_metadata_from_dataset = get_shape_metadata_from_dataset


TRAIN_SCRIPT = "robomimic.scripts.train"


def running_train_script() -> bool:
    """Whether this process runs robomimic's training script as its program (``python -m
    robomimic.scripts.train``, ``python .../robomimic/scripts/train.py``, ``robo-loaders robomimic-train``).

    Returns:
        True when ``__main__`` is that script.
    """
    import importlib.util
    import os
    import sys

    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == TRAIN_SCRIPT:
        return True
    path = getattr(main, "__file__", None)
    if not path:
        return False
    try:
        spec = importlib.util.find_spec(TRAIN_SCRIPT)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None)
    return bool(origin) and os.path.realpath(path) == os.path.realpath(origin)


# what robomimic.scripts.train's main prints (and then exits 0) when train() raised
TRAIN_FAILED = "run failed with error:"


def keep_existing_runs(train_utils_module) -> None:
    """Answer "n" to ``get_exp_dir``'s "model directory already exists! overwrite?" prompt, for runs without a
    terminal.

    Why: robomimic then keeps the earlier run and writes this one to a new timestamped folder beside it, instead of
    dying on ``EOFError`` (the prompt reads stdin). The answer shadows the builtin ``input`` in that module only.

    Args:
        train_utils_module: ``robomimic.utils.train_utils``.
    """

    def answer_no(prompt: str = "") -> str:
        import sys

        if sys.stdout is not None:  # robomimic's question, on stdout as input() shows it
            sys.stdout.write(f"{prompt.strip()}\n")
        logger.info(
            "no terminal to answer: keeping the existing runs; this run goes to a new timestamped folder "
            "beside them (set experiment.name to start a fresh one)"
        )
        return "n"

    train_utils_module.input = answer_no


def register_observation_encoders() -> None:
    """SequenceDataset (and robomimic's obs processing) need the encoders ``robomimic.algo`` registers on import."""
    import robomimic.algo  # noqa: F401


def register_obs_key_like(key: str, like: str) -> None:
    """Give obs key ``key`` the modality of ``like`` in robomimic's obs-key registry, when ``like`` has one.

    Why: a mixture component's camera may be stored under another name (``rename``); robomimic's SequenceDataset asks
    the modality of every key it loads (``hdf5_cache_mode='low_dim'`` caches the low-dim ones), and an unknown key
    is registered as low-dim with a printed warning.

    Args:
        key: The component's own obs key.
        like: The mixture's obs key it is renamed to.
    """
    import robomimic.utils.obs_utils as ObsUtils

    registry = ObsUtils.OBS_KEYS_TO_MODALITIES
    if registry is None:
        return
    modality = dict.get(registry, like)  # dict.get: its __getitem__ registers unknown keys
    if modality is not None and key not in registry:
        registry[key] = modality
        keys = ObsUtils.OBS_MODALITIES_TO_KEYS
        if keys is not None and key not in keys.get(modality, []):
            keys.setdefault(modality, []).append(key)


def obs_modality(key: str) -> str | None:
    """The modality robomimic's obs-key registry gives an obs key (``rgb``, ``depth``, ``low_dim``, ``scan``), or
    ``None`` where it names none (or is not initialised); read without registering the key.

    Args:
        key: An obs key (a mixture component's own name included: :func:`register_obs_key_like`).

    Returns:
        The modality, or ``None``.
    """
    import robomimic.utils.obs_utils as ObsUtils

    registry = ObsUtils.OBS_KEYS_TO_MODALITIES
    return None if registry is None else dict.get(registry, key)  # dict.get: its __getitem__ registers unknown keys


def demo_of_index(sequence_dataset):
    """Demo index of every sample of robomimic's own SequenceDataset (its private ``_index_to_demo_id`` map).

    Args:
        sequence_dataset: robomimic's ``SequenceDataset``.

    Returns:
        One demo index (position in ``sequence_dataset.demos``) per sample.
    """
    import numpy as np

    demos = {d: i for i, d in enumerate(sequence_dataset.demos)}
    return np.array([demos[sequence_dataset._index_to_demo_id[i]] for i in range(len(sequence_dataset))])


def checks() -> list[Check]:
    """Rows for ``robo-loaders doctor``."""
    found = installed_version()
    rows = [
        Check(
            f"robomimic {found or 'not installed'}",
            found == SUPPORTED_VERSION,
            f"supported: {SUPPORTED_VERSION}" + ("" if found else "; robomimic backends unavailable"),
            required=found is not None,
        )
    ]
    if found is None:
        return rows
    rows += checks_module.patch_point_checks("robomimic", PATCHED, ORIGINALS, _MARK)
    try:
        from robomimic.utils.dataset import SequenceDataset

        ok = "_index_to_demo_id" in inspect.getsource(SequenceDataset)
        rows.append(
            Check(
                "robomimic private read SequenceDataset._index_to_demo_id",
                ok,
                "used by the benchmark's episode-mix metric" + ("" if ok else ": gone"),
                required=False,
            )
        )
    except (ImportError, OSError) as exc:
        rows.append(Check("robomimic SequenceDataset", False, str(exc)))
    return rows
