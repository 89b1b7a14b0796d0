"""Collated batches built by threads of the training process, in the order a DataLoader would yield them.

Why: a sample-level backend inside torch's DataLoader pays for a worker process per ``num_workers`` (hundreds of
MB each), a collate copy of every batch and a trip through shared memory. The compressed cache decompresses with
the GIL released, so threads in the training process build the same batches, decompressed straight into the
arrays that become the batch tensors. The DataLoader's own batch sampler supplies the indices and its generator
is advanced exactly as ``DataLoader.__iter__`` advances it, so the sample order and the global RNG stream (and
hence the training losses) are the same as with the DataLoader.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import torch


class ThreadedBatches:
    def __init__(self, make_batch: Callable[[list], dict], batch_sampler: Iterable, generator=None,
                 num_threads: int = 0, prefetch_per_thread: int = 2):
        self.make_batch = make_batch
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.num_threads = int(num_threads)
        self.depth = max(1, self.num_threads * prefetch_per_thread)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        # DataLoader.__iter__ draws one base seed for its workers before sampling; draw it too.
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        if self.num_threads == 0:
            for indices in self.batch_sampler:
                yield self.make_batch(list(indices))
            return
        pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="robo-loaders-batch")
        pending = deque()
        try:
            for indices in self.batch_sampler:
                pending.append(pool.submit(self.make_batch, list(indices)))
                if len(pending) >= self.depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # also when the consumer stops early (robomimic stops after epoch_every_n_steps)
            pool.shutdown(wait=True, cancel_futures=True)
