"""The ``native`` backend: the framework's own loader (robomimic ``SequenceDataset``, ``LeRobotDataset``), unchanged,
the reference every other backend is compared with. No options.

This module is the plugin the ``robo_loaders`` entry point ``native`` names (as a third party's would be): its
spec and options. It imports nothing heavy (no torch, no Blosc2, no framework): listing backends imports it, and
the factories (``robomimic.py``, ``lerobot.py``) are imported only when a dataset is built.
"""

from __future__ import annotations

from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.spec import SAMPLE, BackendSpec

SPEC = BackendSpec(
    name="native",
    description="the framework's own loader (robomimic SequenceDataset / LeRobotDataset), unchanged",
    frameworks=("robomimic", "lerobot"),
    kind=SAMPLE,
    factories={
        "robomimic": "robo_loaders_plugin.backends.native.robomimic:native_dataset",
        "lerobot": "robo_loaders_plugin.backends.native.lerobot:native_dataset",
    },
)


@hookimpl
def robo_loaders_backends() -> list[BackendSpec]:
    """This plugin's backend (``core.hookspecs``).

    Returns:
        ``[SPEC]``.
    """
    return [SPEC]
