"""Lazy import hook armed by ``robo_loaders_plugin_autopatch.pth`` at interpreter start-up.

Why a hook: robomimic and LeRobot have no dataset plugin mechanism, and users must be able to run their
*unmodified* training scripts. The ``.pth`` line only appends a meta-path finder (no torch, no robomimic, no
LeRobot import); when one of the watched modules is imported later, its module code runs normally and then the
framework adapter's ``apply_patches`` runs on it. ``ROBO_LOADERS_DISABLE=1`` disables it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
import threading

# module name -> "package.module:function" called with the freshly executed module
WATCHED = {
    "robomimic.config.base_config": "robo_loaders_plugin.robomimic.patches:patch_base_config",
    "robomimic.utils.train_utils": "robo_loaders_plugin.robomimic.patches:patch_train_utils",
    "robomimic.utils.file_utils": "robo_loaders_plugin.robomimic.patches:patch_file_utils",
    "lerobot.configs.parser": "robo_loaders_plugin.lerobot.patches:patch_parser",
    "lerobot.configs.train": "robo_loaders_plugin.lerobot.patches:patch_train_config",
    "lerobot.datasets.factory": "robo_loaders_plugin.lerobot.patches:patch_factory",
    "lerobot.scripts.lerobot_train": "robo_loaders_plugin.lerobot.patches:patch_train_script",
}

# robomimic.macros imports robomimic.macros_private and, when there is none, prints a five-line "No private macro
# file found!" block in every process that imports robomimic (each training run, each DataLoader worker, doctor).
# Where the user has no private macro file, an empty one is provided: robomimic.macros' defaults stay as they are,
# only the warning goes. A user's own macros_private is imported as usual.
EMPTY_IF_MISSING = ("robomimic.macros_private",)

_lock = threading.RLock()


def disabled() -> bool:
    """Whether ``ROBO_LOADERS_DISABLE`` turns the import hook off (any value but empty, ``0``, ``false`` or ``no``,
    in any case).
    """
    return os.environ.get("ROBO_LOADERS_DISABLE", "").strip().lower() not in ("", "0", "false", "no")


def _run_patch(target: str, module) -> None:
    """Apply one patch; if it fails the framework still imports, unpatched, and the user is told why."""
    mod_name, func_name = target.split(":")
    try:
        getattr(importlib.import_module(mod_name), func_name)(module)
    except Exception as exc:  # noqa: BLE001 - the start-up hook must never stop an interpreter
        sys.stderr.write(
            f"[robo-loaders] could not patch {module.__name__} ({exc!r}); it runs unmodified, so "
            "data backends are unavailable there. Set ROBO_LOADERS_DISABLE=1 to silence this.\n"
        )


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, wrapped, target):
        self._wrapped = wrapped
        self._target = target

    def create_module(self, spec):
        return self._wrapped.create_module(spec)

    def exec_module(self, module):
        self._wrapped.exec_module(module)
        _run_patch(self._target, module)

    def __getattr__(self, name):  # get_source, get_code, is_package... for tools that introspect the loader
        return getattr(self._wrapped, name)


class _EmptyModule(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__doc__ = "Provided empty by robo-loaders-plugin: no private macro file (robomimic's defaults apply)."


class _Finder(importlib.abc.MetaPathFinder):
    _busy = threading.local()

    def _real_spec(self, fullname):
        """The spec the other finders give (this finder steps aside while they look)."""
        with _lock:
            self._busy.on = True
            try:
                return importlib.util.find_spec(fullname)
            finally:
                self._busy.on = False

    def find_spec(self, fullname, path, target=None):
        if getattr(self._busy, "on", False):
            return None
        if fullname in EMPTY_IF_MISSING:
            real = self._real_spec(fullname)
            return real if real is not None else importlib.util.spec_from_loader(fullname, _EmptyModule())
        target_fn = WATCHED.get(fullname)
        if target_fn is None:
            return None
        spec = self._real_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, target_fn)
        return spec


_armed = False


def arm() -> None:
    """Install the finder once (no-op when disabled); patch modules that were imported before arming."""
    global _armed
    if _armed or disabled():
        return
    _armed = True
    import importlib.util  # noqa: F401  (cheap, stdlib)

    sys.meta_path.insert(0, _Finder())
    for name, target in WATCHED.items():
        if name in sys.modules:
            _run_patch(target, sys.modules[name])
