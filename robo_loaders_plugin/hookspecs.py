"""pluggy hook specifications of the ``robo_loaders`` project.

Backends (built-in and third-party) are plugins: a module or object with a ``@hookimpl`` function
``robo_loaders_backends()`` returning :class:`~robo_loaders_plugin.spec.BackendSpec` objects. Third-party packages
expose such a module through the ``robo_loaders`` entry-point group::

    [project.entry-points.robo_loaders]
    my_backend = "my_package.robo_loaders_plugin"
"""
from __future__ import annotations

import pluggy

PROJECT_NAME = "robo_loaders"
ENTRY_POINT_GROUP = "robo_loaders"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def robo_loaders_backends():
    """Return an iterable of ``BackendSpec`` this plugin provides."""
