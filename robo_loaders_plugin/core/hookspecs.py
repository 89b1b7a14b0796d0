"""The plugin API: the hooks a robo-loaders plugin may implement, with their types and contracts.

A plugin is a module (or any object) with ``@hookimpl`` functions named after the specifications below. The
built-in backends are registered the same way: one package each under ``robo_loaders_plugin.backends``, each an
entry point of the group below. A third-party package exposes its plugin module through the ``robo_loaders``
entry-point group::

    [project.entry-points.robo_loaders]
    my_backend = "my_package.robo_loaders_plugin"

A third-party plugin that fails to import, whose hook raises or returns anything but ``BackendSpec`` objects, that
declares a built-in backend's name, or whose entry point is named as a built-in's or another plugin's, is skipped
with one line naming its entry point and distribution and what is wrong (a warning, and an ``error:`` line of
``robo-loaders list``); the other plugins and the built-in backends stay available (``core.registry``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

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
    so that this module imports neither the backend's code nor robomimic, LeRobot or torch. Registration imports a
    third-party factory's module to check its signature (below): a module that imports torch or a framework only
    inside its factories keeps ``robo-loaders list`` light.

    Contract of what a factory returns, by ``BackendSpec.kind`` (``robo_loaders_plugin.core.iteration``):

    - ``sample``: a map-style ``torch.utils.data.Dataset`` with the framework's sample layout;
    - ``indexed``: an :class:`~robo_loaders_plugin.core.iteration.IndexedDataset` (``collate(indices)``);
    - ``batch``: a :class:`~robo_loaders_plugin.core.iteration.BatchDataset` (``batch_source(plan)``).

    The adapter checks the returned object against the declared kind and fails naming the backend otherwise.
    Backend names must be unique across all plugins: a plugin declaring a built-in's name is skipped, and a name
    two plugins declare is refused (which one served would depend on the installation order).

    Every factory must take the call of its framework's protocol (:func:`robomimic_factory`,
    :func:`lerobot_factory`, below); one that cannot is refused when the backends are registered, and
    ``robo-loaders list`` names its plugin, backend, framework and the expected signature.
    """


# -- the factory protocols ------------------------------------------------------------------------------------------
# What ``BackendSpec.factories`` must accept, per framework: the adapters call a factory exactly so
# (``robomimic.integration.build_dataset``: ``factory(config, obs_keys, filter_by_attribute=..., dataset_path=...,
# options=...)``; ``lerobot.integration``: ``factory(native, options=...)``). A factory whose signature cannot take
# such a call is refused (``core.factory_check``: the calls bound to the imported factory's signature), a
# third-party one when the backends are registered: ``robo-loaders list`` names the plugin, backend, framework and
# the expected signature, instead of the first training run failing with a ``TypeError``. Extra parameters are
# allowed when they have defaults; ``**kwargs`` takes anything.
def robomimic_factory(config, obs_keys, filter_by_attribute=None, dataset_path=None, *, options):
    """The protocol of a robomimic factory (declared here, never called): build the dataset robomimic's
    ``dataset_factory`` would build.

    Args:
        config: robomimic's config (``train.*`` decides the windows).
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (``None``: ``config.train.data``).
        options: The backend's resolved, typed options object (keyword only).

    Returns:
        What the backend's declared kind says (``sample``: a map-style dataset; ``indexed``: an ``IndexedDataset``;
        ``batch``: a ``BatchDataset``).
    """


def lerobot_factory(native, *, options):
    """The protocol of a LeRobot factory (declared here, never called): serve the ``LeRobotDataset`` LeRobot's own
    ``make_dataset`` built.

    Args:
        native: The ``LeRobotDataset`` (episode selection, ``delta_timestamps``, transforms, tolerance).
        options: The backend's resolved, typed options object (keyword only).

    Returns:
        What the backend's declared kind says, as for :func:`robomimic_factory`.
    """


FACTORY_PROTOCOLS: dict[str, Callable[..., Any]] = {"robomimic": robomimic_factory, "lerobot": lerobot_factory}
