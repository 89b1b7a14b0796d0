"""The one PluginManager: built-in backends plus third-party plugins from the ``robo_loaders`` entry points."""
from __future__ import annotations

import functools
import warnings

import pluggy

from robo_loaders_plugin import hookspecs
from robo_loaders_plugin.spec import BackendSpec, RoboLoadersError, UnknownBackendError


@functools.lru_cache(maxsize=None)
def get_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    from robo_loaders_plugin.backends import builtin

    pm.register(builtin, name="builtin")
    try:
        pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken third-party plugin must not take the built-ins down with it
        warnings.warn(f"robo-loaders: could not load a plugin from entry-point group "
                      f"{hookspecs.ENTRY_POINT_GROUP!r}: {exc!r}", stacklevel=2)
    return pm


@functools.lru_cache(maxsize=None)
def _backends() -> dict[str, BackendSpec]:
    pm = get_plugin_manager()
    out: dict[str, BackendSpec] = {}
    for impl in reversed(pm.hook.robo_loaders_backends.get_hookimpls()):  # pluggy's call order
        plugin_name = impl.plugin_name
        try:
            result = impl.function()
        except Exception as exc:
            if plugin_name == "builtin":
                raise
            warnings.warn(f"robo-loaders: plugin {plugin_name!r} failed to list its backends ({exc!r}); "
                          "skipping it", stacklevel=2)
            continue
        for spec in result or ():
            if not isinstance(spec, BackendSpec):
                raise RoboLoadersError(f"plugin {plugin_name!r} returned {spec!r}, not a BackendSpec")
            if spec.name in out:
                raise RoboLoadersError(f"backend name {spec.name!r} is registered twice "
                                       f"(by {out[spec.name].plugin!r} and {plugin_name!r})")
            if spec.plugin == "builtin" and plugin_name != "builtin":
                spec = BackendSpec(**{**spec.__dict__, "plugin": plugin_name})
            out[spec.name] = spec
    return out


def list_backends() -> list[str]:
    """Names of all registered backends, ``native`` first."""
    names = list(_backends())
    return sorted(names, key=lambda n: (n != "native", n))


def get_backend(name: str) -> BackendSpec:
    """The spec of backend ``name``; raises :class:`UnknownBackendError` listing the registered names."""
    specs = _backends()
    if name not in specs:
        raise UnknownBackendError(name, list_backends())
    return specs[name]


def reset_cache() -> None:
    """Forget loaded plugins (tests that install an entry point at run time)."""
    _backends.cache_clear()
    get_plugin_manager.cache_clear()
