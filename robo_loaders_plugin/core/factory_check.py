"""Factories checked against their framework's protocol when the backends are registered
(``core.hookspecs.FACTORY_PROTOCOLS``), as pluggy checks a hookimpl's arguments against its hookspec.

Why at registration: a factory whose signature cannot take the adapter's call used to fail at the first training
run, as a ``TypeError`` deep in the framework's start-up. Here ``robo-loaders list`` (and every lookup of a backend)
refuses it with one line naming the plugin, the backend, the framework and the expected signature.

Why without importing the factory's module: listing backends must not import torch or a framework, and a factory
module usually imports both. A ``"module:function"`` factory is read from its module's source (``ast``): its
module is found with ``importlib.util.find_spec`` (which imports the parent packages only, never the module) and
its top-level ``def`` gives the parameters. A factory that is not a top-level ``def`` of its module (assigned,
imported from elsewhere, a compiled module) is checked when it is first imported (``BackendSpec.factory_for``);
a factory given as a callable is checked with :func:`inspect.signature`.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from robo_loaders_plugin.core.hookspecs import FACTORY_PROTOCOLS

_REQUIRED = inspect.Parameter.empty
_ARGS: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "robomimic": [
        ((1, 2, None, None), {"options": 3}),  # the protocol's parameters, by position and keyword
        ((1, 2), {"filter_by_attribute": None, "dataset_path": None, "options": 3}),
    ],  # the adapter's
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


def signature_problem(signature: inspect.Signature, framework: str) -> str | None:
    """Why a factory of ``signature`` cannot take the adapter's call under ``framework`` (``None``: it can).

    Args:
        signature: The factory's signature.
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        ``None``, or what the signature is and what it should be.
    """
    for args, kwargs in _ARGS[framework]:
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            return f"has the signature {signature}; expected {expected_signature(framework)}"
    return None


def _ast_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> inspect.Signature:
    """A function's signature from its ``def`` (defaults as ``...``: only whether there is one matters)."""
    P = inspect.Parameter
    a = fn.args
    params = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=... if i >= first_default else _REQUIRED))
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=_REQUIRED if default is None else ...))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def static_signature(ref: str) -> inspect.Signature | None:
    """The signature of the ``"module:function"`` factory ``ref``, read from its module's source without importing
    the module.

    Args:
        ref: ``"package.module:function"``.

    Returns:
        The signature, or ``None`` when it cannot be read so (no source, or ``function`` is not a top-level
        ``def`` there): the factory is then checked when it is imported.

    Raises:
        ModuleNotFoundError: the module (or a parent package) does not exist.
    """
    module, _, name = ref.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None:
        raise ModuleNotFoundError(f"no module named {module!r}")
    origin = spec.origin
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), origin)
    except (OSError, SyntaxError, ValueError):
        return None  # importing it will say what is wrong
    found = None
    for node in tree.body:  # the last top-level definition wins, as at import
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.ClassDef, ast.Import, ast.ImportFrom)) and any(
            n == name for n in _bound_names(node)
        ):
            found = None
    return None if found is None else _ast_signature(found)


def _bound_names(node) -> list[str]:
    """The names a top-level statement binds (other than a ``def``)."""
    if isinstance(node, ast.ClassDef):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def factory_problem(factory: Callable[..., Any] | str, framework: str) -> str | None:
    """Why ``factory`` does not follow its framework's protocol (``None``: it does, or cannot be told yet).

    Args:
        factory: A ``"module:function"`` reference or a callable.
        framework: ``robomimic`` or ``lerobot``.

    Returns:
        ``None``, or one phrase starting with the factory's name.
    """
    if isinstance(factory, str):
        if ":" not in factory:
            return f"factory {factory!r} is not a 'module:function' reference"
        try:
            signature = static_signature(factory)
        except (ImportError, ValueError) as exc:  # a parent package failing to import, a relative name
            return f"factory {factory!r} cannot be found ({exc})"
        name = factory
    else:
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):  # a builtin without a signature: checked by calling it
            return None
        name = getattr(factory, "__qualname__", None) or type(factory).__name__
        func = getattr(factory, "func", None)
        if callable(func):  # functools.partial: name the function
            name = getattr(func, "__qualname__", name)
    if signature is None:
        return None
    problem = signature_problem(signature, framework)
    return None if problem is None else f"factory {name} {problem}"


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
        f"plugin {plugin!r}: backend {backend!r} refused: its {framework} {problem} (the protocol: "
        "robo_loaders_plugin/core/hookspecs.py)"
    )
