"""The iteration contract: who drives a training pass, for every backend kind (see ``core.spec``).

Both framework adapters drive backends through this module only: robomimic's ``run_epoch`` patch and LeRobot's
``cycle`` patch call :func:`pass_batches` / :func:`batch_stream` with the DataLoader the framework built, and the
*declared kind* of the backend that built its dataset (recorded by :func:`record_built`) decides what runs:

- ``sample``: the framework's DataLoader, untouched.
- ``indexed``: :class:`SamplerBatches`: indices from exactly the framework's batch sampler, batches built by
  threads of the training process with the dataset's ``collate`` (same order, same RNG use as the DataLoader).
- ``batch``: the dataset's :class:`BatchSource`, built once per DataLoader from a :class:`SamplingPlan` that says,
  in framework-neutral terms, what the native loop would serve.
"""
from __future__ import annotations

import abc
import dataclasses
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch.utils.data

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.ranks import rank_share
from robo_loaders_plugin.core.spec import BATCH, INDEXED, SAMPLE, BackendSpec

# BatchSource.state_dict() keys: the position of the next batch to serve
STATE_EPOCH = "epoch"
STATE_BATCH = "batch"


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    """What the framework's native loop would serve, handed to a ``batch`` backend.

    ``items`` are the dataset indices one pass covers, in the native sampler's unshuffled order (``None``: every
    index of the dataset); a pass starts at (``start_epoch``, ``start_batch``) (LeRobot's ``--resume``).
    ``seed`` is the framework's order seed when it has one (LeRobot's sampler seed), else ``None`` and the backend
    uses its own option. ``num_workers`` is the loop's worker budget: in-process backends use it as threads.
    ``rank``/``world_size``: this process's share of a multi-process run (one process: 0/1).
    """

    batch_size: int
    drop_last: bool = False
    shuffle: bool = True
    seed: int | None = None
    num_workers: int = 0
    items: np.ndarray | None = None
    start_epoch: int = 0
    start_batch: int = 0
    pin_memory: bool = False
    rank: int = 0
    world_size: int = 1


class BatchSource(abc.ABC):
    """Collated batches, one backend-ordered pass after another.

    The position is (epoch, batch): ``iter()`` serves the next pass (or the one :meth:`load_state_dict`
    positioned, from its batch on), and :meth:`state_dict` is always the position of the next batch, so a stopped
    run resumes on the same next batch. A pass abandoned part-way (robomimic's ``epoch_every_n_steps``) is not
    resumed by the next ``iter()``: like a DataLoader, that starts a new pass.
    """

    def __init__(self, start_epoch: int = 0, start_batch: int = 0):
        self._epoch, self._batch, self._positioned = int(start_epoch), int(start_batch), True

    @abc.abstractmethod
    def __len__(self) -> int:
        """Batches per pass (for this rank)."""

    @abc.abstractmethod
    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """Pass ``epoch`` from batch ``start`` on; a pure function of (epoch, start) and the backend's seed."""

    def __iter__(self) -> Iterator[Any]:
        if self._positioned:
            epoch, start = self._epoch, self._batch
        else:
            epoch, start = self._epoch + (1 if self._batch else 0), 0
        self._positioned = False
        self._epoch, self._batch = epoch, start
        for batch in self.batches(epoch, start):
            self._batch += 1
            yield batch
        self._epoch, self._batch, self._positioned = epoch + 1, 0, True

    def describe(self) -> str:
        """One line for the training log: what serves the batches, and from where a resumed run starts."""
        return f"{type(self).__name__} ({len(self)} batches per pass, starting at epoch {self._epoch} batch {self._batch})"

    def state_dict(self) -> dict:
        if self._batch >= len(self):
            return {STATE_EPOCH: self._epoch + 1, STATE_BATCH: 0}
        return {STATE_EPOCH: self._epoch, STATE_BATCH: self._batch}

    def load_state_dict(self, state: dict) -> None:
        self._epoch, self._batch, self._positioned = int(state[STATE_EPOCH]), int(state[STATE_BATCH]), True


class IndexedDataset(torch.utils.data.Dataset, abc.ABC):
    """A map-style dataset that also builds whole collated batches (``indexed`` kind).

    ``batches_in_process``: whether the adapter should build batches in the training process (False leaves the
    framework's DataLoader in charge, e.g. robomimic's ``loader: "dataloader"`` option). ``batch_threads``: how
    many threads build them (None: the DataLoader's ``num_workers``; 0 for device-resident data, whose gathers are
    queued on the GPU by the training thread)."""

    batches_in_process: bool = True
    batch_threads: int | None = None

    @abc.abstractmethod
    def collate(self, indices) -> dict:
        """The collated batch the framework's DataLoader would build from ``[self[i] for i in indices]``."""


class BatchDataset(torch.utils.data.Dataset, abc.ABC):
    """A dataset whose training passes the backend orders itself (``batch`` kind). Frameworks still see a dataset
    (robomimic calls ``len()`` and ``print()`` and builds a DataLoader over it); the adapter then asks it for a
    :class:`BatchSource` instead of iterating that DataLoader."""

    @abc.abstractmethod
    def batch_source(self, plan: SamplingPlan) -> BatchSource:
        """A source serving the passes ``plan`` describes (called once per DataLoader)."""

    def __getitem__(self, index):
        raise TypeError(f"backend {getattr(self, 'backend_name', type(self).__name__)!r} yields whole batches, not "
                        "single samples; it must be driven by a robo-loaders framework adapter (is the plugin's "
                        "robomimic/LeRobot patch disabled? ROBO_LOADERS_DISABLE is set or the import hook did not run)")

    def get_dataset_sampler(self):
        return None


_KIND_BASES = {INDEXED: IndexedDataset, BATCH: BatchDataset}
_BUILT: "weakref.WeakKeyDictionary[Any, BackendSpec]" = weakref.WeakKeyDictionary()


def record_built(spec: BackendSpec, dataset) -> None:
    """Remember which backend built ``dataset`` (checked against its declared kind), for the adapters' dispatch."""
    base = _KIND_BASES.get(spec.kind)
    if base is not None and not isinstance(dataset, base):
        raise RoboLoadersError(f"backend {spec.name!r} (plugin {spec.plugin!r}) declares kind {spec.kind!r} but its "
                               f"factory returned a {type(dataset).__name__}, not a {base.__name__}")
    try:
        _BUILT[dataset] = spec
    except TypeError:  # not weak-referenceable: treated as a plain sample dataset
        pass


def built_by(dataset) -> BackendSpec | None:
    try:
        return _BUILT.get(dataset)
    except TypeError:
        return None


class SamplerBatches:
    """Collated batches built by threads of the training process, in the order a DataLoader would yield them.

    Why: a dataset inside torch's DataLoader pays for a worker process per ``num_workers`` (hundreds of MB each), a
    collate copy of every batch and a trip through shared memory. A backend that decompresses with the GIL
    released can instead build the same batches in threads, straight into the arrays that become the batch
    tensors. The DataLoader's own batch sampler supplies the indices and its generator is advanced exactly as
    ``DataLoader.__iter__`` advances it, so the sample order and the global RNG stream (hence the training losses)
    are the same as with the DataLoader.
    """

    def __init__(self, collate: Callable[[list], dict], batch_sampler: Iterable, generator=None, num_threads: int = 0,
                 prefetch_per_thread: int = 2, seed_once: bool = False):
        self.collate = collate
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.num_threads = int(num_threads)
        self.depth = max(1, self.num_threads * prefetch_per_thread)
        self.seed_once, self._seeded = bool(seed_once), False  # persistent workers: one draw for the run

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        from robo_loaders_plugin.core.torch_compat import draw_dataloader_base_seed

        if not (self.seed_once and self._seeded):
            draw_dataloader_base_seed(self.generator)
            self._seeded = True
        if self.num_threads == 0:
            for indices in self.batch_sampler:
                yield self.collate(list(indices))
            return
        pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="robo-loaders-batch")
        pending = deque()
        try:
            for indices in self.batch_sampler:
                pending.append(pool.submit(self.collate, list(indices)))
                if len(pending) >= self.depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # also when the consumer stops early (robomimic stops after epoch_every_n_steps)
            pool.shutdown(wait=True, cancel_futures=True)


class RankBatches(BatchSource):
    """An ``indexed`` backend's share of each pass when the framework's loader does not split passes across
    processes itself (robomimic 0.3.0 has no multi-GPU training; a custom loop runs one process per GPU).

    The pass is a permutation of every index drawn from (seed, pass), the same on every rank, cut by
    :func:`~robo_loaders_plugin.core.ranks.rank_share`: disjoint shares, the same batch count on every rank. Under
    LeRobot this is not used: accelerate already hands each rank a split batch sampler."""

    def __init__(self, collate: Callable[[list], dict], num_items: int, plan: SamplingPlan, seed: int,
                 num_threads: int = 0, prefetch_per_thread: int = 2):
        super().__init__(plan.start_epoch, plan.start_batch)
        self.collate, self.num_items, self.plan, self.seed = collate, int(num_items), plan, int(seed)
        share = len(rank_share(self.num_items, plan.rank, plan.world_size))
        self._len = share // plan.batch_size if plan.drop_last else -(-share // plan.batch_size)
        self.num_threads, self.depth = int(num_threads), max(1, int(num_threads) * prefetch_per_thread)

    def __len__(self) -> int:
        return self._len

    def describe(self) -> str:
        return (f"rank {self.plan.rank} of {self.plan.world_size}'s share of each pass ({len(self)} batches, "
                f"{self.num_threads} threads, starting at epoch {self._epoch} batch {self._batch})")

    def indices_of(self, epoch: int) -> np.ndarray:
        """This rank's indices of pass ``epoch``, in serving order."""
        order = (np.random.default_rng([self.seed, int(epoch)]).permutation(self.num_items) if self.plan.shuffle
                 else np.arange(self.num_items))
        return order[rank_share(self.num_items, self.plan.rank, self.plan.world_size)]

    def batches(self, epoch, start=0):
        mine, b = self.indices_of(epoch), self.plan.batch_size
        chunks = (mine[i * b:(i + 1) * b].tolist() for i in range(start, len(self)))
        if self.num_threads == 0:
            yield from map(self.collate, chunks)
            return
        pool = ThreadPoolExecutor(self.num_threads, thread_name_prefix="robo-loaders-batch")
        pending = deque()
        try:
            for chunk in chunks:
                pending.append(pool.submit(self.collate, chunk))
                if len(pending) >= self.depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def in_process_compatible(data_loader) -> bool:
    """Whether a DataLoader's batches can be rebuilt in-process with the same result: a plain batch sampler, the
    default collate, no worker hooks (robomimic 0.3.0's and lerobot-train's DataLoaders always are)."""
    return (getattr(data_loader, "batch_sampler", None) is not None
            and data_loader.collate_fn is torch.utils.data.default_collate and data_loader.worker_init_fn is None)


def pass_batches(data_loader, plan_for: Callable[[Any], SamplingPlan]):
    """What one pass should iterate instead of ``data_loader``, by the declared kind of the backend that built its
    dataset. ``plan_for(data_loader)`` describes the native pass for a ``batch`` backend (framework-specific)."""
    dataset = getattr(data_loader, "dataset", None)
    spec = built_by(dataset)
    if spec is None or spec.kind == SAMPLE:
        return data_loader
    if spec.kind == INDEXED:
        if getattr(dataset, "world_size", 1) > 1:  # set by an adapter whose framework does not split passes
            if not dataset.batches_in_process:
                raise RoboLoadersError(f"{spec.name}: rank {dataset.rank} of {dataset.world_size}: batches must be "
                                       "built in the training process to split passes across processes (drop the "
                                       "backend's 'loader': 'dataloader' option)")
            return _source_for(data_loader, dataset, plan_for, rank_split=True)
        if dataset.batches_in_process and in_process_compatible(data_loader):
            threads = data_loader.num_workers if dataset.batch_threads is None else dataset.batch_threads
            return SamplerBatches(dataset.collate, data_loader.batch_sampler, data_loader.generator, threads,
                                  seed_once=bool(data_loader.num_workers and data_loader.persistent_workers))
        if dataset.batches_in_process:
            print(f"[robo-loaders] {spec.name}: this DataLoader has a custom collate_fn or worker_init_fn, so its "
                  "batches come from its worker processes, not from the backend's in-process path", flush=True)
        return data_loader
    return _source_for(data_loader, dataset, plan_for)


_SOURCES: "weakref.WeakKeyDictionary[Any, BatchSource]" = weakref.WeakKeyDictionary()


def _source_for(data_loader, dataset, plan_for, rank_split: bool = False) -> BatchSource:
    """One BatchSource per DataLoader, kept across passes: its position spans them. ``rank_split``: an ``indexed``
    backend's pass cut into this rank's share here (decided by the declared kind, not by the dataset's classes: a
    ``batch`` backend's dataset may also be indexable)."""
    source = _SOURCES.get(data_loader)
    if source is None:
        plan = plan_for(data_loader)
        if rank_split:
            threads = data_loader.num_workers if dataset.batch_threads is None else dataset.batch_threads
            source = RankBatches(dataset.collate, len(dataset), plan, plan.seed or 0, threads)
        else:
            source = dataset.batch_source(plan)
        _SOURCES[data_loader] = source
    return source


def batch_stream(data_loader, plan_for: Callable[[Any], SamplingPlan], native_cycle: Callable):
    """An endless stream of batches (LeRobot's ``cycle(dataloader)``) by the declared kind: a ``batch`` backend's
    passes one after another, an ``indexed`` backend's in-process batches over the sampler's passes, or
    ``native_cycle(data_loader)``."""
    source = pass_batches(data_loader, plan_for)
    if source is data_loader:
        yield from native_cycle(data_loader)
        return
    while True:
        n = 0
        for batch in source:
            n += 1
            yield batch
        if not n:
            raise RoboLoadersError("the data backend served an empty pass (no batch); check the dataset and "
                                   "batch size")
