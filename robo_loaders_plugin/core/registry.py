"""The one PluginManager: built-in backends plus third-party plugins from the ``robo_loaders`` entry points.

Why entry points are loaded one by one (not with ``load_setuptools_entrypoints``): pluggy stops at the first
entry point that fails to import, which would hide every plugin after it, built-in ones included. Here a broken
plugin is reported with a warning that names it and skipped.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import warnings
from collections.abc import Mapping
from typing import Any

import pluggy

from robo_loaders_plugin.core import hookspecs
from robo_loaders_plugin.core.errors import RoboLoadersError, UnknownBackendError
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, BackendChoice, BackendSpec

# the distribution whose entry points are the built-in backends (pyproject.toml's [project.entry-points.robo_loaders])
BUILTIN_DISTRIBUTION = "robo-loaders-plugin"
BUILTIN = "builtin"  # BackendSpec.plugin of a built-in backend


def _is_builtin(ep: importlib.metadata.EntryPoint) -> bool:
    dist = getattr(ep, "dist", None)
    return dist is not None and dist.metadata["Name"].replace("_", "-").lower() == BUILTIN_DISTRIBUTION


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process's one PluginManager, built on first use from the ``robo_loaders`` entry-point group: the built-in
    backends (this distribution's entry points, one package each) first, then every third-party plugin.

    A third-party plugin that fails to import is skipped with a warning naming it (see the module's docstring); a
    built-in one that fails raises (the installation is broken); a name already registered or blocked is not loaded
    again.

    Returns:
        The :class:`pluggy.PluginManager` (cached; :func:`reset_cache` forgets it).

    Raises:
        RoboLoadersError: this distribution's entry points are missing (the package was put on ``sys.path``
            without being installed), or a built-in backend fails to import.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    eps = sorted(importlib.metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP), key=lambda ep: not _is_builtin(ep))
    if not any(_is_builtin(ep) for ep in eps):
        raise RoboLoadersError(
            f"the built-in backends are not registered: {BUILTIN_DISTRIBUTION}'s entry points "
            f"(group {hookspecs.ENTRY_POINT_GROUP!r}) are not in the installed metadata; install "
            "it (pip install robo-loaders-plugin, or pip install -e . in a checkout) rather than "
            "putting it on PYTHONPATH"
        )
    for ep in eps:
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        if _is_builtin(ep):
            pm.register(ep.load(), name=ep.name)
            _BUILTIN_PLUGINS.add(ep.name)
            continue
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must not take the others down with it
            warnings.warn(
                f"robo-loaders: skipping plugin {ep.name!r} ({ep.value}) from entry-point group "
                f"{hookspecs.ENTRY_POINT_GROUP!r}: it failed to load: {exc!r}",
                stacklevel=2,
            )
    return pm


_BUILTIN_PLUGINS: set[str] = set()


@functools.cache
def _backends() -> dict[str, BackendSpec]:
    pm = get_plugin_manager()
    out: dict[str, BackendSpec] = {}
    for impl in reversed(pm.hook.robo_loaders_backends.get_hookimpls()):  # pluggy's call order
        plugin_name = impl.plugin_name
        builtin = plugin_name in _BUILTIN_PLUGINS
        try:
            returned: Any = impl.function()  # whatever the plugin returned: each item is checked below
            result = list(returned or ())
        except Exception as exc:
            if builtin:
                raise
            warnings.warn(
                f"robo-loaders: plugin {plugin_name!r} failed to list its backends ({exc!r}); skipping it", stacklevel=2
            )
            continue
        for spec in result:
            if not isinstance(spec, BackendSpec):
                raise RoboLoadersError(f"plugin {plugin_name!r} returned {spec!r}, not a BackendSpec")
            if spec.name in out:
                raise RoboLoadersError(
                    f"backend name {spec.name!r} is registered twice (by {out[spec.name].plugin!r} and {plugin_name!r})"
                )
            if spec.plugin != (BUILTIN if builtin else plugin_name):
                spec = BackendSpec(**{**spec.__dict__, "plugin": BUILTIN if builtin else plugin_name})
            problem = _factory_refusal(spec)
            if problem is not None:  # refused, as pluggy refuses a hookimpl its hookspec does not match
                if builtin:
                    raise RoboLoadersError(problem)
                _REFUSED[spec.name] = problem
                continue
            out[spec.name] = spec
    return out


def builtin_specs() -> list[BackendSpec]:
    """The built-in backends only (what the committed documents describe, whatever plugins are installed).

    Returns:
        Their :class:`BackendSpec` objects, ``native`` first.
    """
    return [_backends()[n] for n in list_backends() if _backends()[n].plugin == BUILTIN]


def streaming_backends(framework: str) -> str:
    """The backends that read ``framework``'s data where it lies, local or remote, writing nothing (those declaring a
    ``remote_source_option``), for messages suggesting one: a generic module names no backend itself.

    Args:
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        Their names quoted and joined (``"'video_stream'"``), or ``"none installed"``.
    """
    names = [
        n for n in list_backends() if _backends()[n].remote_source_option and framework in _backends()[n].frameworks
    ]
    return ", ".join(repr(n) for n in names) or "none installed"


_REFUSED: dict[str, str] = {}


def _factory_refusal(spec: BackendSpec) -> str | None:
    """The line refusing ``spec`` when one of its factories does not follow its framework's protocol
    (``core.factory_check``: read from source, nothing imported), else ``None``."""
    from robo_loaders_plugin.core.factory_check import factory_problem, refusal

    for framework in spec.frameworks:
        factory = spec.factories.get(framework)
        problem = None if factory is None else factory_problem(factory, framework)
        if problem is not None:
            return refusal(spec.plugin, spec.name, framework, problem)
    return None


def refused_backends() -> dict[str, str]:
    """The backends a plugin declared but registration refused (a factory that does not follow its framework's
    protocol, ``core.hookspecs.FACTORY_PROTOCOLS``).

    Returns:
        ``{backend name: the one line saying why}`` (``robo-loaders list`` prints them and exits with status 1).
    """
    _backends()
    return dict(_REFUSED)


def rate_converting_backends(framework: str) -> list[str]:
    """The backends that convert frame rates under ``framework`` (they declare a ``target_fps`` option for it),
    for checks and messages: a generic module names no backend itself.

    Args:
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        Their names, ``native`` first then by name.
    """
    out = []
    for name in list_backends():
        spec = _backends()[name]
        opt = spec.options.get("target_fps")
        if framework in spec.frameworks and opt is not None and opt.applies_to(framework):
            out.append(name)
    return out


def list_backends() -> list[str]:
    """Names of all registered backends, ``native`` first."""
    names = list(_backends())
    return sorted(names, key=lambda n: (n != DEFAULT_BACKEND, n))


def get_backend(name: str, where: str = "") -> BackendSpec:
    """The spec of a registered backend.

    Args:
        name: The backend's name.
        where: The setting the name came from (``train.data_backend``, ``--dataset.backend``), for the error.

    Returns:
        Its :class:`BackendSpec`.

    Raises:
        UnknownBackendError: naming ``where``, the closest registered name and every registered one.
        RoboLoadersError: a backend registration refused (:func:`refused_backends`), with why.
    """
    specs = _backends()
    if isinstance(name, str) and name in _REFUSED:
        raise RoboLoadersError(f"{where}: {_REFUSED[name]}" if where else _REFUSED[name])
    if not isinstance(name, str) or name not in specs:
        raise UnknownBackendError(name, list_backends(), where)
    return specs[name]


def choose_backend(
    framework: str, name: str, given: Mapping[str, Any] | None, *, name_where: str, options_where: str
) -> BackendChoice:
    """A user's backend choice under ``framework``, resolved once: the same (name, options) is checked the first
    time and reused after (the adapters ask at parse time, at build time and per split).

    Args:
        framework: ``robomimic`` or ``lerobot``.
        name: The backend's name.
        given: Its options as the user gave them (a JSON object's content).
        name_where: The setting holding the name, for errors (``train.data_backend``).
        options_where: The setting holding the options, for errors (``train.data_backend_kwargs``).

    Returns:
        The :class:`BackendChoice`.

    Raises:
        UnknownBackendError: no backend of that name.
        RoboLoadersError: the backend does not serve ``framework``.
        BackendOptionError: an option is unknown or has a bad value.
    """
    try:
        key = json.dumps([framework, name, given or {}, name_where, options_where], sort_keys=True)
    except (TypeError, ValueError):  # not JSON-able: resolved every time (and refused by the option checks)
        key = None
    if key is not None and key in _CHOICES:
        return _CHOICES[key]
    spec = get_backend(name, name_where)
    if framework not in spec.frameworks:
        raise RoboLoadersError(
            f"{name_where}: backend {name!r} does not support {framework} (it supports {', '.join(spec.frameworks)})"
        )
    choice = spec.choose(framework, given, options_where)
    if key is not None:
        _CHOICES[key] = choice
    return choice


_CHOICES: dict[str, BackendChoice] = {}


def reset_cache() -> None:
    """Forget loaded plugins and resolved choices (tests that install an entry point at run time)."""
    _backends.cache_clear()
    get_plugin_manager.cache_clear()
    _CHOICES.clear()
    _REFUSED.clear()
