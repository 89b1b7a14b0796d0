"""robo-loaders-plugin: alternative dataset backends for robomimic and LeRobot.

What a *user* needs from Python is here: which backends are installed (:func:`list_backends`, :func:`get_backend`)
and the errors to catch. Everything a plugin author needs (registration, the SDK, the contracts) is in
:mod:`robo_loaders_plugin.extend`, the one public surface: the names below are re-exported from it, the same
objects, defined once.

The plugin API's names this module used to export (``hookimpl``, ``BackendSpec``, ``Option``, the kinds and
promises, ``SamplingPlan``, ...) still resolve here, with a ``DeprecationWarning`` saying to import them from
``robo_loaders_plugin.extend``, so that a plugin written against the old imports keeps working.

This module is imported at every interpreter start-up (through the import hook's ``.pth`` file), so it must stay
cheap: every name is loaded on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

# re-exported from robo_loaders_plugin.extend (the same objects)
_FROM_EXTEND = (
    "list_backends",
    "get_backend",
    "RoboLoadersError",
    "UnknownBackendError",
    "BackendOptionError",
    "SourceError",
    "StaleSourceError",
    "CompatError",
)
# exported here before the plugin API was gathered in extend: resolved from it with a DeprecationWarning
_MOVED_TO_EXTEND = (
    "hookimpl",
    "get_plugin_manager",
    "BackendSpec",
    "BackendChoice",
    "SAMPLE",
    "INDEXED",
    "BATCH",
    "LOSSLESS",
    "LOSSY_FRAMES",
    "NOT_BIT_IDENTICAL_ON_NVDEC",
    "GPU_NO",
    "GPU_OPTIONAL",
    "GPU_REQUIRED",
    "Option",
    "Options",
    "SamplingPlan",
    "BatchSource",
    "BatchDataset",
    "IndexedDataset",
    "Serving",
)
__all__ = sorted(_FROM_EXTEND) + ["__version__"]


def __getattr__(name: str):
    if name in _FROM_EXTEND or name in _MOVED_TO_EXTEND:
        from robo_loaders_plugin import extend

        if name in _MOVED_TO_EXTEND:
            import warnings

            warnings.warn(
                f"robo_loaders_plugin.{name} is part of the plugin API: import it from robo_loaders_plugin.extend "
                f"(from robo_loaders_plugin.extend import {name})",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(extend, name)
    raise AttributeError(f"module 'robo_loaders_plugin' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_FROM_EXTEND))
