"""The ``native`` backend on LeRobot: the ``LeRobotDataset`` LeRobot's own factory built, unchanged, the reference
every other backend is compared with.
"""

from __future__ import annotations


def native_dataset(native, *, options=None):
    """LeRobot's own ``LeRobotDataset``, unchanged: the ``native`` backend, the baseline every other one is compared
    with.

    Args:
        native: The ``LeRobotDataset`` LeRobot's own factory built.
        options: Unused (``native`` declares no options).

    Returns:
        ``native`` itself.
    """
    return native
