"""Factories checked against their framework's protocol (``core.hookspecs.FACTORY_PROTOCOLS``) by binding the
adapter's calls to the imported callable's :func:`inspect.signature`.

Why not pluggy: pluggy checks a hookimpl's argument *names* against its hookspec and accepts an implementation
that takes fewer arguments, so ``factory(native)`` (no ``options``) would pass; and a factory is one backend's
callable, chosen by name, not a hook every plugin answers. Binding the adapter's own calls is what a call would do.

Why at registration for third-party backends: a factory whose signature cannot take the adapter's call used to
fail at the first training run, as a ``TypeError`` deep in the framework's start-up. ``robo-loaders list`` (and
every lookup of a backend) refuses it with one line naming the plugin, the backend, the framework and the expected
signature. Checking means importing the factory's module, which usually imports torch: ``robo-loaders list`` then
pays that import once (measured in docs/architecture.md, "Checks a tool does").

Why not the built-in backends at registration: importing their factory modules costs ``robo-loaders list`` about
5 s and 0.5 GB (torch), for signatures that cannot change after release; ``tests/test_factory_protocol.py`` checks
every one of them, and :meth:`~robo_loaders_plugin.core.spec.BackendSpec.factory_for` checks every factory,
built-in or not, when it is imported to build a dataset.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from robo_loaders_plugin.core.hookspecs import FACTORY_PROTOCOLS

# the calls the adapters make, by framework: the protocol's parameters by position and keyword (robomimic's
# integration passes filter_by_attribute and dataset_path by keyword)
_CALLS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "robomimic": [
        ((1, 2, None, None), {"options": 3}),
        ((1, 2), {"filter_by_attribute": None, "dataset_path": None, "options": 3}),
    ],
    "lerobot": [((1,), {"options": 3})],
}


def expected_signature(framework: str) -> str:
    """The protocol's signature in words, for messages.

    Args:
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        ``"factory(native, *, options)"``.
    """
    return f"factory{inspect.signature(FACTORY_PROTOCOLS[framework])}"


def import_factory(ref: str) -> Callable[..., Any]:
    """The callable a ``"module:function"`` reference names, imported.

    Args:
        ref: ``"package.module:function"`` (``function`` may be dotted: ``module:Class.method``).

    Returns:
        The object the reference names.

    Raises:
        ValueError: ``ref`` has no ``:``.
        ImportError: the module cannot be imported.
        AttributeError: the module has no such name.
    """
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{ref!r} is not a 'module:function' reference")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def factory_problem(factory: Callable[..., Any] | str, framework: str, name: str | None = None) -> str | None:
    """Why ``factory`` does not follow its framework's protocol (``None``: it does, or it is a builtin without a
    signature, which only a call can tell).

    A ``"module:function"`` reference is imported first (its module's imports run).

    Args:
        factory: A ``"module:function"`` reference or a callable.
        framework: ``robomimic`` or ``lerobot``.
        name: What the phrase calls the factory (default: the reference, or the callable's qualified name).

    Returns:
        ``None``, or one phrase starting with ``factory`` and the factory's name.
    """
    if isinstance(factory, str):
        name = name or factory
        module, _, attr = factory.partition(":")
        if not module or not attr:
            return f"factory {name!r} is not a 'module:function' reference"
        try:
            factory = import_factory(factory)
        except Exception as exc:  # noqa: BLE001 - whatever a plugin's module raises on import is one line
            return f"factory {name!r} cannot be imported ({type(exc).__name__}: {exc})"
    elif name is None:
        func = getattr(factory, "func", factory)  # functools.partial: name the function
        name = getattr(func, "__qualname__", None) or type(factory).__name__
    expected = expected_signature(framework)
    if not callable(factory):
        return f"factory {name} is a {type(factory).__name__}, not a function; expected {expected}"
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    for args, kwargs in _CALLS[framework]:
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            return f"factory {name} has the signature {signature}; expected {expected}"
    return None


def refusal(plugin: str, backend: str, framework: str, problem: str) -> str:
    """The one line refusing a backend whose factory does not follow the protocol.

    Args:
        plugin: The plugin that registered it.
        backend: The backend's name.
        framework: The framework whose factory is wrong.
        problem: From :func:`factory_problem`.

    Returns:
        ``plugin 'P': backend 'B' refused: its robomimic factory F has the signature ...; expected ...``.
    """
    return (
        f"plugin {plugin!r}: backend {backend!r} refused: its {framework} {problem} (the protocols: "
        "robo_loaders_plugin.extend)"
    )
