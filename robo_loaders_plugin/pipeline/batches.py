"""The datapipe BatchSource: plan -> parallel assembly threads -> prefetch [-> pinned memory] -> batches.

Framework-neutral: it is given the items of a pass grouped by episode and a ``collate(indices)`` that builds a
batch in the framework's layout; both adapters use it. Threads (not processes): assembly decompresses with the GIL
released and the batch stays in the training process, so nothing is copied through shared memory.
"""
from __future__ import annotations

import atexit
import weakref
from typing import Callable

import numpy as np
from torchdata.nodes import ParallelMapper, Prefetcher

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.iteration import BatchDataset, BatchSource, SamplingPlan
from robo_loaders_plugin.core.torch_compat import shutdown_node_threads
from robo_loaders_plugin.pipeline.plan import BatchPlanNode, ItemGroups

_LIVE: "weakref.WeakSet[PipelineBatches]" = weakref.WeakSet()


class PipelineBatches(BatchSource):
    def __init__(self, groups: ItemGroups, collate: Callable[[np.ndarray], dict], plan: SamplingPlan, *, seed: int,
                 shuffle_buffer: int, replacement: bool = False, prefetch: int = 2, backend: str = "datapipe"):
        if plan.world_size > 1:
            raise RoboLoadersError(f"backend {backend!r} runs single-process for now (the pipeline does not split "
                                   "passes across ranks); use --dataset.backend=compressed_cache with several "
                                   "processes")
        super().__init__(plan.start_epoch, plan.start_batch)
        self.groups = groups
        self.plan_node = BatchPlanNode(groups.counts, plan.batch_size, plan.drop_last, seed, shuffle_buffer,
                                       plan.shuffle, replacement)

        def assemble(pairs: np.ndarray) -> dict:
            return collate(groups.indices(pairs))

        self.num_threads = max(1, int(plan.num_workers))
        node = ParallelMapper(self.plan_node, map_fn=assemble, num_workers=self.num_threads, in_order=True,
                              method="thread")
        if prefetch > 0:
            node = Prefetcher(node, prefetch_factor=int(prefetch))
        if plan.pin_memory:
            from torchdata.nodes import PinMemory

            node = PinMemory(node)
        self.root = node
        _LIVE.add(self)

    def __len__(self) -> int:
        return self.plan_node.num_batches()

    def describe(self) -> str:
        return (f"the torchdata pipeline ({self.num_threads} threads, {len(self)} batches per pass, starting at "
                f"epoch {self._epoch} batch {self._batch})")

    def plan_of(self, epoch: int) -> np.ndarray:
        """(episode, k) pairs of pass ``epoch`` in serving order (tools and tests; no data is read)."""
        return self.plan_node.plan_of(epoch)

    def batches(self, epoch, start=0):
        self.plan_node.seek(epoch, start)
        self.root.reset()
        while True:
            try:
                yield next(self.root)
            except StopIteration:
                return

    def shutdown(self) -> None:
        """Stop the pipeline's threads and wait for them.

        Why: torchdata's worker threads are daemons. A training script that ends while they are still assembling
        the next batches (a prefetching pipeline always is) lets the interpreter finalize under them, and a thread
        inside torch or Blosc2 at that moment aborts the process ("terminate called without an active exception",
        exit 134) after a successful run. Every pipeline is shut down at exit; call this to stop one sooner."""
        shutdown_node_threads(self.root)


@atexit.register
def _shutdown_live() -> None:
    for source in list(_LIVE):
        source.shutdown()


class PipelineDataset(BatchDataset):
    """What a samples dataset adds to be served by this pipeline (the ``datapipe`` kind of dataset): its frame
    source's episode of every dataset index (``episode_of()``), a ``collate(indices)``, and the options."""

    datapipe = None  # DatapipeOptions, set by the factory
    backend_name = "datapipe"

    def batch_source(self, plan: SamplingPlan) -> PipelineBatches:
        items = np.arange(len(self)) if plan.items is None else np.asarray(plan.items, dtype=np.int64)
        episode_of = self.episode_of()
        groups = ItemGroups(items, episode_of, len(self.frames.lengths))
        seed = self.datapipe.seed if self.datapipe.seed is not None else (plan.seed or 0)
        return PipelineBatches(groups, self.collate, plan, seed=seed, shuffle_buffer=self.datapipe.shuffle_buffer,
                               replacement=self.datapipe.replacement, prefetch=self.datapipe.prefetch,
                               backend=self.backend_name)

    def batch_episodes(self, batch_size: int, drop_last: bool = True, epoch: int = 0) -> list[np.ndarray]:
        """Episode of every item, batch by batch, of shuffled pass ``epoch`` (no data is read): how batches mix
        episodes, for the benchmark's episode-mix metric."""
        source = self.batch_source(SamplingPlan(batch_size=batch_size, drop_last=drop_last))
        eps = source.plan_of(epoch)[:, 0]
        return [eps[b * batch_size:(b + 1) * batch_size] for b in range(len(source))]
