"""Progress bars inside a bigger job: quieted while one bar covers the job.

Why: a backend shows a bar while it builds a dataset's store, which is what a user of one dataset wants to see. A
mixture builds hundreds of components' datasets one after the other: their bars made 400 lines of finished bars on
a pretraining mixture's first start, and at every start for a backend that builds its tiers at each start. A
mixture's build shows one bar over its components (``mixtures.component_lines``) and, while it runs, the bars a
backend makes inside it are disabled.

A context variable, not a global: only the thread (and task) building the mixture is quieted; another thread's
build keeps its bars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_QUIET: ContextVar[bool] = ContextVar("robo_loaders_inner_bars_quiet", default=False)


def inner_bars_quiet() -> bool:
    """Whether a bar made now is inside a job that shows its own bar: pass it as tqdm's ``disable``.

    Returns:
        ``True`` inside :func:`quiet_inner_bars`.
    """
    return _QUIET.get()


@contextlib.contextmanager
def quiet_inner_bars(quiet: bool = True) -> Iterator[None]:
    """Disable the bars a backend makes (those that ask :func:`inner_bars_quiet`) within the block.

    Args:
        quiet: Whether to quiet them (``False``: the block changes nothing, for a job too small for a bar of its
            own).
    """
    token = _QUIET.set(bool(quiet) or _QUIET.get())
    try:
        yield
    finally:
        _QUIET.reset(token)
