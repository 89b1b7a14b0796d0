"""The plugin API: the hooks a robo-loaders plugin may implement, with their types and contracts.

A plugin is a module (or any object) with ``@hookimpl`` functions named after the specifications below. The
built-in backends are registered the same way: one package each under ``robo_loaders_plugin.backends``, each an
entry point of the group below. A third-party package exposes its plugin module through the ``robo_loaders``
entry-point group::

    [project.entry-points.robo_loaders]
    my_backend = "my_package.robo_loaders_plugin"

An entry point that fails to import, or whose hook raises, is reported with a warning naming it and skipped; the
other plugins and the built-in backends stay available.
"""
from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Iterable

import pluggy

if TYPE_CHECKING:
    from robo_loaders_plugin.core.spec import BackendSpec

PROJECT_NAME = "robo_loaders"
ENTRY_POINT_GROUP = "robo_loaders"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def robo_loaders_backends() -> Iterable[BackendSpec]:  # type: ignore[empty-body]  # a hookspec: pluggy never runs it
    """Return the backends this plugin provides.

    Called once per process, the first time a backend is looked up (``robo-loaders list``, a robomimic config with
    ``train.data_backend``, ``lerobot-train --dataset.backend``). Must be cheap: return
    :class:`~robo_loaders_plugin.core.spec.BackendSpec` objects whose factories are ``"module:function"`` strings,
    so that listing backends imports neither the backend's code nor robomimic, LeRobot or torch.

    Contract of what a factory returns, by ``BackendSpec.kind`` (``robo_loaders_plugin.core.iteration``):

    - ``sample``: a map-style ``torch.utils.data.Dataset`` with the framework's sample layout;
    - ``indexed``: an :class:`~robo_loaders_plugin.core.iteration.IndexedDataset` (``collate(indices)``);
    - ``batch``: a :class:`~robo_loaders_plugin.core.iteration.BatchDataset` (``batch_source(plan)``).

    The adapter checks the returned object against the declared kind and fails naming the backend otherwise.
    Backend names must be unique across all plugins.
    """
