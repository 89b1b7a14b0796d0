"""robo-loaders-plugin: alternative dataset backends for robomimic and LeRobot.

The public API, for users and for third-party backends, is what this module exports. It is imported at every
interpreter start-up (through the import hook's ``.pth`` file), so it must stay cheap: everything heavier than
pluggy is imported lazily on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "hookimpl": "robo_loaders_plugin.core.hookspecs",
    "list_backends": "robo_loaders_plugin.core.registry",
    "get_backend": "robo_loaders_plugin.core.registry",
    "get_plugin_manager": "robo_loaders_plugin.core.registry",
    "BackendSpec": "robo_loaders_plugin.core.spec",
    "BackendChoice": "robo_loaders_plugin.core.spec",
    "SAMPLE": "robo_loaders_plugin.core.spec",
    "INDEXED": "robo_loaders_plugin.core.spec",
    "BATCH": "robo_loaders_plugin.core.spec",
    "LOSSLESS": "robo_loaders_plugin.core.spec",
    "LOSSY_FRAMES": "robo_loaders_plugin.core.spec",
    "NOT_BIT_IDENTICAL_ON_NVDEC": "robo_loaders_plugin.core.spec",
    "GPU_NO": "robo_loaders_plugin.core.spec",
    "GPU_OPTIONAL": "robo_loaders_plugin.core.spec",
    "GPU_REQUIRED": "robo_loaders_plugin.core.spec",
    "Option": "robo_loaders_plugin.core.options",
    "Options": "robo_loaders_plugin.core.options",
    "RoboLoadersError": "robo_loaders_plugin.core.errors",
    "UnknownBackendError": "robo_loaders_plugin.core.errors",
    "BackendOptionError": "robo_loaders_plugin.core.errors",
    "SourceError": "robo_loaders_plugin.core.errors",
    "StaleSourceError": "robo_loaders_plugin.core.errors",
    "CompatError": "robo_loaders_plugin.core.errors",
    "SamplingPlan": "robo_loaders_plugin.core.iteration",
    "BatchSource": "robo_loaders_plugin.core.iteration",
    "BatchDataset": "robo_loaders_plugin.core.iteration",
    "IndexedDataset": "robo_loaders_plugin.core.iteration",
    "Serving": "robo_loaders_plugin.core.iteration",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'robo_loaders_plugin' has no attribute {name!r}")
