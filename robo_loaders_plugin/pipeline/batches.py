"""The pipeline's BatchSource: plan -> parallel assembly threads -> prefetch [-> pinned memory] -> batches.

Framework-neutral: it is given the items of a pass grouped by episode and a ``collate(indices)`` that builds a
batch in the framework's layout; both adapters use it. Threads (not processes): assembly decompresses with the GIL
released and the batch stays in the training process, so nothing is copied through shared memory.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import threading
import weakref
from collections.abc import Callable

import numpy as np
import torch
from torchdata.nodes import ParallelMapper, Prefetcher

from robo_loaders_plugin.core.iteration import BatchDataset, BatchSource, SamplingPlan, digest, pass_key
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.torch_compat import release_node_iterators, shutdown_node_threads
from robo_loaders_plugin.core.units import plural
from robo_loaders_plugin.pipeline.options import PassOptions
from robo_loaders_plugin.pipeline.plan import BatchPlanNode, ItemGroups

logger = get_logger(__name__)

_LIVE: weakref.WeakSet[PipelineBatches] = weakref.WeakSet()


def _entry_order(plan: np.ndarray) -> np.ndarray:
    """Episodes of a plan by the position they enter it."""
    eps, first = np.unique(plan[:, 0], return_index=True)
    return eps[np.argsort(first)]


AHEAD_PER_THREAD = 4  # episodes loaded ahead per decoding thread, at least (with a shuffle buffer's worth)


def decode_room(capacity: int, shuffle_buffer: int, threads: int, entering: int = 0) -> int:
    """How many episodes :class:`DecodeAhead` loads in front of the pass: the room the episode cache has beyond the
    shuffle buffer and the episodes entering it while the batches in flight are assembled, but no more than a
    shuffle buffer's worth (or :data:`AHEAD_PER_THREAD` per thread).

    Why the cap: a buffer sized in bytes holds thousands of small episodes, and loading thousands ahead only
    delays the one the shuffle buffer waits for, the planning thread starved of the CPU (measured at 1M steps:
    docs/benchmarks.md, *Measurements behind the code*). Why ``entering`` counts: episodes loaded ahead are evicted
    last, so room taken from the episodes in use evicts *them*, and they are loaded again (docs/scale.md).

    Args:
        capacity: Episodes the cache holds.
        shuffle_buffer: Episodes open at once.
        threads: Decoding threads.
        entering: Episodes that enter the shuffle buffer within the batches assembled at once
            (:func:`entering_at_once`).

    Returns:
        Episodes to load ahead; 0 when the cache has no room beyond those in use (nothing is loaded ahead).
    """
    return max(0, min(capacity - shuffle_buffer - entering - 1, max(shuffle_buffer, AHEAD_PER_THREAD * threads)))


def episodes_done_by_batch(plan: np.ndarray, batch_size: int) -> dict[int, list[int]]:
    """``{batch: episodes whose last item of the pass is in it}`` (batches counted from the plan's first).

    Args:
        plan: (N, 2) (episode, k) pairs in serving order.
        batch_size: Items per batch.

    Returns:
        The episodes each batch finishes (batches finishing none are absent).
    """
    eps = np.asarray(plan)[:, 0] if len(plan) else np.zeros(0, np.int64)
    uniq, from_end = np.unique(eps[::-1], return_index=True)
    last_batch = (len(eps) - 1 - from_end) // max(1, int(batch_size))
    order = np.argsort(last_batch, kind="stable")
    batches, cuts = np.unique(last_batch[order], return_index=True)
    return {int(b): g.tolist() for b, g in zip(batches, np.split(uniq[order], cuts[1:]))}


def entering_at_once(plan: np.ndarray, batch_size: int, window: int) -> int:
    """The most episodes that enter a pass (are first served) within any ``window`` consecutive batches of ``plan``.

    Why: the batches being assembled at once (one per thread, consecutive: :class:`PipelineBatches` keeps no more
    in flight) need the episodes open in the shuffle buffer *and* those entering it in the meantime; the episode
    cache must hold them all, or it evicts episodes still in use and loads them again.

    Args:
        plan: (N, 2) (episode, k) pairs of a pass, in serving order.
        batch_size: Items per batch.
        window: Consecutive batches considered.

    Returns:
        The count (0 for an empty plan).
    """
    if not len(plan):
        return 0
    _, first = np.unique(np.asarray(plan)[:, 0], return_index=True)
    per_batch = np.bincount(first // max(1, int(batch_size)))
    ends = np.concatenate([[0], np.cumsum(per_batch)])
    w = max(1, min(int(window), len(per_batch)))
    return int((ends[w:] - ends[:-w]).max())


@dataclasses.dataclass(frozen=True)
class BufferUse:
    """How a pass uses the episode cache, once the batch size is known (:func:`fit_to_cache`).

    Attributes:
        shuffle_buffer: Episodes open at once (the option, or less when the cache cannot hold it beside the
            episodes entering while batches are assembled).
        entering: Episodes entering within the batches assembled at once.
        ahead: Episodes loaded ahead (0: none).
        note: What was changed and why, for the log (empty when nothing was).
    """

    shuffle_buffer: int
    entering: int
    ahead: int
    note: str = ""


# the batches in flight a shuffle buffer the user did not set is fitted for: lerobot-train's default --num_workers
FIT_WINDOW = 4


def fit_to_cache(
    make_plan: Callable[[int], np.ndarray],
    *,
    capacity: int,
    episodes: int,
    shuffle_buffer: int,
    shuffle_given: bool,
    batch_size: int,
    threads: int,
    decode_threads: int,
    option_prefix: str = "",
    order_capacity: int | None = None,
) -> BufferUse:
    """Fit a pass to its episode cache: the open episodes, those entering while ``threads`` assemble batches, and
    the ones loaded ahead must all be held, or episodes in use are evicted and loaded again.

    A shuffle buffer the user did not set is made smaller until they fit (the order is then that of the smaller
    buffer). Why it is fitted on the first pass's plan for :data:`FIT_WINDOW` batches in flight, whatever pass the
    run starts at and however many threads it has: the order must be a function of what a resumed run keeps (the
    options, the seed, the batch size and the number of processes), or a run resumed mid-pass serves the rest of
    another order (the batches before its offset were another order's: windows twice, others never). A run resumed
    at pass 1 fitted on pass 1's plan (pass 0 has the warm-up), and one resumed with another ``--num_workers`` (which
    LeRobot resumes exactly) fitted for other batches in flight. The threads only decide the room left for loading
    ahead, and the warning when more batches are in flight than the cache holds units for. One the user set is
    kept, with a warning naming the ``cache_memory`` that would fit. A cache holding every episode needs nothing.

    Args:
        make_plan: ``make_plan(shuffle_buffer)`` -> the plan of the run's first pass (pass 0, warm-up included) with
            that buffer.
        capacity: Episodes the cache holds.
        episodes: Episodes (units) the dataset has.
        shuffle_buffer: The shuffle buffer as sized from bytes.
        shuffle_given: Whether the user set it.
        batch_size: Items per batch.
        threads: Threads assembling batches.
        decode_threads: Threads loading ahead (0: none).
        option_prefix: How the user sets options (``--dataset.backend_kwargs``), for the warning.
        order_capacity: The units the budget the options name holds, whatever memory is free (``PassOptions.
            order_capacity``): the buffer is fitted to it, never to ``capacity`` where that follows the free memory
            (a run resumed with less memory free fitted another buffer and served the rest of another order: 16
            frames twice, 16 never, in a reviewer's reproduction); ``None``: ``capacity``.

    Returns:
        The :class:`BufferUse`.
    """
    fitted = capacity if order_capacity is None else min(int(capacity), int(order_capacity))
    if fitted >= episodes:
        room = decode_room(capacity, shuffle_buffer, decode_threads) if decode_threads else 0
        return BufferUse(shuffle_buffer, 0, room)
    shuffle, note = int(shuffle_buffer), ""
    entering = entering_at_once(make_plan(shuffle), batch_size, FIT_WINDOW)
    for _ in range(4):  # entering barely depends on the buffer: one or two rounds settle it
        if shuffle + entering <= fitted or shuffle_given or shuffle == 1:
            break
        shuffle = max(1, fitted - entering)
        entering = entering_at_once(make_plan(shuffle), batch_size, FIT_WINDOW)
    window = max(1, int(threads))  # the batches in flight: PipelineBatches' max_concurrent
    if window != FIT_WINDOW:
        entering = entering_at_once(make_plan(shuffle), batch_size, window)
    if shuffle != shuffle_buffer:
        note = (
            f"shuffle buffer {shuffle} units (not {shuffle_buffer}): the cache holds {fitted}, and up to "
            f"{entering} enter while {window} batches of {batch_size} are assembled"
        )
    if shuffle + entering > capacity:
        want = shuffle + entering
        logger.warning(
            f"warning: the episode cache holds {capacity} units but a pass keeps up to {want} in use "
            f"(shuffle buffer {shuffle} + {entering} entering while {window} batches of {batch_size} are "
            f"assembled): units will be loaded more than once. Give {option_prefix}.cache_memory room "
            f"for {want} units, or set a smaller {option_prefix}.shuffle_buffer, batch size or number of workers"
        )
    room = decode_room(capacity, shuffle, decode_threads, entering) if decode_threads else 0
    return BufferUse(shuffle, entering, room, note)


class DecodeAhead:
    """Loads the episodes a pass is about to open before the batches that open them are assembled.

    Why: an episode enters the shuffle buffer when its first item is drawn, and the thread assembling that batch
    would otherwise wait for the whole episode to be read (a video decoded). The plan says in which order episodes
    enter, so ``threads`` load them ahead, at most ``ahead`` episodes in front of the newest one the assembling
    threads asked for (the episode cache must hold them until they are used). Once the pass has opened its last
    episode, the same room is used for the *next* pass's first episodes (its plan is a function of the seed and
    the pass number): without that, every pass began with the whole shuffle buffer decoded while training waited
    (~0.2 s per pass on the benchmark's dataset, an eighth of a pass).

    Args:
        load: ``load(episode)`` loads one episode for later (``LoadOnceLRU.load_ahead`` of the episode cache).
        threads: Loading threads (at least 1).
        ahead: How many episodes to load in front of the newest one asked for (at least 1).
    """

    def __init__(self, load: Callable[[int], object], threads: int, ahead: int):
        from concurrent.futures import ThreadPoolExecutor

        self.load, self.ahead = load, max(1, int(ahead))
        self.pool = ThreadPoolExecutor(max(1, int(threads)), thread_name_prefix="robo-loaders-decode")
        self._lock = threading.Lock()
        self._next_order, self._next_submitted = None, 0
        self.start_pass(np.zeros((0, 2), dtype=np.int64))

    def start_pass(self, plan: np.ndarray, upcoming: Callable[[], np.ndarray] | None = None) -> None:
        """Begin a pass: episodes are loaded in the order they enter ``plan``.

        When the pass's order is the one already being loaded since the last pass's end, those loads count as
        submitted.

        Args:
            plan: The (episode, k) pairs still to serve this pass, in serving order.
            upcoming: ``upcoming()`` returns the next pass's plan (asked once, near this pass's end), or ``None``.
        """
        order = _entry_order(plan)
        with self._lock:
            carried = self._next_order is not None and np.array_equal(order, self._next_order)
            self.order = order
            self.rank = {int(e): r for r, e in enumerate(self.order)}
            self.submitted = self._next_submitted if carried else 0  # already loading since the last pass's end
            self.upcoming = upcoming
            self._next_order, self._next_submitted = None, 0

    def reached(self, episodes: np.ndarray) -> None:
        """The assembling threads need ``episodes`` now: keep loading up to ``ahead`` entries past the newest.

        Past the end of this pass's order, the next pass's first episodes are loaded.

        Args:
            episodes: The episodes of the batch being assembled.
        """
        with self._lock:
            newest = max((self.rank.get(int(e), -1) for e in np.unique(episodes)), default=-1)
            want = newest + 1 + self.ahead
            stop = min(len(self.order), want)
            todo, self.submitted = self.order[self.submitted : stop].tolist(), max(self.submitted, stop)
            if want > len(self.order) and self.upcoming is not None:
                if self._next_order is None:  # once per pass
                    self._next_order = _entry_order(self.upcoming())
                stop = min(len(self._next_order), want - len(self.order))
                todo += self._next_order[self._next_submitted : stop].tolist()
                self._next_submitted = max(self._next_submitted, stop)
        for e in todo:
            self.pool.submit(self.load, e)

    def shutdown(self) -> None:
        """Stop loading: cancel the loads not started and wait for those running."""
        self.pool.shutdown(wait=True, cancel_futures=True)


class FirstBatchFirst:
    """Holds the threads assembling later batches until the first batch of a start is assembled.

    Why: at a start every episode is still to load, and the two cores of a small machine were shared by the thread
    assembling the first batch, the loads ahead and the threads assembling the next batches, each loading its own
    episodes: at 480p the first batch's 7 units were decoded beside the second batch's, and it came out after 13-14
    units had been loaded (docs/benchmarks.md, *The episode buffer's default*). Held, the later threads load nothing
    until the first batch is out; the loads ahead still follow the pass's order, whose first entries are the first
    batch's episodes. A hold lasts :data:`HOLD_S` at most: it only orders work, so a first batch that never comes (a
    pipeline dropped without a shutdown) leaves no thread waiting for ever.
    """

    HOLD_S = 10.0

    def __init__(self):
        self._open = threading.Event()
        self._open.set()
        self._first: np.ndarray | None = None
        self._lock = threading.Lock()

    def close(self, first: np.ndarray) -> None:
        """Hold every batch but ``first`` until ``first`` is assembled.

        Args:
            first: The (episode, k) pairs of the first batch to serve.
        """
        with self._lock:
            self._first = np.array(first, copy=True)
            if len(first):
                self._open.clear()
            else:
                self._open.set()

    def open(self) -> None:
        """Let every thread go on (the first batch is assembled, or the pipeline stops)."""
        with self._lock:
            self._first = None
            self._open.set()

    def enter(self, pairs: np.ndarray) -> bool:
        """Called by a thread about to assemble ``pairs``: waits while the gate is closed, unless ``pairs`` is the
        first batch.

        Args:
            pairs: The batch's (episode, k) pairs.

        Returns:
            Whether ``pairs`` is the first batch (its thread must call :meth:`open` once it is assembled).
        """
        with self._lock:
            first = self._first is not None and np.array_equal(pairs, self._first)
        if not first:
            self._open.wait(self.HOLD_S)
        return first


class _Failed:
    """An assembling thread's exception, carried through the pipeline in its batch's place and raised as itself
    where the batches leave it (:meth:`PipelineBatches.batches`).

    Why: torchdata re-raises a worker thread's exception as a new one of the same type whose message is the whole
    traceback, wrapped once per node ("Caught ShardError in _populate_queue. Original Traceback ... Caught
    ShardError in _apply_udf ..."), so the project's one-line error (a shard deleted under a running pass) reached
    the user inside two tracebacks. Carried as a value it also surfaces in order, at the batch that failed.
    """

    __slots__ = ("exc",)

    def __init__(self, exc: Exception):
        self.exc = exc


class PipelineBatches(BatchSource):
    """The pipeline's :class:`~robo_loaders_plugin.core.iteration.BatchSource`: a plan node ordering each pass, a
    torchdata ``ParallelMapper`` of threads assembling batches in order, a prefetcher, and pinned memory if asked.

    Args:
        groups: The items of a pass grouped by episode.
        collate: ``collate(indices)`` builds one batch, in the framework's layout, from dataset indices.
        plan: What the native loop would serve (batch size, shuffle, threads, resume position, rank, pinning).
        seed: The order's seed (the same on every rank).
        shuffle_buffer: How many episodes a pass draws its items from at once.
        replacement: Draw items with replacement.
        prefetch: Batches prepared ahead (0: none).
        decode_ahead: Loads episodes before the batches that open them, or ``None``.
        first_plan: The first pass's plan when the caller made it already (the same function of the seed, the
            pass and the buffer), or ``None``.
        note: Said in :meth:`describe` (how the pass was fitted to the episode cache), or empty.
        release: ``release(episode)`` once a pass has served an episode's last item (``LoadOnceLRU.release`` of an
            episode cache smaller than the dataset), or ``None``.
        warm_up: Pass 0 grows its shuffle buffer over its first batches (``BatchPlanNode``), so the first batch
            waits for the few episodes that hold it (two when they are long), not a buffer.
        endless: Run from pass to pass without a reset (the next pass's first batches assembled while this one's
            last are served). Only for an episode cache holding every episode: with a smaller one, the batches in
            flight across the boundary would need the next pass's shuffle buffer beside this pass's open episodes,
            more than the pass was fitted to (``fit_to_cache``), and evict episodes still in use.
    """

    def __init__(
        self,
        groups: ItemGroups,
        collate: Callable[[np.ndarray], dict],
        plan: SamplingPlan,
        *,
        seed: int,
        shuffle_buffer: int,
        replacement: bool = False,
        prefetch: int = 2,
        decode_ahead: DecodeAhead | None = None,
        first_plan: np.ndarray | None = None,
        note: str = "",
        release: Callable[[int], None] | None = None,
        endless: bool = False,
        warm_up: bool = False,
    ):
        super().__init__(plan.start_epoch, plan.start_batch)
        self.groups, self.collate, self.pin_memory = groups, collate, bool(plan.pin_memory)
        self.rank, self.world_size = plan.rank, plan.world_size
        self.note, self.release = note, release
        self.plan_node = BatchPlanNode(
            groups.counts,
            plan.batch_size,
            plan.drop_last,
            seed,
            shuffle_buffer,
            plan.shuffle,
            replacement,
            plan.rank,
            plan.world_size,
            endless=endless,
            warm_up=warm_up,
        )
        self.endless = bool(endless)
        # endless changes no order (BatchPlanNode: the same passes, the next one started early)
        self.pass_key = pass_key(
            plan,
            seed=int(seed),
            shuffle_buffer=int(shuffle_buffer),
            replacement=bool(replacement),
            warm_up=bool(warm_up),
            units=digest(groups.counts),
            items=digest(groups.items) if groups.items is not None else groups.n,
        )
        # the pass and batch the running pipeline yields next (None: not started, or left where it cannot be
        # trusted): a pass asked for right where the last one ended continues it without a reset
        self._next: tuple[int, int] | None = None
        if first_plan is not None:  # already made (to fit the episode cache): not made again
            self.plan_node.keep(plan.start_epoch, first_plan)

        self.decode_ahead = decode_ahead

        # the first batch of a start goes first: the threads assembling later batches wait until it is assembled
        # before they load anything (FirstBatchFirst)
        # (a local: the threads must not hold the pipeline, see test_a_pipeline_nobody_holds_...)
        self.first_gate = gate = FirstBatchFirst()

        def assemble(pairs: np.ndarray) -> dict | _Failed:
            first = gate.enter(pairs)
            try:
                if decode_ahead is not None:
                    decode_ahead.reached(pairs[:, 0])
                return collate(groups.indices(pairs))
            except Exception as exc:  # noqa: BLE001 - raised as itself by batches(), not as torchdata's wrapper
                return _Failed(exc)
            finally:
                if first:
                    gate.open()

        self.num_threads = max(1, int(plan.num_workers))
        # one batch in flight per thread (torchdata's default is two): the batches assembled at once need their
        # episodes cached together (fit_to_cache), so fewer in flight leave more of the cache to the shuffle buffer
        node = ParallelMapper(
            self.plan_node,
            map_fn=assemble,
            num_workers=self.num_threads,
            in_order=True,
            method="thread",
            max_concurrent=self.num_threads,
        )
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
        """One line for the training log: threads, batches per pass, rank, and where it starts."""
        ranks = f", rank {self.rank} of {self.world_size}" if self.world_size > 1 else ""
        note = f"; {self.note}" if self.note else ""
        return (
            f"the torchdata pipeline ({plural(self.num_threads, 'thread')}, {len(self)} batches per pass{ranks}, "
            f"starting at epoch {self._epoch} batch {self._batch}{note})"
        )

    def plan_of(self, epoch: int) -> np.ndarray:
        """(episode, k) pairs of pass ``epoch`` in serving order (tools and tests; no data is read).

        Args:
            epoch: The pass number.

        Returns:
            An (N, 2) int64 array: this rank's pairs.
        """
        return self.plan_node.plan_of(epoch)

    def batches(self, epoch, start=0):
        """One pass, from batch ``start``; a pure function of (epoch, start) and the seed.

        Args:
            epoch: The pass number.
            start: The first batch to serve.

        Yields:
            Collated batches, in order.

        Raises:
            Exception: what assembling a batch raised (the project's errors: one line naming the shard, file or
                episode), as itself, at that batch.
        """
        # the loads ahead know the pass's order before the pipeline starts: resetting it starts the assembling
        # threads at once, and a first batch that told DecodeAhead it was reached before the order was set got
        # nothing loaded ahead (its shuffle buffer's units were decoded one after another by the assembling
        # thread: 2.6 s of a 480p first batch). plan_of makes the plan once; the reset below reuses it.
        # an endless pipeline runs from pass to pass (BatchPlanNode(endless=True)): the pass that follows the one
        # just served is already being assembled, and only another position resets it. A reset between passes
        # stopped the threads, dropped what was prefetched and started again from an empty pipeline: 0.2-0.35 s a
        # pass, a third of a 10-batch pass at 480p
        continuing = self.endless and self._next == (epoch, start)
        if not continuing:
            # stopped and joined first: torchdata's reset only drops the running iterator, whose thread may still
            # be taking a batch from the plan node, which would then be missing from the new position's pass
            self.first_gate.open()  # a thread waiting for a first batch that will not come goes on
            shutdown_node_threads(self.root)
        rest = self.plan_node.plan_of(epoch)[start * self.plan_node.batch_size :]
        if not continuing:
            self.first_gate.close(rest[: self.plan_node.batch_size])
        if self.decode_ahead is not None:
            # bound to the plan node, not to this object: a lambda over self held the pipeline from the threads'
            # own closures, so a dropped dataset's pipeline was never collected and its threads never stopped (six
            # threads, decoders and their open videos per build of a sweep: a reviewer's reproduction)
            self.decode_ahead.start_pass(rest, upcoming=functools.partial(self.plan_node.plan_of, epoch + 1))
        if not continuing:
            self.plan_node.seek(epoch, start)
            self.root.reset()
        self._next = None  # until a batch comes out: an error or an abandoned generator leaves nothing to trust
        done = episodes_done_by_batch(rest, self.plan_node.batch_size) if self.release is not None else {}
        n = len(self)
        for b in range(start, n):
            try:
                batch = next(self.root)
            except StopIteration:  # a pass without batches (an endless node ends no other)
                return
            except BaseException:
                # interrupted inside the pipeline (Ctrl-C), where a batch may have been taken from its queue and
                # dropped: the position is not to be trusted, and the next pass here starts from a reset (a
                # reviewer's reading: continuing, it served the batch after the lost one in its place)
                self._next = None
                raise
            if isinstance(batch, _Failed):
                self._next = None  # the failed batch was consumed: a retry starts from a reset
                raise batch.exc
            self._next = (epoch, b + 1) if b + 1 < n else (epoch + 1, 0)
            for e in done.get(b - start, ()):  # batches come in order: every batch up to b is assembled
                self.release(e)
            yield batch

    def batches_apart(self, epoch):
        """A whole pass served while another pass is running in the pipeline (two iterators interleaved, a peek):
        its batches assembled in the calling thread from the same plan, the pipeline left to the running pass.

        Why not the pipeline: it serves one position at a time, and moving it to this pass would take the running
        pass's batches away from it. Nothing here tells the episode cache which episodes are done (its ``release``
        follows the running pass), so an episode this pass evicts is loaded again, never served wrong.

        Args:
            epoch: The pass number.

        Yields:
            Collated batches of the whole pass, in order (pinned when the pipeline pins them).
        """
        plan, size = self.plan_node.plan_of(epoch), self.plan_node.batch_size
        for b in range(len(self)):
            batch = self.collate(self.groups.indices(plan[b * size : (b + 1) * size]))
            yield _pinned(batch) if self.pin_memory else batch

    def shutdown(self) -> None:
        """Stop the pipeline's threads and wait for them.

        Why: torchdata's worker threads are daemons. A training script that ends while they are still assembling
        the next batches (a prefetching pipeline always is) lets the interpreter finalize under them, and a thread
        inside torch or Blosc2 at that moment aborts the process ("terminate called without an active exception",
        exit 134) after a successful run. Every pipeline is shut down at exit; call this to stop one sooner."""
        self._next = None  # a later pass starts the pipeline again
        self.first_gate.open()
        shutdown_node_threads(self.root)
        if self.decode_ahead is not None:
            self.decode_ahead.upcoming = None
            self.decode_ahead.shutdown()


def _pinned(batch):
    """``batch`` with every CPU tensor in pinned memory (what the pipeline's ``PinMemory`` node does to its batches)."""
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, dict):
        return {k: _pinned(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_pinned(v) for v in batch)
    return batch


@atexit.register
def _shutdown_live() -> None:
    for source in list(_LIVE):
        root = source.root
        source.shutdown()
        release_node_iterators(root)  # collected now, not during finalisation (torch_compat)


class PipelineDataset(BatchDataset):
    """A samples dataset served by this pipeline (the ``batch`` kind): subclasses mix it into a dataset with a
    frame source of loaded episodes (``self.frames``: ``frames.episodes.EpisodeFrames``), ``episode_of()`` (the
    frame-source episode of every dataset index) and ``collate(indices)``.

    Args:
        passes: How passes are ordered and fed (shuffle buffer, seed, prefetch, cache, replacement).
        decode_threads: Threads loading the episodes a pass is about to open before the batches that need them are
            assembled (:class:`DecodeAhead`); 0: episodes are loaded by the assembling threads when needed.
        **kwargs: The rest of the dataset's constructor arguments (``serving``, ...).
    """

    def __init__(self, *, passes: PassOptions, decode_threads: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.passes = passes
        self.decode_threads = int(decode_threads)

    def batch_source(self, plan: SamplingPlan) -> BatchSource:
        """The pipeline serving the passes ``plan`` describes (called once per DataLoader).

        The seed is the ``seed`` option when set, else the framework's (``plan.seed``), else 0. With ``decode_threads``,
        episodes are loaded ahead into the room the episode cache has beyond the shuffle buffer.

        Args:
            plan: What the native loop would serve.

        Returns:
            A :class:`BatchSource` (the pipeline itself) whose ``batches(epoch, start)`` yield one pass.
        """
        items = np.arange(len(self)) if plan.items is None else np.asarray(plan.items, dtype=np.int64)
        # units the pass is planned over: episodes, or parts of them (frames.chunks.EpisodeUnits counts its own)
        groups = ItemGroups(items, self.episode_of(), getattr(self.frames, "unit_count", len(self.frames.lengths)))
        opts = self.passes
        seed = opts.seed if opts.seed is not None else (plan.seed or 0)
        plans = {}  # pass 0's plans by shuffle buffer: the buffer is fitted on pass 0 whatever pass the run starts at

        def make_plan(shuffle: int) -> np.ndarray:
            if shuffle not in plans:
                plans[shuffle] = BatchPlanNode(
                    groups.counts,
                    plan.batch_size,
                    plan.drop_last,
                    seed,
                    shuffle,
                    plan.shuffle,
                    opts.replacement,
                    plan.rank,
                    plan.world_size,
                    warm_up=opts.warm_up,
                ).plan_of(0)
            return plans[shuffle]

        cache = getattr(self.frames, "cache", None)  # a frame source without an episode cache holds every episode
        n_episodes = len(groups.counts)
        use = fit_to_cache(
            make_plan,
            capacity=cache.capacity if cache is not None else n_episodes,
            episodes=n_episodes,
            shuffle_buffer=opts.shuffle_buffer,
            shuffle_given=opts.shuffle_given,
            batch_size=plan.batch_size,
            threads=max(1, int(plan.num_workers)),
            decode_threads=self.decode_threads,
            option_prefix=opts.option_prefix,
            order_capacity=opts.order_capacity,
        )
        ahead = DecodeAhead(cache.load_ahead, self.decode_threads, use.ahead) if use.ahead and cache else None
        source = PipelineBatches(
            groups,
            self.collate,
            plan,
            seed=seed,
            shuffle_buffer=use.shuffle_buffer,
            replacement=opts.replacement,
            prefetch=opts.prefetch,
            decode_ahead=ahead,
            first_plan=plans.get(use.shuffle_buffer) if plan.start_epoch == 0 else None,
            note=use.note,
            release=getattr(cache, "release", None) if use.entering else None,
            endless=cache is None or cache.capacity >= n_episodes,  # every episode held: nothing to evict
            warm_up=opts.warm_up,
        )
        return source

    def batch_episodes(self, batch_size: int, drop_last: bool = True, epoch: int = 0) -> list[np.ndarray]:
        """Episode of every item, batch by batch, of pass ``epoch`` (no data is read): how batches mix episodes, for
        the benchmark's episode-mix metric.

        Args:
            batch_size: Items per batch.
            drop_last: Whether a last, incomplete batch is dropped.
            epoch: The pass number.

        Returns:
            One array of episode indices per batch.
        """
        source = self.batch_source(SamplingPlan(batch_size=batch_size, drop_last=drop_last))
        eps = source.plan_of(epoch)[:, 0]
        return [eps[b * batch_size : (b + 1) * batch_size] for b in range(len(source))]
