"""Time per epoch over successive epochs, in the format ``robo-loaders report`` plots.

A result row (of ``bench robomimic|lerobot`` or of a matrix) may carry::

    "epoch_times_s": [12.8, 3.1, 3.0],   # wall seconds of each full pass, in order, measured after the build
    "epoch_samples": [9000, 9000, 9000]  # optional: samples served in each pass

Epoch 1 includes creating the iterator (worker start-up, first batch); the dataset's build (``build_s``) and, for
``datapipe`` when the benchmark converted the data itself, the conversion (the result's ``conversion[-1].wall_s``,
the shards datapipe then read) come before it. The report adds those to show what a first epoch really costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


def time_epochs(loader: Iterable, epochs: int, batch_size_of: Callable, batches_per_epoch: int | None = None) -> dict:
    """Time ``epochs`` successive passes. Without ``batches_per_epoch`` each pass is ``iter(loader)`` run to its end
    (robomimic's DataLoader / ``epoch_loader``); with it, one iterator is created and ``batches_per_epoch`` batches
    are drawn per pass (an endless stream such as lerobot-train's ``cycle(dataloader)``, where a pass is
    ``len(dataloader)`` batches)."""
    times, counts = [], []
    stream = None
    for _ in range(epochs):
        t = time.perf_counter()
        n = 0
        if batches_per_epoch is None:
            for batch in loader:
                n += batch_size_of(batch)
        else:
            if stream is None:  # created inside epoch 1's time, as a training loop does
                stream = iter(loader)
            for _, batch in zip(range(batches_per_epoch), stream):
                n += batch_size_of(batch)
        times.append(time.perf_counter() - t)
        counts.append(n)
    return {"epoch_times_s": times, "epoch_samples": counts}
