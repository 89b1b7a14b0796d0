"""The batches a training loop keeps alive beside a backend's data, counted in the backend's footprint.

Why: a backend writes its batches into its own buffers (recycled only once nothing references them,
``storage.buffers``), and the batches being assembled, those prefetched and the one the training step holds are
alive at once: at 480x640 one LeRobot batch of 64 samples of 3 cameras served as float32 is 700 MB. A footprint
that left them out let a backend fill the host memory its own batches then needed.

Who knows what: the batch size and the number of threads or DataLoader workers are the framework's settings, not
the backend's, so the adapter states them (:func:`training_loop`, around the factory and footprint calls:
robomimic's ``train.batch_size`` and ``train.num_data_workers``, lerobot-train's ``--batch_size`` and
``--num_workers``); each backend says how many batches it keeps in flight and the bytes of one sample as served.
A factory called without them (a dataset built from Python) names the batches in its bound instead of counting
them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator

from robo_loaders_plugin.core.units import format_bytes


@dataclasses.dataclass(frozen=True)
class TrainingLoop:
    """The framework settings that size the batches in flight.

    Attributes:
        batch_size: Samples per batch.
        workers: Threads or DataLoader worker processes building batches (0: the training process itself, counted
            as one).
    """

    batch_size: int
    workers: int


_current: contextvars.ContextVar[TrainingLoop | None] = contextvars.ContextVar(
    "robo_loaders_training_loop", default=None
)


@contextlib.contextmanager
def training_loop(loop: TrainingLoop | None) -> Iterator[None]:
    """State the training loop while the backend's factories and footprints run (the adapters do).

    Args:
        loop: The loop's settings (``None``: not known).

    Yields:
        Nothing; :func:`current_training_loop` returns ``loop`` inside the block.
    """
    token = _current.set(loop)
    try:
        yield
    finally:
        _current.reset(token)


def current_training_loop() -> TrainingLoop | None:
    """The training loop the adapter stated (:func:`training_loop`), or ``None`` outside one.

    Returns:
        The :class:`TrainingLoop`, or ``None``.
    """
    return _current.get()


@dataclasses.dataclass(frozen=True)
class BatchesInFlight:
    """The batches alive at once while a dataset is served, and their bytes.

    Attributes:
        count: Batches alive at once.
        batch_bytes: Bytes of one (0: not known, the training script sets the batch size).
        how: How :attr:`count` is made up, for the bound (``2 ahead per thread or DataLoader worker (2) + 1 held
            by training``).
    """

    count: int
    batch_bytes: int
    how: str

    @property
    def host_bytes(self) -> int:
        """The bytes they hold together (0 when the batch size is not known)."""
        return self.count * self.batch_bytes

    def describe(self) -> str:
        """The batches in one phrase for a footprint's bound: ``5 batches in flight (2 ahead per thread or
        DataLoader worker (2) + 1 held by training; 420.0 MB)``, or that they are not counted."""
        if not self.batch_bytes:
            return f"batches in flight ({self.how}; not counted: the training script sets their size)"
        return f"{self.count} batches in flight ({self.how}; {format_bytes(self.host_bytes)})"


def indexed_in_flight(sample_bytes: int, loop: TrainingLoop | None = None) -> BatchesInFlight:
    """The batches in flight of a backend whose batches are built by threads of the training process or by
    DataLoader workers over the framework's sampler: each thread or worker keeps two ahead
    (``core.iteration.SamplerBatches``' depth; the DataLoader's ``prefetch_factor``), and training holds one.

    Args:
        sample_bytes: Bytes of one sample as served.
        loop: The training loop (default: :func:`current_training_loop`).

    Returns:
        The :class:`BatchesInFlight` (``batch_bytes`` 0 without a loop).
    """
    loop = loop or current_training_loop()
    if loop is None:
        return BatchesInFlight(0, 0, "2 ahead per thread or DataLoader worker + 1 held by training")
    workers = max(1, int(loop.workers))
    how = f"2 ahead per thread or DataLoader worker ({workers}) + 1 held by training"
    return BatchesInFlight(2 * workers + 1, int(loop.batch_size) * int(sample_bytes), how)
