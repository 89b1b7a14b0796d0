"""The calling thread's CPU scheduling kept across a video encode.

SVT-AV1 (``libsvtav1``, the AV1 encoder LeRobot writes its videos with) run as root switches the thread that opens
an encoder to real-time scheduling (``SCHED_FIFO``, priority 99) and leaves it so. The rest of that thread's work,
and every process it starts (DataLoader workers, ``lerobot-train``), then runs at real-time priority, where the
busy-waiting OpenMP threads of two such processes starve each other on a small machine: in this project's test
suite a ``lerobot-train`` resume of two tiny ACT steps was still in its backward pass after 12 minutes. Every encode
the package makes, and every dataset it writes with LeRobot's writer, runs inside :func:`kept_scheduling`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any


def _current() -> tuple[int, int] | None:
    """``(policy, priority)`` of the calling thread, or None where the platform has no such call."""
    try:
        return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    except (AttributeError, OSError):
        return None


@contextlib.contextmanager
def kept_scheduling() -> Iterator[None]:
    """Run the block, then put the calling thread's scheduling policy and priority back as they were before it.

    Lowering a policy needs no privilege, so the restore cannot fail where the encoder could raise it; on a platform
    without ``os.sched_getscheduler`` it does nothing.
    """
    before = _current()
    try:
        yield
    finally:
        if before is not None and _current() != before:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, before[0], os.sched_param(before[1]))


def keeps_scheduling[F: Callable[..., Any]](func: F) -> F:
    """``func`` run inside :func:`kept_scheduling` (a decorator for the functions that encode video).

    Args:
        func: The function that encodes (or writes a dataset with LeRobot's writer).

    Returns:
        ``func`` wrapped, its signature and docstring kept.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with kept_scheduling():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def back_to_normal() -> bool:
    """Put a calling thread left at real-time priority (``SCHED_FIFO``/``SCHED_RR``) back to ``SCHED_OTHER``.

    Returns:
        Whether it was at real-time priority.
    """
    now = _current()
    if now is None or now[0] not in (os.SCHED_FIFO, os.SCHED_RR):
        return False
    with contextlib.suppress(OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True
