"""The one PluginManager: built-in backends plus third-party plugins from the ``robo_loaders`` entry points.

Why entry points are loaded one by one (not with ``load_setuptools_entrypoints``): pluggy stops at the first
entry point that fails to import, which would hide every plugin after it, built-in ones included. Here a broken
third-party plugin is reported and skipped, and every other backend (the built-ins, ``native``) stays available:

- skipped whole, one line naming it (entry point and distribution) and what is wrong, as a warning when the
  backends are first looked up and as an ``error:`` line of ``robo-loaders list``: a plugin that fails to import,
  whose hook raises or returns anything but ``BackendSpec`` objects, that declares a built-in backend's name or one
  name twice, or whose entry point has a built-in's or another plugin's name (pluggy keeps one plugin per name);
- one backend refused, the plugin's others kept: a factory that does not follow its framework's protocol, or a
  name two third-party plugins declare (which one would serve depended on the installation order).

Choosing a refused backend, or one a skipped plugin declared, raises that line (:func:`get_backend`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import json
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import pluggy

from robo_loaders_plugin.core import hookspecs
from robo_loaders_plugin.core.errors import RoboLoadersError, UnknownBackendError
from robo_loaders_plugin.core.spec import DEFAULT_BACKEND, SAMPLE, BackendChoice, BackendSpec

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

    A third-party plugin that fails to import, or whose entry-point name is taken (by a built-in, or by another
    distribution's plugin), is skipped (see the module's docstring; :func:`rejected_plugins`); a built-in one that
    fails raises (the installation is broken).

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
        if pm.is_blocked(ep.name):
            continue
        if _is_builtin(ep):
            if pm.get_plugin(ep.name) is None:
                pm.register(ep.load(), name=ep.name)
                _BUILTIN_PLUGINS.add(ep.name)
            continue
        origin = _origin(ep)
        try:
            plugin = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must not take the others down with it
            _reject_plugin(ep.name, origin, f"it failed to load ({exc!r}): update or uninstall it")
            continue
        taken = (
            "a built-in backend's"
            if ep.name in _BUILTIN_PLUGINS
            else f"another plugin's ({_ORIGINS[ep.name]})"
            if pm.get_plugin(ep.name) is not None
            else None
        )
        if taken is not None:  # pluggy keeps one plugin per name: this one would never be asked for its backends
            _reject_plugin(
                ep.name,
                origin,
                f"its entry-point name {ep.name!r} is {taken}; rename the entry point (its "
                f"[project.entry-points.{hookspecs.ENTRY_POINT_GROUP}])",
                _names_declared(plugin),
            )
            continue
        pm.register(plugin, name=ep.name)
        _ORIGINS[ep.name] = origin
    return pm


_BUILTIN_PLUGINS: set[str] = set()
_ORIGINS: dict[str, str] = {}  # a third-party plugin's name -> its entry point and distribution, for messages
_REJECTED: dict[str, str] = {}  # a skipped third-party plugin's name -> the line saying why


def _origin(ep: importlib.metadata.EntryPoint) -> str:
    """Where a plugin comes from, for messages: ``entry point 'name = module' of distribution dist 0.1``."""
    dist = getattr(ep, "dist", None)
    of = f" of distribution {dist.metadata['Name']} {dist.version}" if dist is not None else ""
    return f"entry point '{ep.name} = {ep.value}'{of}"


def _origin_of(plugin_name: str) -> str:
    """A registered third-party plugin's entry point and distribution (one registered in code has neither)."""
    return _ORIGINS.get(plugin_name, "registered without an entry point")


def _reject_plugin(name: str, origin: str, why: str, declared=()) -> None:
    """Skip a third-party plugin: one line naming it and ``why``, warned once and kept for ``robo-loaders list``;
    the backends it ``declared`` are refused with the same line (choosing one says why it is unavailable)."""
    line = f"plugin {name!r} ({origin}) skipped: {why}; the other backends are unaffected"
    _REJECTED[name] = line
    for backend in declared:
        _REFUSED.setdefault(backend, line)
    warnings.warn(f"robo-loaders: {line}", stacklevel=3)


def _names_declared(plugin) -> list[str]:
    """The backend names a plugin that is not registered declares, as far as its hook tells (for "why is it
    unavailable" when one is chosen); none when the hook is missing or fails."""
    try:
        specs, _ = _declared_specs(plugin.robo_loaders_backends())
    except Exception:  # noqa: BLE001 - the plugin is skipped already; only its names are looked for
        return []
    return [spec.name for spec in specs]


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _declared_specs(returned: Any) -> tuple[list[BackendSpec], str | None]:
    """What a plugin's ``robo_loaders_backends()`` returned, as specs, or what is wrong with it (``None``: nothing).

    It must return BackendSpec objects (a list, a tuple, any iterable of them; an empty one: none), each name once.
    ``None`` is a hook without its ``return`` (a reviewer's reproduction: its plugin was silently empty, and choosing
    its backend said "unknown data backend"): skipped with one line as any other wrong return."""
    import reprlib

    if returned is None:
        return [], (
            "its robo_loaders_backends() returned None (a missing return?), not a list of BackendSpec: return the "
            "list (an empty one declares no backends)"
        )
    if isinstance(returned, (str, bytes, Mapping, BackendSpec)) or not isinstance(returned, Iterable):
        what = "a single BackendSpec" if isinstance(returned, BackendSpec) else type(returned).__name__
        return [], (
            f"its robo_loaders_backends() returned {reprlib.repr(returned)} ({what}), not a list of BackendSpec: "
            "update or uninstall it"
        )
    specs = list(returned)
    for i, spec in enumerate(specs):
        if not isinstance(spec, BackendSpec):
            return [s for s in specs if isinstance(s, BackendSpec)], (
                f"its robo_loaders_backends() returned {reprlib.repr(spec)} ({type(spec).__name__}) at position {i}, "
                "not a BackendSpec: update or uninstall it"
            )
    names = [spec.name for spec in specs]
    bad = [n for n in names if not isinstance(n, str) or not _NAME_RE.match(n)]
    if bad:  # typed on a command line and in JSON configs, shown in messages (a reviewer saw "bad name!" accepted)
        return [s for s in specs if s.name not in bad], (
            f"it declares backend {bad[0]!r}, not a backend name (letters, digits, '_', '-' or '.', starting with a "
            "letter or digit): update or uninstall it"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return specs, f"it declares backend {twice[0]!r} twice: update or uninstall it"
    return specs, None


@functools.cache
def _backends() -> dict[str, BackendSpec]:
    pm = get_plugin_manager()
    impls = list(reversed(pm.hook.robo_loaders_backends.get_hookimpls()))  # pluggy's call order
    impls.sort(key=lambda impl: impl.plugin_name not in _BUILTIN_PLUGINS)  # the built-ins first, whatever the order
    out: dict[str, BackendSpec] = {}
    by: dict[str, list[str]] = {}  # a third-party backend name -> the plugins declaring it
    for impl in impls:
        plugin_name = impl.plugin_name
        builtin = plugin_name in _BUILTIN_PLUGINS
        try:
            specs, problem = _declared_specs(impl.function())
        except Exception as exc:
            if builtin:
                raise
            why = f"its robo_loaders_backends() raised {exc!r}: update or uninstall it"
            _reject_plugin(plugin_name, _origin_of(plugin_name), why)
            continue
        if problem is None and not builtin:
            taken = [spec.name for spec in specs if spec.name in out and out[spec.name].plugin == BUILTIN]
            if taken:
                problem = (
                    f"it declares backend {taken[0]!r}, a built-in backend's name: a plugin cannot replace a "
                    "built-in backend; give its backend another name"
                )
        if problem is not None:
            if builtin:
                raise RoboLoadersError(f"built-in plugin {plugin_name!r}: {problem}")
            _reject_plugin(plugin_name, _origin_of(plugin_name), problem, [s.name for s in specs if s.name not in out])
            continue
        for spec in specs:
            if builtin and spec.name in out:
                raise RoboLoadersError(f"built-in backend name {spec.name!r} is registered twice")
            if spec.plugin != (BUILTIN if builtin else plugin_name):
                spec = BackendSpec(**{**spec.__dict__, "plugin": BUILTIN if builtin else plugin_name})
            if not builtin:
                by.setdefault(spec.name, []).append(plugin_name)
            refusal = _factory_refusal(spec)
            if refusal is not None:  # a third-party factory the adapter's call cannot bind
                _REFUSED.setdefault(spec.name, refusal)
                continue
            out[spec.name] = spec
    for name, plugins in by.items():
        if len(plugins) > 1:  # which one served would depend on the order the distributions were installed in
            out.pop(name, None)
            line = (
                f"backend {name!r} refused: declared by "
                + " and ".join(f"plugin {p!r} ({_origin_of(p)})" for p in sorted(plugins))
                + "; a backend name must be unique: uninstall one of them"
            )
            _REFUSED[name] = line
            warnings.warn(f"robo-loaders: {line}", stacklevel=2)
    for name in out:  # also declared by a skipped plugin: the plugin that loaded serves it
        _REFUSED.pop(name, None)
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
        Their names quoted and joined (``"'a', 'b'"``), or ``"none installed"``.
    """
    names = [
        n for n in list_backends() if _backends()[n].remote_source_option and framework in _backends()[n].frameworks
    ]
    return ", ".join(repr(n) for n in names) or "none installed"


_REFUSED: dict[str, str] = {}


def _factory_refusal(spec: BackendSpec) -> str | None:
    """The line refusing a third-party ``spec`` when an option's default breaks the option's own declaration, or one
    of its factories does not follow its framework's protocol (``core.factory_check``: the factory is imported),
    else ``None``.

    The built-ins' factories are not imported here (it would cost every ``robo-loaders list`` torch's import, for
    signatures a test checks) and neither are those whose declared modules are missing (their import would fail on
    what ``check_requirements`` names in one line when the backend is chosen): both are checked by
    ``BackendSpec.factory_for`` when imported to build."""
    from robo_loaders_plugin.core.factory_check import factory_problem, refusal
    from robo_loaders_plugin.core.installs import missing

    if spec.plugin == BUILTIN:
        return None
    for framework in spec.frameworks:
        for name, opt in spec.options.items():
            # a default that breaks its own declaration reached the store unchecked (Option(int, "90"); a
            # default under its min): the user's value would be refused, the default served (a reviewer's reproduction)
            default = opt.default_for(framework) if opt.applies_to(framework) else None
            # the declaration only (type, choices, range): not its check=, which may look at the machine (a
            # directory that must exist, made writable) where registering must touch nothing
            problem = None if default is None else dataclasses.replace(opt, check=None).validate(default, framework)
            if problem is not None:
                return (
                    f"plugin {spec.plugin!r}: backend {spec.name!r} refused: the default of its option {name!r} "
                    f"{problem} under {framework}: declare a default the option accepts"
                )
        factory = spec.factories.get(framework)
        if factory is None or missing(spec.requires.get(framework, ())):
            continue
        problem = factory_problem(factory, framework)
        if problem is not None:
            return refusal(spec.plugin, spec.name, framework, problem)
    return None


def refused_backends() -> dict[str, str]:
    """The backends a plugin declared but registration refused: a factory that does not follow its framework's
    protocol (``core.hookspecs.FACTORY_PROTOCOLS``), a name two plugins declare, or a backend of a skipped plugin.

    Returns:
        ``{backend name: the one line saying why}`` (``robo-loaders list`` prints them and exits with status 1).
    """
    _backends()
    return dict(_REFUSED)


def rejected_plugins() -> dict[str, str]:
    """The third-party plugins skipped whole (see the module's docstring).

    Returns:
        ``{plugin name: the one line naming its entry point and distribution and saying why}`` (``robo-loaders
        list`` prints them and exits with status 1).
    """
    _backends()
    return dict(_REJECTED)


def rate_converting_backends(framework: str) -> list[str]:
    """The backends that convert frame rates under ``framework`` (they declare a ``target_fps`` option for it),
    for checks and messages: a generic module names no backend itself.

    Args:
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        Their names, ``native`` first then by name.
    """

    def converts(name: str, spec: BackendSpec) -> bool:
        opt = spec.options.get("target_fps")
        return opt is not None and opt.applies_to(framework)

    return _backends_where(framework, converts)


def random_item_backends(framework: str) -> list[str]:
    """The backends whose items may draw random numbers under ``framework`` as the framework's own do: ``native``,
    those whose kind is ``sample`` (the framework's DataLoader workers build the items), and those with an option
    whose default moves the items into those workers when they draw random numbers (``random_items_defaults``);
    for messages: a generic module names no backend itself.

    Args:
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        Their names, ``native`` first then by name.
    """

    def draws_as_the_framework(name: str, spec: BackendSpec) -> bool:
        moves = any(framework in opt.random_items_defaults for opt in spec.options.values())
        return name == DEFAULT_BACKEND or spec.kind_for(framework) == SAMPLE or moves

    return _backends_where(framework, draws_as_the_framework)


def _backends_where(framework: str, keep) -> list[str]:
    """The backends serving ``framework`` for which ``keep(name, spec)`` holds, ``native`` first then by name."""
    return [
        name for name in list_backends() if framework in _backends()[name].frameworks and keep(name, _backends()[name])
    ]


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
    _REJECTED.clear()
    _ORIGINS.clear()
