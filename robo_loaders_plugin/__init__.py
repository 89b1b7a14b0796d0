"""robo-loaders-plugin: alternative dataset backends for robomimic and LeRobot.

This module is imported at every interpreter start-up (through the import hook's ``.pth`` file), so it must stay
cheap: everything heavier than pluggy is imported lazily on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["hookimpl", "list_backends", "get_backend", "BackendSpec", "UnknownBackendError", "__version__"]


def __getattr__(name):
    if name == "hookimpl":
        from robo_loaders_plugin.hookspecs import hookimpl

        return hookimpl
    if name in ("list_backends", "get_backend", "get_plugin_manager"):
        from robo_loaders_plugin import registry

        return getattr(registry, name)
    if name in ("BackendSpec", "UnknownBackendError"):
        from robo_loaders_plugin import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'robo_loaders_plugin' has no attribute {name!r}")
