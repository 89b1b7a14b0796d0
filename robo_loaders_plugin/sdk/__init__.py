"""The backend SDK: a backend writes how it stores and serves frames (a :class:`FrameStore`), and
:func:`frame_backend` turns it into a registered backend for robomimic and LeRobot.

Why: every backend that keeps frames in its own files needs the same bookkeeping around its idea (registration, the
footprint stated and checked before any data is read, placed in RAM or on disk, and counted in a mixture's; a cache
entry built once per source and options and checked on reuse; the fields' dtypes, shapes and lengths recorded and
checked; the serving summary; pickling for DataLoader workers; a ``per_host`` cache option; an explicit lifecycle),
and a plugin author who copied it from the example got about 85% bookkeeping. Here it is done once, for a built-in
store and a third party's alike (the built-in stores are plugins of this SDK, in ``backends/``); the built-in
window rules and datasets serve the frameworks' samples from whatever the store opens.

This module is imported by a plugin's registration (``robo_loaders_backends``), which must stay cheap: it imports
nothing heavier than the footprint contract, and the serving half (``sdk.serve``: torch, the frameworks, the
store's own module) is imported when a factory first runs. The names are public through
``robo_loaders_plugin.extend``.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.util
from collections.abc import Callable, Mapping

from robo_loaders_plugin.core.options import Option, Options, check_size, to_bytes
from robo_loaders_plugin.core.shared_options import check_writable_dir
from robo_loaders_plugin.core.spec import GPU_NO, INDEXED, LOSSLESS, SAMPLE, BackendSpec
from robo_loaders_plugin.sdk.placement import Placement, PlaceRequest
from robo_loaders_plugin.sdk.store import FrameStore, StoreEpisodes
from robo_loaders_plugin.storage.cache import cache_root  # the cache root a backend writes under (public)

# what a frame store's dataset is driven by, by default: robomimic's batches built by threads in the training
# process over its own sampler; LeRobot's DataLoader workers (its image transforms draw from their RNG)
DEFAULT_KIND = {"robomimic": INDEXED, "lerobot": SAMPLE}


def cache_dir_option(help: str = "") -> Option:
    """The declaration of a ``cache_dir`` option, as the built-in backends declare theirs: a string, ``None`` by
    default (the cache root of :func:`cache_root`; a store that may live in RAM: RAM), checked writable at argument
    parsing, and ``per_host``.

    Why ``per_host``: the processes of a multi-process run must agree on every option (the run is refused
    otherwise) except those declared ``per_host``, such as a local path each host has its own of.

    Args:
        help: The help line (default: where the store goes and when it is reused).

    Returns:
        The :class:`Option`.
    """
    return Option(
        str,
        None,
        help
        or "the cache directory the store is built in (default: $ROBO_LOADERS_CACHE or "
        "~/.cache/robo-loaders); reused while the source and options are unchanged",
        per_host=True,
        check=check_writable_dir,
    )


def max_memory_option(help: str = "") -> Option:
    """The declaration of a ``max_memory`` option: the RAM a store that may live in RAM (:attr:`FrameStore.ram`)
    may take there; a store that may take more goes to disk instead. Bytes, or a size as the user writes it
    (``'2GB'``, ``'512MiB'``), checked at argument parsing and converted to bytes when the options are resolved.

    Args:
        help: The help line.

    Returns:
        The :class:`Option`.
    """
    return Option(
        (float, str),
        None,
        help
        or "RAM the store may take (bytes, '2GB', '512MiB'); a store that may take more is kept in the cache "
        "directory on disk instead (the log says so)",
        check=check_size,
        convert=to_bytes,
    )


def store_reference_problem(store: str) -> str | None:
    """What is wrong with a ``"module:Class"`` store reference, found without importing the module (a plugin's
    registration must not import torch): the module must be found, and ``Class`` bound at its top level (a class,
    an assignment or an import). Whether it is a ``FrameStore`` is checked when it is first imported to build.

    Why not import it: ``robo-loaders list`` reads every plugin's registration, and a store module importing torch
    or a framework at its top (the example's does) would cost every listing their import (torch: about 3 s and
    0.6 GB, measured for factories in docs/architecture.md); finding the module and reading its names takes
    milliseconds.

    Args:
        store: The reference.

    Returns:
        ``None`` when it names a class that exists, else one phrase.
    """
    module, _, name = store.partition(":")
    if not module or not name or not name.isidentifier():
        return f"store must be 'module:Class', got {store!r}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:  # a parent package that fails to import, or a bad name
        return f"store {store!r}: module {module!r} cannot be found ({type(exc).__name__}: {exc})"
    if spec is None:
        return f"store {store!r}: no module named {module!r}"
    try:
        source = spec.loader.get_source(module) if isinstance(spec.loader, importlib.abc.InspectLoader) else None
    except (ImportError, OSError):
        source = None
    if source is None:  # a compiled or namespace module: checked when it is imported
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"store {store!r}: {spec.origin} does not parse ({exc.msg}, line {exc.lineno})"
    if name in _top_level_names(tree):
        return None
    classes = sorted(n for n in _top_level_names(tree) if n[:1].isupper())
    return f"store {store!r}: {module} has no {name!r} (its classes: {', '.join(classes) or 'none'})"


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level, also inside a top-level ``if`` or ``try`` (a class, a function, an
    assignment, an import)."""
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return names


def frame_backend(
    name: str,
    store: str,
    *,
    description: str,
    frameworks: tuple[str, ...] = ("robomimic", "lerobot"),
    kind: str | Mapping[str, str] | None = None,
    lossless: str | Mapping[str, str] = LOSSLESS,
    gpu: str | Mapping[str, str] = GPU_NO,
    options: Mapping[str, Option] | None = None,
    constraints: Callable[[Options], None] | None = None,
    requires: Mapping[str, tuple] | None = None,
) -> BackendSpec:
    """A backend serving robomimic's and LeRobot's samples from a :class:`FrameStore`, for a plugin's
    ``robo_loaders_backends`` hook.

    The factories it declares follow the frameworks' protocols and return
    ``RobomimicSamples``/``LeRobotSamples`` with ``close()`` (releases the cache entry's hold, closes the frame
    source, drops the batch buffers) and ``with ... as ds:``; garbage collection releases them too. Its footprints
    (``BackendSpec.footprints``) are the store's placement from metadata, so a mixture of its datasets is checked
    as one before any is built.

    Args:
        name: The backend's name (``train.data_backend``, ``--dataset.backend``).
        store: The store class as ``"module:Class"``, imported when a factory first runs (so registering the
            backend imports neither the store nor torch); a module or class that does not exist is refused here, so
            ``robo-loaders list`` names it (found without importing the module: whether the class is a
            :class:`FrameStore` is checked when a factory first imports it).
        description: One sentence for ``robo-loaders list``.
        frameworks: The frameworks served.
        kind: ``SAMPLE`` or ``INDEXED``, or per framework (default: ``INDEXED`` on robomimic, ``SAMPLE`` on
            LeRobot).
        lossless: What the backend promises about its samples (``LOSSLESS``, ``LOSSY_FRAMES``), or per framework.
        gpu: ``GPU_NO``, ``GPU_OPTIONAL`` or ``GPU_REQUIRED``, or per framework.
        options: The store's own options, in the order ``robo-loaders list`` shows them; a ``cache_dir``
            (:func:`cache_dir_option`) is added unless declared.
        constraints: Checks across options (``BackendSpec.constraints``).
        requires: Modules the store needs per framework, with an install hint (``BackendSpec.requires``).

    Returns:
        The :class:`BackendSpec`.

    Raises:
        ValueError: ``store`` does not name a class of a module that exists, a kind is ``BATCH``, or ``cache_dir``
            is declared without ``per_host``.
    """
    problem = store_reference_problem(store)
    if problem:
        raise ValueError(f"backend {name!r}: {problem}; fix the store= of frame_backend()")
    kind = dict(DEFAULT_KIND) if kind is None else kind
    kinds = kind.values() if isinstance(kind, Mapping) else [kind]
    if any(k not in (SAMPLE, INDEXED) for k in kinds):
        raise ValueError(f"backend {name!r}: a frame store serves the sample or indexed kind, got {kind!r}")
    declared = dict(options or {})
    declared.setdefault("cache_dir", cache_dir_option())
    if not declared["cache_dir"].per_host:
        raise ValueError(
            f"backend {name!r}: option 'cache_dir' is a local path and must be declared per_host=True "
            "(or use cache_dir_option())"
        )
    from robo_loaders_plugin.sdk import factories

    made = {
        "robomimic": functools.partial(factories.robomimic_factory, store=store, backend=name),
        "lerobot": functools.partial(factories.lerobot_factory, store=store, backend=name),
    }
    planned = {
        "robomimic": functools.partial(factories.robomimic_footprint, store=store, backend=name),
        "lerobot": functools.partial(factories.lerobot_footprint, store=store, backend=name),
    }
    kind = {fw: kind[fw] for fw in frameworks} if isinstance(kind, Mapping) else kind
    return BackendSpec(
        name=name,
        description=description,
        frameworks=tuple(frameworks),
        kind=kind,
        factories={fw: made[fw] for fw in frameworks},
        footprints={fw: planned[fw] for fw in frameworks},
        options=declared,
        constraints=constraints,
        lossless=lossless,
        gpu=gpu,
        requires=dict(requires or {}),
    )


__all__ = [
    "DEFAULT_KIND",
    "FrameStore",
    "PlaceRequest",
    "Placement",
    "StoreEpisodes",
    "cache_dir_option",
    "cache_root",
    "frame_backend",
    "max_memory_option",
]
