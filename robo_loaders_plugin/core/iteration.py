"""The iteration contract: who drives a training pass, for every backend kind (see ``core.spec``).

Both framework adapters drive backends through this module only: robomimic's ``run_epoch`` patch and LeRobot's
``cycle`` patch call :func:`pass_batches` / :func:`batch_stream` with the DataLoader the framework built, and the
kind of the backend choice that built its dataset (recorded by :func:`record_built`) decides what runs:

- ``sample``: the framework's DataLoader, untouched.
- ``indexed``: :class:`SamplerBatches`: indices from exactly the framework's batch sampler, batches built by
  threads of the training process with the dataset's ``collate`` (same order, same RNG use as the DataLoader).
- ``batch``: the dataset's :class:`BatchSource`, built once per DataLoader from a :class:`SamplingPlan` that says,
  in framework-neutral terms, what the native loop would serve.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, cast

import numpy as np
import torch.utils.data

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.ranks import check_ranks_agree_at_first_pass, rank_share
from robo_loaders_plugin.core.spec import BATCH, INDEXED, SAMPLE, BackendChoice
from robo_loaders_plugin.core.threads import ordered_map
from robo_loaders_plugin.core.units import plural

logger = get_logger(__name__)

# BatchSource.state_dict() keys: the position of the next batch to serve
STATE_EPOCH = "epoch"
STATE_BATCH = "batch"
STATE_PASS = "pass"  # what decides a pass's order when the position was saved (BatchSource.pass_key)
# the pass to serve after the one at the position, recorded when it is not the next number: a pass served apart
# meanwhile (BatchSource.__iter__) is skipped, and a run resumed from the state skips it too
STATE_NEXT = "next_epoch"


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    """What the framework's native loop would serve, handed to a ``batch`` backend.

    Attributes:
        batch_size: Items per batch.
        drop_last: Whether a last, incomplete batch is dropped.
        shuffle: Whether the native sampler shuffles.
        seed: The framework's order seed when it has one (LeRobot's sampler seed, robomimic's ``train.seed`` in
            a multi-process run), else ``None`` and the backend uses its own option.
        num_workers: The loop's worker budget: in-process backends use it as threads.
        items: The dataset indices one pass covers, in the native sampler's unshuffled order (``None``: every
            index of the dataset).
        start_epoch: The pass a resumed run starts in (LeRobot's ``--resume``).
        start_batch: The batch of that pass it starts at.
        pin_memory: Whether batches go to pinned memory (CUDA training with ``pin_memory``).
        rank: This process's share of a multi-process run (one process: 0).
        world_size: Processes sharing each pass (one process: 1).
        worker_context: How the framework's DataLoader starts worker processes (its ``multiprocessing_context``:
            lerobot-train's ``spawn`` by default; ``None``: the platform's default, fork on Linux), for a backend
            that builds batches in worker processes as the framework would.
        prefetch_factor: Batches each of those workers prepares ahead (the DataLoader's; ``None``: torch's 2).
        worker_processes: The worker processes the framework's DataLoader itself would start (its ``num_workers``
            as the user set it, where ``num_workers`` is raised to a thread or more: LeRobot's); 0 asks for none,
            as a user debugging in one process does. ``None``: ``num_workers``.
        sampler_counts_passes: Whether the native sampler says which pass this is (LeRobot's ``EpisodeAwareSampler``
            holds its epoch, and a new one starts at pass 0, as LeRobot's own order does); ``False``: the backend
            counts passes over every DataLoader of the dataset, as a ``RandomSampler`` draws a new order for each.
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
    worker_context: Any = None
    prefetch_factor: int | None = None
    worker_processes: int | None = None
    sampler_counts_passes: bool = False


def pass_key(plan: SamplingPlan, **more: Any) -> dict[str, Any]:
    """What decides a pass's order in a :class:`BatchSource`: the plan's batch size, ``drop_last``, shuffle and
    world size, plus what the source adds (its seed, its items or a digest of them, its shuffle buffer).

    Args:
        plan: The native pass's plan.
        **more: The source's own (JSON values).

    Returns:
        The key, saved with the position (:meth:`BatchSource.state_dict`).
    """
    key = {
        "batch_size": int(plan.batch_size),
        "drop_last": bool(plan.drop_last),
        "shuffle": bool(plan.shuffle),
        # not the rank: every rank serves the same (epoch, batch) of its share (rank_share: equal batch counts), so
        # a state saved by rank 0 resumes every rank (a custom loop's one checkpoint); the world size cuts the shares
        "world_size": int(plan.world_size),
    }
    return {**key, **more}


def digest(values) -> str:
    """A short digest of an array of integers or floats (the pass's items, sizes or weights) for :func:`pass_key`.

    Args:
        values: An array-like.

    Returns:
        16 hex digits.
    """
    import hashlib

    a = np.ascontiguousarray(np.asarray(values))
    return hashlib.sha256(a.dtype.str.encode() + a.tobytes()).hexdigest()[:16]


class BatchSource(abc.ABC):
    """Collated batches, one backend-ordered pass after another.

    The position is (epoch, batch): ``iter()`` serves the next pass (or the one :meth:`load_state_dict`
    positioned, from its batch on), and :meth:`state_dict` is always the position of the next batch, so a stopped
    run resumes on the same next batch. A pass abandoned part-way (robomimic's ``epoch_every_n_steps``) is not
    resumed by the next ``iter()``: like a DataLoader, that starts a new pass.

    Every ``iter()`` is a complete pass, as a DataLoader's is, even while another pass of the same source is still
    being served (an iterator neither exhausted, closed nor collected: two iterators interleaved, a peek at one
    batch in the middle of a pass): that pass is served by :meth:`batches_apart`, without moving the running
    pass's position. Why: a source whose passes share machinery (one pipeline) would restart it for the second
    iterator, and each of two interleaved iterators would then serve some windows twice and others never.
    """

    def __init__(self, start_epoch: int = 0, start_batch: int = 0):
        self._epoch, self._batch, self._positioned = int(start_epoch), int(start_batch), True
        self._running = False  # whether a pass started by iter() is being served
        self._moves = 0  # passes started and positions loaded: a failed pass goes on only while nothing moved
        self._stopped = False  # the running pass stopped at a failed batch, its iterator kept: its position stands
        self._said_apart = False
        self._apart = -1  # the last pass number served apart: the running pass's successor skips past it
        # the next pass of every DataLoader over the same dataset, shared with their sources (_source_for); None: own
        self._passes: list[int] | None = None
        # what decides a pass's order (batch size, seed, items, world size ...), saved with the position and compared
        # when a position is loaded: a (pass, batch) of another order is other windows (set by subclasses; {}: none)
        self.pass_key: dict[str, Any] = {}

    @abc.abstractmethod
    def __len__(self) -> int:
        """Batches per pass (for this rank)."""

    @abc.abstractmethod
    def batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """One pass; a pure function of (epoch, start) and the backend's seed, so a resumed run continues it.

        Args:
            epoch: The pass number.
            start: The first batch to serve.

        Yields:
            Collated batches, from batch ``start`` to the end of the pass.
        """

    def batches_apart(self, epoch: int) -> Iterator[Any]:
        """A whole pass served while another pass of this source is being served, sharing nothing with it.

        The default is :meth:`batches`, for a source whose passes share no state (each call its own threads); a
        source whose :meth:`batches` drives machinery every pass shares (one pipeline) overrides this.

        Args:
            epoch: The pass number.

        Yields:
            Collated batches of the whole pass, in order.
        """
        return self.batches(epoch, 0)

    def _served(self, epoch: int) -> None:
        """Record that pass ``epoch`` is being served, for the next DataLoader over the same dataset."""
        cell = self._passes
        if cell is not None and cell[0] <= epoch:
            cell[0] = epoch + 1

    def __iter__(self) -> Iterator[Any]:
        """The next pass (or the one :meth:`load_state_dict` positioned), or a pass apart while one is being served.

        Returns:
            Its iterator (:class:`_Pass`): after a batch that failed, the next call serves the batch after it, as a
            DataLoader's iterator does.
        """
        return _Pass(self)

    def describe(self) -> str:
        """One line for the training log: what serves the batches, and from where a resumed run starts."""
        return (
            f"{type(self).__name__} ({len(self)} batches per pass, starting at epoch {self._epoch} batch {self._batch})"
        )

    def state_dict(self) -> dict:
        """The position of the next batch to serve: ``{"epoch": ..., "batch": ...}``, plus ``"next_epoch"`` when the
        pass after it is not the next number (a pass was served apart meanwhile: the saved run would skip it).

        A pass abandoned part-way (its iterator dropped or closed: robomimic's ``epoch_every_n_steps`` ends each of
        its epochs so) is over: the next ``iter()`` starts the pass after it, so that is the position (it was the
        abandoned pass's next batch, and a run resumed from a checkpoint saved after such an epoch served the rest of
        the old pass where the run it resumes served a new one: a reviewer's reproduction)."""
        # a pass stopped by a failed batch is not abandoned while its iterator is kept: the next next() serves the
        # batch after the failed one, so that is the position (a reviewer's reproduction: a checkpoint saved at the
        # error said the next pass, and the resumed run never served the rest of this one)
        abandoned = not self._running and not self._stopped and not self._positioned and self._batch > 0
        if self._batch >= len(self) or abandoned:
            position = {STATE_EPOCH: max(self._epoch + 1, self._apart + 1), STATE_BATCH: 0}
        else:
            position = {STATE_EPOCH: self._epoch, STATE_BATCH: self._batch}
        if self._apart >= position[STATE_EPOCH] + 1:  # a later pass was served apart: the one after this is past it
            position[STATE_NEXT] = self._apart + 1
        return {**position, STATE_PASS: dict(self.pass_key)} if self.pass_key else position

    def load_state_dict(self, state: dict) -> None:
        """Position the source so that the next ``iter()`` starts at ``state`` (from :meth:`state_dict`), and the
        pass after it is the one the saved run would have served next (past a pass served apart before the save).

        Why the pass is compared: a pass's order is a function of the batch size, the seed, the items and the
        world size, so the same (epoch, batch) of a run resumed with another of them is other windows: some served twice
        in that pass, others never, without a word (a reviewer's reproduction: batch size 16 -> 32, 80 of 546
        windows never served). A state saved before the pass was recorded is loaded unchecked, said once.

        Args:
            state: ``{"epoch": ..., "batch": ..., "pass": {...}}`` (``"pass"`` absent in states of earlier versions),
                with ``"next_epoch"`` when a pass was served apart past the position's.

        Raises:
            RoboLoadersError: the position is out of range (a negative epoch, a batch outside ``0..len(self)``), or
                the state is of a pass ordered otherwise than this run's (the first difference named).
        """
        try:
            epoch, batch = int(state[STATE_EPOCH]), int(state[STATE_BATCH])
            after = int(state.get(STATE_NEXT, epoch + 1))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RoboLoadersError(
                f"{type(self).__name__}.load_state_dict: expected the state_dict() of a run, "
                f"{{'epoch': int, 'batch': int, ...}}, got {state!r}"
            ) from exc
        if epoch < 0 or not 0 <= batch <= len(self) or after <= epoch:
            raise RoboLoadersError(
                f"{type(self).__name__}.load_state_dict: epoch {epoch} batch {batch} is no position of this run "
                f"(epoch >= 0, batch 0..{len(self)}: {len(self)} batches per pass); pass the state_dict() it saved"
            )
        saved = state.get(STATE_PASS)
        if saved is None and self.pass_key:
            logger.warning(
                f"{type(self).__name__}: resuming at epoch {epoch} batch {batch} from a state that does not record "
                "its pass (an earlier robo-loaders): not checked against this run's batch size, seed and items"
            )
        elif saved is not None and dict(saved) != self.pass_key:
            what = next(k for k in sorted(set(saved) | set(self.pass_key)) if saved.get(k) != self.pass_key.get(k))
            raise RoboLoadersError(
                f"{type(self).__name__}: cannot resume at epoch {epoch} batch {batch}: the state was saved by a run "
                f"whose pass had {what} {saved.get(what)!r}, this run's has {self.pass_key.get(what)!r} (the same "
                f"position would serve other windows); resume with the run's {what}, or start without its state"
            )
        self._epoch, self._batch, self._positioned = epoch, batch, True
        self._apart = after - 1  # the pass after this one: past any served apart before the state was saved
        self._moves += 1  # a pass stopped by a failed batch cannot go on from here (_Pass)
        self._stopped = False


@dataclasses.dataclass(frozen=True)
class Serving:
    """What the framework adapters need from a built ``indexed`` or ``batch`` dataset, declared by its factory when
    it constructs the dataset (never set afterwards).

    Attributes:
        summary: The line the adapter logs once the dataset is built (what is served, from where, at what cost).
        batch_threads: ``indexed`` kind: threads building batches in the training process (``None``: the
            DataLoader's ``num_workers``; ``0``: the training thread itself, e.g. for GPU-resident data whose
            gathers the training thread queues on the device).
        hold: Keeps the dataset's storage alive and in use while the dataset lives (a cache entry's use lock, a
            RAM file); ``None`` when there is nothing to hold.
        reused: Whether the dataset's store was found from an earlier run (``False``: built by this one); ``None``
            for a dataset that keeps no store between runs. A mixture counts them in its log.
    """

    summary: str = ""
    batch_threads: int | None = None
    hold: Any = None
    reused: bool | None = None


class ServedDataset(torch.utils.data.Dataset):
    """Base of the datasets a backend's factory returns for the ``indexed`` and ``batch`` kinds: a map-style
    dataset the framework sees (``len()``, ``print()``, a DataLoader over it) with its :class:`Serving`.

    Attributes:
        serving: What the adapters log and hold.
        buffer_pool: The recycled batch arrays (a ``storage.buffers.BufferPool``), or ``None`` when the dataset
            keeps none: the one name every dataset keeps them under, so that :meth:`close` releases them.
    """

    def __init__(self, *, serving: Serving, **kwargs):
        super().__init__(**kwargs)
        self.serving = serving
        self.buffer_pool: Any = None
        self._closed = False

    def close(self) -> None:
        """Release what the dataset holds now rather than at garbage collection: its frame source's files, maps,
        memory and spill files (``frames.close()``), its storage hold (the cache entry it uses may then be pruned, a
        RAM file removed) and its recycled batch arrays. Idempotent; a read afterwards fails with one line naming
        what was closed. Batch threads belong to a pass (a ``BatchSource``) and stop with it.
        """
        if self._closed:
            return
        self._closed = True
        closed = getattr(getattr(self, "frames", None), "closed", None)
        if callable(closed):  # a FrameSource (frames.base): closed, and every read after refused
            self.frames = closed(str(getattr(self, "location", None) or type(self).__name__))
        holds = self.serving.hold if isinstance(self.serving.hold, (list, tuple)) else [self.serving.hold]
        for hold in holds:
            if hold is not None and callable(getattr(hold, "release", None)):
                hold.release()
        release = getattr(self.buffer_pool, "release", None)
        if callable(release):  # the recycled batch arrays go with it
            release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class IndexedDataset(ServedDataset, abc.ABC):
    """A map-style dataset that also builds whole collated batches (``indexed`` kind): the adapter draws indices
    from the framework's own sampler and calls :meth:`collate` from ``serving.batch_threads`` threads."""

    @abc.abstractmethod
    def collate(self, indices) -> dict:
        """The collated batch the framework's DataLoader would build from ``[self[i] for i in indices]``.

        Args:
            indices: Dataset indices, in batch order.

        Returns:
            The batch, as the framework's ``default_collate`` would build it.
        """


class BatchDataset(ServedDataset, abc.ABC):
    """A dataset whose training passes the backend orders itself (``batch`` kind). Frameworks still see a dataset
    (robomimic calls ``len()`` and ``print()`` and builds a DataLoader over it); the adapter then asks it for a
    :class:`BatchSource` instead of iterating that DataLoader."""

    @abc.abstractmethod
    def batch_source(self, plan: SamplingPlan) -> BatchSource:
        """A source serving the passes ``plan`` describes (called once per DataLoader).

        Args:
            plan: What the native loop would serve (batch size, items, seed, resume position, rank).

        Returns:
            The :class:`BatchSource` the adapter iterates instead of the DataLoader.
        """

    def __getitem__(self, index):
        raise TypeError(
            f"{type(self).__name__} yields whole batches, not single samples; it must be driven by a "
            "robo-loaders framework adapter (is the plugin's robomimic/LeRobot patch disabled? "
            "ROBO_LOADERS_DISABLE is set or the import hook did not run)"
        )

    def get_dataset_sampler(self):
        """robomimic asks its dataset for a sampler; the backend orders passes itself: none."""
        return None


@dataclasses.dataclass(frozen=True)
class Built:
    """How a dataset was built: the resolved backend choice and, for a framework that does not split passes across
    processes itself (robomimic), this process's rank, the world size and the order seed every rank shares.

    Attributes:
        choice: The backend choice (its ``kind`` decides who drives passes).
        rank: This process's rank (0 in a one-process run).
        world_size: Processes sharing each pass (1: this one alone, or the framework splits passes itself).
        seed: The order seed every rank shares, when the adapter knows it (robomimic's ``train.seed``).
        setup: ``{name: value}`` every rank must share (the seed, the options, the source's identity), checked at
            the first pass of a dataset split across ranks here (:func:`pass_batches`); empty in a one-process run.
        served_as: The kind that drives its passes when it is not the choice's (a mixture of any backend's datasets
            is a ``batch`` dataset); ``None``: the choice's.
    """

    choice: BackendChoice
    rank: int = 0
    world_size: int = 1
    seed: int | None = None
    setup: dict = dataclasses.field(default_factory=dict)
    served_as: str | None = None

    @property
    def kind(self) -> str:
        """Who drives the dataset's passes (``served_as``, else the choice's kind)."""
        return self.served_as or self.choice.kind


_KIND_BASES = {INDEXED: IndexedDataset, BATCH: BatchDataset}
_BUILT: weakref.WeakKeyDictionary[Any, Built] = weakref.WeakKeyDictionary()


def record_built(
    dataset,
    choice: BackendChoice,
    rank: int = 0,
    world_size: int = 1,
    seed: int | None = None,
    setup: dict | None = None,
    served_as: str | None = None,
) -> Built:
    """Remember how ``dataset`` was built, for the adapters' dispatch (:func:`pass_batches`).

    Args:
        dataset: What the backend's factory returned.
        choice: The resolved backend choice that built it.
        rank: This process's rank, when the adapter splits passes across processes itself.
        world_size: The number of such processes.
        seed: The order seed they share.
        setup: ``{name: value}`` the ranks must share, checked at the first pass when ``world_size`` > 1
            (named as the user sets them: robomimic's ``train.seed``, ``train.data_backend_kwargs``, ...).
        served_as: The kind that drives its passes when it is not the choice's (``BATCH`` for a mixture).

    Returns:
        The :class:`Built` record.

    Raises:
        RoboLoadersError: the dataset is not of the base class the choice's kind requires (a sample dataset: not
            indexed and sized), naming the backend.
    """
    kind = served_as or choice.kind
    base = _KIND_BASES.get(kind)
    if base is not None and not isinstance(dataset, base):
        raise RoboLoadersError(
            f"backend {choice.name!r} (plugin {choice.spec.plugin!r}) declares kind {kind!r} "
            f"but its factory returned a {type(dataset).__name__}, not a {base.__name__}"
        )
    if base is None and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        # a sample dataset is indexed and sized by the framework's DataLoader; anything else (None) failed later
        # as a bare TypeError naming no backend (a reviewer's reproduction)
        raise RoboLoadersError(
            f"backend {choice.name!r} (plugin {choice.spec.plugin!r}) declares kind {kind!r} "
            f"but its factory returned a {type(dataset).__name__}, not a map-style dataset (__getitem__ and __len__)"
        )
    built = Built(choice, int(rank), int(world_size), seed, dict(setup or {}), served_as)
    with contextlib.suppress(TypeError):  # not weak-referenceable: treated as a plain sample dataset
        _BUILT[dataset] = built
    return built


def built_by(dataset) -> Built | None:
    """How a dataset was built.

    Args:
        dataset: Any dataset.

    Returns:
        Its :class:`Built` record (``None``: not built by a backend, e.g. robomimic's own).
    """
    try:
        return _BUILT.get(dataset)
    except TypeError:
        return None


def summary_of(dataset) -> str:
    """The line to log about a built dataset.

    Args:
        dataset: Any dataset.

    Returns:
        The summary its backend declared (``Serving.summary``), or its length for a plain sample dataset.
    """
    if isinstance(dataset, ServedDataset) and dataset.serving.summary:
        return dataset.serving.summary
    return f"{len(dataset)} samples"


class _Pass:
    """One ``iter()`` of a :class:`BatchSource`: its position kept in the source (:meth:`BatchSource.state_dict`),
    started at the first ``next()``, ended when exhausted, closed or collected.

    Why an iterator, not a generator: a generator is finished once it raises, so a loop that skips a failed batch
    (``except RuntimeError: continue``) saw the pass end there, without a word, where a DataLoader's iterator serves
    the rest of the pass (a reviewer's reproduction: 80 of 546 windows served). Here the failed batch is lost, as a
    DataLoader loses it, and the next call serves the pass from the batch after it (``batches(epoch, start)`` is a
    pure function of its arguments). Until that call the pass is stopped, as before: an ``iter()`` or a loaded
    position meanwhile starts where a stopped pass would, and the stopped one then says so at its next call instead
    of serving beside it; so does a pass served apart (:meth:`BatchSource.batches_apart` cannot start mid-way).
    """

    def __init__(self, source: BatchSource):
        self._source = source
        self._batches: Iterator[Any] | None = None
        self._started = self._done = self._apart = self._broken = False
        self._stopped = False  # by a failed batch: the source no longer serves it until the next call
        self._epoch = self._next = 0  # the pass, and its next batch
        self._moves = -1  # the source's moves when this pass started

    def __iter__(self) -> _Pass:
        return self

    def _start(self) -> None:
        src = self._source
        self._started = True
        if src._running:  # another pass is being served: this one apart, its position untouched
            epoch = src._epoch + 1  # the pass after the running one: two interleaved passes differ in order
            if not src._said_apart:
                src._said_apart = True
                logger.info(
                    f"{type(src).__name__}: iter() was called while pass {src._epoch} is still being served (an "
                    f"iterator neither exhausted nor dropped): the new iterator serves pass {epoch} whole, apart from "
                    "the running pass, which keeps its position (said once)"
                )
            src._apart = max(src._apart, epoch)
            src._served(epoch)
            self._apart, self._epoch = True, epoch
            self._batches = iter(src.batches_apart(epoch))
            return
        if src._positioned:
            epoch, start = src._epoch, src._batch
        else:
            epoch, start = max(src._epoch + (1 if src._batch else 0), src._apart + 1), 0
        src._positioned = False
        src._epoch, src._batch = epoch, start
        src._served(epoch)
        src._running, src._stopped = True, False
        src._moves += 1
        self._epoch, self._next, self._moves = epoch, start, src._moves

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if not self._started:
            self._start()
        src = self._source
        if self._stopped:  # by a failed batch: it goes on unless another pass started or a position was loaded
            self._stopped = False
            if src._running or src._moves != self._moves:
                self._broken = True
            else:
                src._running, src._stopped = True, False
        if self._broken:
            self._finish(exhausted=False)
            where = "served apart from the running pass" if self._apart else "replaced by another pass or position"
            raise RoboLoadersError(
                f"{type(src).__name__}: pass {self._epoch} ({where}) stopped at its batch {self._next} with the "
                "error raised before; call iter() for a new pass"
            )
        if self._batches is None:
            self._batches = iter(src.batches(self._epoch, self._next))
        try:
            batch = next(self._batches)
        except StopIteration:
            self._finish(exhausted=True)
            raise
        except BaseException as exc:
            self._batches = None  # finished by the raise
            if self._apart:
                self._broken = True
            else:
                if isinstance(exc, Exception):  # the batch is lost, as a DataLoader loses it; an interrupt's is not
                    self._next += 1
                    src._batch = self._next
                if self._next >= len(src):
                    self._finish(exhausted=True)
                else:  # stopped: the next call goes on, unless another pass starts first
                    self._stopped, src._running, src._stopped = True, False, True
            raise
        self._next += 1
        if not self._apart:
            src._batch = self._next
        return batch

    def _finish(self, exhausted: bool) -> None:
        if self._done:
            return
        self._done = True
        batches, self._batches = self._batches, None
        close = getattr(batches, "close", None)
        if close is not None:
            close()
        if self._stopped and self._moves == self._source._moves:  # dropped while stopped: now abandoned
            self._source._stopped = False
        if not self._started or self._apart or self._stopped or self._broken:  # the source is not serving it
            return
        src = self._source
        if exhausted:  # past a pass served apart meanwhile: the next epoch repeated its order (a reviewer's find)
            src._epoch, src._batch, src._positioned = max(self._epoch + 1, src._apart + 1), 0, True
        # exhausted, closed, or collected once dropped (robomimic's epoch_every_n_steps drops its iterator
        # part-way): no longer being served, so the next pass is the running one again
        src._running = False

    def close(self) -> None:
        """End the pass here (a DataLoader iterator dropped part-way): the next ``iter()`` starts the next pass."""
        self._finish(exhausted=False)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._finish(exhausted=False)


class _BatchSampler(Protocol):
    """What a DataLoader's ``batch_sampler`` offers: batches of indices, and how many."""

    def __iter__(self) -> Iterator[list[int]]: ...

    def __len__(self) -> int: ...


class SamplerBatches:
    """Collated batches built by threads of the training process, in the order a DataLoader would yield them.

    Why: a dataset inside torch's DataLoader pays for a worker process per ``num_workers`` (hundreds of MB each), a
    collate copy of every batch and a trip through shared memory. A backend that decompresses with the GIL
    released can instead build the same batches in threads, straight into the arrays that become the batch
    tensors. The DataLoader's own batch sampler supplies the indices and its generator is advanced exactly as
    ``DataLoader.__iter__`` advances it, so the sample order and the global RNG stream (hence the training losses)
    are the same as with the DataLoader. ``index_batches``, when given, computes those batches of indices faster
    than iterating the batch sampler (the adapter's, for a sampler it knows; it answers ``None`` for any other).
    """

    def __init__(
        self,
        collate: Callable[[list], dict],
        batch_sampler: _BatchSampler,
        generator=None,
        num_threads: int = 0,
        prefetch_per_thread: int = 2,
        seed_once: bool = False,
        index_batches: Callable[[Any], Iterable[list] | None] | None = None,
    ):
        self.collate = collate
        self.index_batches = index_batches
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.num_threads = int(num_threads)
        self.depth = max(1, self.num_threads * prefetch_per_thread)
        self.seed_once, self._seeded = bool(seed_once), False  # persistent workers: one draw for the run

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[dict]:
        """The pass: the DataLoader's base seed drawn now, as ``DataLoader.__iter__`` draws it, and its batches.

        Returns:
            The batches' iterator (:func:`~robo_loaders_plugin.core.threads.ordered_map`'s: after a batch that
            failed, the next call serves the one after it, as a DataLoader's iterator does).
        """
        from robo_loaders_plugin.core.torch_compat import draw_dataloader_base_seed

        if not (self.seed_once and self._seeded):
            draw_dataloader_base_seed(self.generator)
            self._seeded = True
        return ordered_map(self.collate, self._index_lists(), self.num_threads, self.depth)

    def _index_lists(self) -> Iterator[list]:
        """The pass's batches of indices, drawn at the first batch as a DataLoader draws its sampler's."""
        batches = self.index_batches(self.batch_sampler) if self.index_batches is not None else None
        if batches is None:
            batches = (list(indices) for indices in self.batch_sampler)
        yield from batches


class RankBatches(BatchSource):
    """An ``indexed`` backend's share of each pass when the framework's loader does not split passes across
    processes itself (robomimic 0.3.0 has no multi-GPU training; a custom loop runs one process per GPU).

    The pass is a permutation of every index drawn from (seed, pass), the same on every rank, cut by
    :func:`~robo_loaders_plugin.core.ranks.rank_share`: disjoint shares, the same batch count on every rank. Under
    LeRobot this is not used: accelerate already hands each rank a split batch sampler."""

    def __init__(
        self,
        collate: Callable[[list], dict],
        num_items: int,
        plan: SamplingPlan,
        seed: int,
        num_threads: int = 0,
        prefetch_per_thread: int = 2,
    ):
        super().__init__(plan.start_epoch, plan.start_batch)
        self.collate, self.num_items, self.plan, self.seed = collate, int(num_items), plan, int(seed)
        self.pass_key = pass_key(plan, seed=self.seed, items=self.num_items)
        share = len(rank_share(self.num_items, plan.rank, plan.world_size))
        self._len = share // plan.batch_size if plan.drop_last else -(-share // plan.batch_size)
        self.num_threads, self.depth = int(num_threads), max(1, int(num_threads) * prefetch_per_thread)

    def __len__(self) -> int:
        return self._len

    def describe(self) -> str:
        """One line for the training log: this rank's share, threads and start position."""
        return (
            f"rank {self.plan.rank} of {self.plan.world_size}'s share of each pass ({len(self)} batches, "
            f"{plural(self.num_threads, 'thread')}, starting at epoch {self._epoch} batch {self._batch})"
        )

    def indices_of(self, epoch: int) -> np.ndarray:
        """This rank's indices of a pass, in serving order.

        Args:
            epoch: The pass number.

        Returns:
            The dataset indices this rank serves in that pass.
        """
        order = (
            np.random.default_rng([self.seed, int(epoch)]).permutation(self.num_items)
            if self.plan.shuffle
            else np.arange(self.num_items)
        )
        return order[rank_share(self.num_items, self.plan.rank, self.plan.world_size)]

    def batches(self, epoch, start=0):
        """This rank's batches of a pass, built by threads, in order.

        Args:
            epoch: The pass number.
            start: The first batch to serve.
        """
        mine, b = self.indices_of(epoch), self.plan.batch_size
        chunks = (mine[i * b : (i + 1) * b].tolist() for i in range(start, len(self)))
        yield from ordered_map(self.collate, chunks, self.num_threads, self.depth)


def _custom_functions(data_loader) -> bool:
    """Whether a DataLoader applies a function of the user's to its batches or workers, which a backend's own
    batches would leave out."""
    return data_loader.collate_fn is not torch.utils.data.default_collate or data_loader.worker_init_fn is not None


def in_process_compatible(data_loader) -> bool:
    """Whether a DataLoader's batches can be rebuilt in-process with the same result: a plain batch sampler, the
    default collate, no worker hooks (robomimic 0.3.0's and lerobot-train's DataLoaders always are).

    Args:
        data_loader: The DataLoader the framework built.

    Returns:
        ``True`` where the backend may serve the DataLoader's batches itself.
    """
    return getattr(data_loader, "batch_sampler", None) is not None and not _custom_functions(data_loader)


def pass_batches(
    data_loader,
    plan_for: Callable[[Any, Built], SamplingPlan],
    index_batches: Callable[[Any], Iterable[list] | None] | None = None,
):
    """What one pass should iterate instead of ``data_loader``, by the kind of the backend choice that built its
    dataset.

    Args:
        data_loader: The DataLoader the framework built.
        plan_for: ``plan_for(data_loader, built)`` describes the native pass (framework-specific), for a ``batch``
            backend, or an ``indexed`` one whose passes this process shares with others.
        index_batches: ``index_batches(batch_sampler)``: the framework's faster equivalent of iterating its batch
            sampler, or ``None`` where it has none (``indexed`` backends in one process; see :class:`SamplerBatches`).

    Returns:
        ``data_loader`` itself (``sample`` kind, or a DataLoader whose batches cannot be rebuilt in-process), a
        :class:`SamplerBatches` (``indexed``), or the dataset's :class:`BatchSource` (``batch``).

    Raises:
        RoboLoadersError: at the first pass of a dataset split across ranks here, the ranks disagree or cannot be
            checked (:func:`check_first_pass`), or the DataLoader has a custom ``collate_fn`` or ``worker_init_fn``.
    """
    dataset = getattr(data_loader, "dataset", None)
    built = built_by(dataset)
    if built is None or built.kind == SAMPLE:
        return data_loader
    if _custom_functions(data_loader):
        if built.world_size > 1:
            # served by the DataLoader, every rank would take the whole pass (its sampler knows no rank); served by
            # the backend's share, the function was dropped without a word (a reviewer's reproductions)
            raise RoboLoadersError(
                f"{built.choice.name}: this DataLoader has a custom collate_fn or worker_init_fn, and its pass is "
                f"split across {built.world_size} processes by the backend, whose own batches leave the function "
                "out; build the DataLoader without it and apply it to each batch in your loop"
            )
        # the backend's own batches would leave the user's function (a normalisation, an augmentation) out: the
        # DataLoader serves them, item by item in its worker processes, with the function applied
        logger.info(
            f"{built.choice.name}: this DataLoader has a custom collate_fn or worker_init_fn, which the backend's "
            "own batches would leave out: its batches come from the DataLoader, item by item (slower; apply the "
            "function to each batch in your loop to keep the backend's speed)"
        )
        return data_loader
    if built.kind == INDEXED:
        if built.world_size > 1:  # the framework does not split passes: this rank's share, cut here
            return _source_for(data_loader, built, plan_for, rank_split=True)
        if not in_process_compatible(data_loader):  # no batch sampler (batch_size=None): items, as the DataLoader
            return data_loader
        indexed = cast(IndexedDataset, dataset)  # record_built checked an indexed backend's dataset type
        kept = _SAMPLER_BATCHES.get(data_loader)
        if kept is not None and kept.collate == indexed.collate:
            return kept  # its persistent workers' one draw of the base seed is made already
        batches = SamplerBatches(
            indexed.collate,
            data_loader.batch_sampler,
            data_loader.generator,
            _batch_threads(indexed, data_loader),
            seed_once=bool(data_loader.num_workers and data_loader.persistent_workers),
            index_batches=index_batches,
        )
        if batches.seed_once:
            _SAMPLER_BATCHES[data_loader] = batches
        return batches
    return _source_for(data_loader, built, plan_for)


def _batch_threads(dataset: IndexedDataset, data_loader) -> int:
    threads = dataset.serving.batch_threads
    return data_loader.num_workers if threads is None else threads


_SOURCES: weakref.WeakKeyDictionary[Any, BatchSource] = weakref.WeakKeyDictionary()
# One SamplerBatches per DataLoader of persistent workers, kept across passes: such a DataLoader draws its base seed
# once for the run, and robomimic asks for each epoch's batches anew (run_epoch: pass_batches once per epoch), so a
# new SamplerBatches drew it again at every epoch, the order and the global RNG leaving the DataLoader's from the
# second epoch on (a reviewer's reproduction)
_SAMPLER_BATCHES: weakref.WeakKeyDictionary[Any, SamplerBatches] = weakref.WeakKeyDictionary()


# Each dataset's next pass, over every DataLoader built on it: a cell (a list of one int) the dataset's sources share,
# holding no reference to the dataset (a value referring to its weak key would keep it alive)
_PASSES: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()


def _source_for(data_loader, built: Built, plan_for, rank_split: bool = False) -> BatchSource:
    """One BatchSource per DataLoader, kept across passes: its position spans them. ``rank_split``: an ``indexed``
    backend's pass cut into this rank's share here (decided by the choice's kind, not by the dataset's classes: a
    ``batch`` backend's dataset may also be indexable). A pass split across ranks here is checked first
    (:func:`check_first_pass`).

    A new DataLoader over a dataset another DataLoader served passes of starts at the pass after theirs: a loop that
    builds its DataLoader each epoch started every epoch at pass 0, the same order each time, and with ``drop_last``
    the same windows were never served (a reviewer's reproduction)."""
    source = _SOURCES.get(data_loader)
    if source is None:
        dataset = data_loader.dataset
        plan = plan_for(data_loader, built)
        if built.world_size > 1:  # split across ranks here (LeRobot's ranks are checked at cycle())
            check_first_pass(built, plan)
        if rank_split:
            source = RankBatches(
                dataset.collate, len(dataset), plan, plan.seed or 0, _batch_threads(dataset, data_loader)
            )
        else:
            source = dataset.batch_source(plan)
        if not plan.sampler_counts_passes:
            cell = _PASSES.setdefault(dataset, [0])
            if (source._epoch, source._batch) == (0, 0):  # a resumed position (the plan's start) is kept as given
                source._epoch = cell[0]
            source._passes = cell
        _SOURCES[data_loader] = source
    return source


def check_first_pass(built: Built, plan: SamplingPlan) -> None:
    """Before the first pass of a DataLoader whose passes are split across ranks here: every rank shares the
    dataset's setup and the pass's order inputs, checked with the process group (one collective, at the same point
    on every rank: the first pass of each DataLoader, robomimic's ``run_epoch``).

    Why here and not only when the dataset is built: a custom loop may build it before the process group exists
    (from ``RANK``/``WORLD_SIZE``), and the DataLoader's batch size, shuffle and drop_last exist only now; ranks
    that differ on any of them cut different orders or serve different batch counts.

    Args:
        built: How the dataset was built (its ``setup``, rank and world size).
        plan: The pass about to be served.

    Raises:
        RoboLoadersError: the ranks disagree, or no process group is initialised to check them.
    """
    values = dict(built.setup)
    values.update(
        {
            "the DataLoader's batch_size": plan.batch_size,
            "the DataLoader's drop_last": plan.drop_last,
            "the DataLoader's shuffle": plan.shuffle,
            "the order seed": plan.seed,
        }
    )
    check_ranks_agree_at_first_pass(
        values, f"{built.choice.framework} data backend {built.choice.name}", built.rank, built.world_size
    )


def batch_stream(data_loader, source, native_cycle: Callable):
    """An endless stream of batches (LeRobot's ``cycle(dataloader)``) by the choice's kind: a ``batch`` backend's
    passes one after another, an ``indexed`` backend's in-process batches over the sampler's passes, or
    ``native_cycle(data_loader)``.

    Args:
        data_loader: The DataLoader the framework built.
        source: What one pass iterates, :func:`pass_batches`' answer for ``data_loader`` (asked once by the
            caller, which also logs it).
        native_cycle: The framework's own cycle, for datasets no backend built.

    Yields:
        Batches, forever.

    Raises:
        RoboLoadersError: the backend served an empty pass.
    """
    if source is data_loader:
        yield from native_cycle(data_loader)
        return
    while True:
        n = 0
        for batch in source:
            n += 1
            yield batch
        if not n:
            raise RoboLoadersError("the data backend served an empty pass (no batch); check the dataset and batch size")
