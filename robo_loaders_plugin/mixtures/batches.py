"""A mixture's batches: this rank's share of each pass of a
:class:`~robo_loaders_plugin.mixtures.sampling.MixtureOrder`, built by threads of the training process (or, for the
frameworks' own datasets, by worker processes: ``core.worker_processes``), resumable at any batch.

Modelled on ``core.iteration.RankBatches`` (the same cut into rank shares, the same threads), with the pass drawn
from the mixture's weights instead of a plain permutation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from robo_loaders_plugin.core.iteration import BatchSource, SamplingPlan, digest, pass_key
from robo_loaders_plugin.core.ranks import rank_share
from robo_loaders_plugin.core.threads import ordered_map
from robo_loaders_plugin.core.units import plural
from robo_loaders_plugin.core.worker_processes import ProcessBatches
from robo_loaders_plugin.mixtures.sampling import MixtureOrder, named_shares


class MixtureBatches(BatchSource):
    """Batches of ``plan.batch_size`` global indices from this rank's share of each pass, collated by ``collate``.

    Args:
        collate: ``collate(global_indices) -> batch`` (``MixtureDataset.collate``).
        order: The mixture's pass order (seed, weights, sizes).
        plan: The native pass's batch size, ``drop_last``, rank and resume position (its ``seed`` and ``shuffle``
            are already in ``order``).
        num_threads: Threads building batches (0: the training thread).
        prefetch_per_thread: Batches in flight per thread.
        names: The components' names, for :meth:`describe`.
        processes: Worker processes building the batches instead of threads (``num_threads`` is then unused), or
            ``None``.
    """

    def __init__(
        self,
        collate: Callable[[list], dict],
        order: MixtureOrder,
        plan: SamplingPlan,
        num_threads: int = 0,
        prefetch_per_thread: int = 2,
        names: Sequence[str] | None = None,
        processes: ProcessBatches | None = None,
    ):
        super().__init__(plan.start_epoch, plan.start_batch)
        self.collate, self.order, self.plan = collate, order, plan
        self.pass_key = pass_key(
            plan,
            seed=order.seed,
            mixture_shuffle=order.shuffle,
            sizes=digest(order.sizes),
            windows=digest(order.counts),
            weights=None if order.weights is None else digest(order.weights),
            units=None if order.units is None else [digest(order.units), order.unit_buffer],
        )
        share = len(rank_share(len(order), plan.rank, plan.world_size))
        self._len = share // plan.batch_size if plan.drop_last else -(-share // plan.batch_size)
        self.num_threads, self.depth = int(num_threads), max(1, int(num_threads) * prefetch_per_thread)
        self.names = list(names) if names is not None else [f"component {k}" for k in range(len(order.sizes))]
        self.processes = processes

    def __len__(self) -> int:
        return self._len

    def describe(self) -> str:
        """One line for the training log: the components and their shares, this rank's batches, the start."""
        how = "weighted by size" if self.order.weights is None else "weighted"
        shares = named_shares(self.names, self.order.probabilities)
        by_unit = ""
        if self.order.units is not None and self.order.shuffle:
            by_unit = f", each pass served by unit ({plural(self.order.unit_buffer, 'unit')} open)"
        return (
            f"mixture of {len(self.names)} ({how}: {shares}{by_unit}); rank {self.plan.rank} of "
            f"{self.plan.world_size}, {len(self)} batches per pass, {self._builders()}, starting at epoch "
            f"{self._epoch} batch {self._batch}"
        )

    def _builders(self) -> str:
        if self.processes is not None:
            return plural(self.processes.workers, "worker process", "worker processes")
        return plural(self.num_threads, "thread")

    def indices_of(self, epoch: int):
        """This rank's global indices of a pass, in serving order.

        Args:
            epoch: The pass number.

        Returns:
            The global indices (``MixtureOrder.rank_indices``).
        """
        return self.order.rank_indices(epoch, self.plan.rank, self.plan.world_size)

    def batches(self, epoch, start=0):
        """This rank's batches of a pass, from batch ``start``, built by threads (or worker processes), in order.

        Args:
            epoch: The pass number.
            start: The first batch to serve.
        """
        mine, b = self.indices_of(epoch), self.plan.batch_size
        chunks = (mine[i * b : (i + 1) * b].tolist() for i in range(start, len(self)))
        if self.processes is not None:
            yield from self.processes.map(list(chunks))
            return
        yield from ordered_map(self.collate, chunks, self.num_threads, self.depth)
