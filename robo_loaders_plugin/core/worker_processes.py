"""An ordered map over DataLoader worker processes: batches built where the GIL does not serialise them.

Why processes, when :mod:`core.threads` is the plugin's usual way: a batch built from the framework's *own*
datasets (a ``native`` mixture: ``LeRobotDataset`` decoding video through torchcodec item by item, robomimic's
``SequenceDataset`` reading HDF5 through h5py) runs Python for every item and holds the GIL, so threads build one
batch at a time and the training thread waits (a ``native`` LeRobot mixture served 0.59-0.69x the hand-written
``ConcatDataset`` in the DataLoader's workers). The reference pays for worker processes; so does this, with torch's
own DataLoader doing the work: persistent workers started once per run, each batch built by one worker
(``collate(indices)``), yielded in order, through shared memory.

Why a generator of its own: the DataLoader draws its workers' base seed when it starts them. Drawn from torch's
global RNG it would shift every later draw of the training loop (dropout, augmentation) against a run whose batches
were built in threads; a ``torch.Generator`` seeded from the order's seed keeps the loop's stream untouched and the
workers' seeds a function of the run's seed.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch


def _init_worker(init: Callable[[], None], worker_id: int) -> None:
    """The DataLoader's ``worker_init_fn``: ``init()`` in the worker, whichever it is (a module function and a
    ``functools.partial``: picklable for spawned workers)."""
    del worker_id  # every worker is set up alike
    init()


def _as_is(batch: Any) -> Any:
    """The DataLoader's collate: the batch is built by ``collate`` in the worker (a module function: picklable)."""
    return batch


class _CollatedBatches(torch.utils.data.Dataset):
    """``dataset[indices]`` is ``collate(indices)``: one whole batch per "item" the DataLoader asks a worker for.

    Why a weak reference in the training process: ``collate`` is the owner's bound method (a mixture's), and the
    owner keeps the :class:`ProcessBatches` that keeps this: a cycle, so a mixture dropped without ``close()`` kept
    its worker processes until the cycle collector ran (zombies, and two ``pymp-*`` directories per build, in the
    meantime; a reviewer's reproduction). Held weakly, the owner goes when the training process lets it go, and its
    DataLoader stops the workers. A forked worker inherits the owner alive with the process; a spawned one
    unpickles ``collate`` itself, held strongly there.
    """

    def __init__(self, collate: Callable[[list], Any]):
        self._strong: Callable[[list], Any] | None = None
        self._weak: weakref.WeakMethod | None = None
        if inspect.ismethod(collate):
            self._weak = weakref.WeakMethod(collate)
        else:
            self._strong = collate

    @property
    def collate(self) -> Callable[[list], Any]:
        """The batches' ``collate``.

        Raises:
            RuntimeError: its owner is gone.
        """
        if self._strong is not None:
            return self._strong
        collate = self._weak() if self._weak is not None else None
        if collate is None:  # the owner is gone; its workers are being stopped
            raise RuntimeError("the batches' owner was closed")
        return collate

    def __getstate__(self):
        return {"collate": self.collate}  # pickled for a spawned worker: the owner goes with it

    def __setstate__(self, state):
        self._strong, self._weak = state["collate"], None

    def __getitem__(self, indices):
        return self.collate(list(indices))


class _Chunks(torch.utils.data.Sampler):
    """The batches of indices of the pass being served; replaced before each pass (the DataLoader iterates its
    sampler in the training process, so the workers need not know)."""

    def __init__(self):
        self.chunks: list[list[int]] = []

    def __iter__(self):
        return iter(self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)


class ProcessBatches:
    """``collate(indices)`` for each batch of indices, built by ``workers`` persistent worker processes, in order.

    Args:
        collate: Builds one batch from a list of indices (runs in the workers: it and what it references are
            inherited by forked workers, pickled for spawned ones).
        workers: Worker processes (at least 1).
        seed: Seeds the workers (``torch.Generator``), without touching torch's global RNG.
        prefetch_per_worker: Batches each worker builds ahead (the DataLoader's ``prefetch_factor``).
        context: The multiprocessing context (``None``: the DataLoader's default, fork on Linux).
        worker_init: ``worker_init()`` in each worker before its first batch (through the DataLoader's
            ``worker_init_fn``), or ``None``.
        before_start: Called in this process right before the workers start (at the first pass), or ``None``.

    Two passes at once (a second iterator started before the first is exhausted, a validation peek): the workers
    serve one pass at a time, so the second is built in the calling thread, as ``core.threads.ordered_map`` with
    no threads does; both get every batch.
    """

    def __init__(
        self,
        collate: Callable[[list], Any],
        workers: int,
        seed: int,
        prefetch_per_worker: int = 2,
        context: Any = None,
        worker_init: Callable[[], None] | None = None,
        before_start: Callable[[], None] | None = None,
    ):
        self._batches = _CollatedBatches(collate)  # collate held weakly (why: _CollatedBatches)
        self.workers = max(1, int(workers))
        self._chunks = _Chunks()
        self._loader: torch.utils.data.DataLoader | None = torch.utils.data.DataLoader(
            self._batches,
            sampler=self._chunks,
            batch_size=None,
            collate_fn=_as_is,
            num_workers=self.workers,
            persistent_workers=True,
            prefetch_factor=max(1, int(prefetch_per_worker)),
            generator=torch.Generator().manual_seed(int(seed)),
            multiprocessing_context=context,
            worker_init_fn=None if worker_init is None else functools.partial(_init_worker, worker_init),
        )
        self._busy = threading.Lock()
        self._before_start = before_start  # None once the workers are started

    def map(self, chunks: Sequence[list[int]]) -> Iterator[Any]:
        """The batches of ``chunks``, in order.

        Args:
            chunks: Lists of indices, one per batch.

        Yields:
            ``collate(chunk)`` for every chunk. An exception raised in a worker is raised here (torch re-raises
            it in the training process as its own type).
        """
        if self._loader is None or not self._busy.acquire(blocking=False):  # closed, or another pass holds them
            yield from map(self._batches.collate, chunks)
            return
        try:
            self._chunks.chunks = [list(c) for c in chunks]
            start, self._before_start = self._before_start, None
            if start is not None:
                start()
            yield from self._loader
        finally:
            self._busy.release()

    def close(self) -> None:
        """Let the workers go: the DataLoader's iterator stops them when it is collected (at once, unless a pass
        suspended mid-way still holds it), as it does at exit. Later passes are built in the calling thread."""
        self._loader = None
