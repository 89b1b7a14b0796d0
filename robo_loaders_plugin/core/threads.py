"""An ordered map over threads: the one way the plugin builds batches ahead of the training loop in threads.

Why threads: batch building decompresses or gathers with the GIL released, and the batch stays in the training
process (no worker processes, no copy through shared memory). Why in order: the batches must come out in the
sampler's order, so training sees exactly the native sequence.

Why not ``torchdata.nodes.ParallelMapper(in_order=True)``, which does the same for the batch-kind backends'
pipeline (``pipeline/batches.py``): torchdata is an optional extra (``[datapipe]``), and this map serves the
``indexed`` kind's passes (``core.iteration``: ``SamplerBatches``, ``RankBatches``) and mixtures of any backends
(``mixtures.batches``), none of which requires it. Used only where torchdata is installed, it would be a second
code path for the same passes.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor


def ordered_map[T, R](
    fn: Callable[[T], R], items: Iterable[T], threads: int, depth: int, name: str = "robo-loaders-batch"
) -> Iterator[R]:
    """``fn(item)`` for every item, computed by ``threads`` threads, yielded in the items' order.

    Args:
        fn: The work for one item.
        items: Consumed lazily, at most ``depth`` items ahead of what has been yielded.
        threads: Worker threads; ``0`` runs ``fn`` in the caller's thread, one item at a time.
        depth: Items in flight (submitted, not yet yielded); at least 1.
        name: Prefix of the worker threads' names (seen in py-spy and tracebacks).

    Yields:
        ``fn(item)``, in order. An exception raised by ``fn`` is raised here, at its item's turn.

    When the consumer stops early (robomimic stops an epoch after ``epoch_every_n_steps``) or the generator is
    closed, queued items are cancelled and the running ones waited for, so no thread outlives the pass. A pass
    still suspended when the interpreter exits ends quietly.
    """
    if threads <= 0:
        yield from map(fn, items)
        return
    finalizing = sys.is_finalizing  # held here: at interpreter exit the module's globals may already be gone
    pool = ThreadPoolExecutor(int(threads), thread_name_prefix=name)
    pending: deque = deque()
    depth = max(1, int(depth))
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except Exception:
            # a pass left suspended until the interpreter exits is finalized after the modules the shutdown uses
            # (``queue``); its threads are ending anyway, and the traceback would only alarm the user
            if not finalizing():
                raise
