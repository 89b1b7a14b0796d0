"""A mixture as one dataset the frameworks see: its components' datasets behind global indices, mixed batches.

Why the framework hooks: the components are built by the chosen backend exactly as a single dataset would be (the
framework's own dataset for ``native``), so their items and batches are in the framework's layout; only the
framework knows how its keys nest (robomimic's ``obs``/``next_obs``/``goal_obs``, LeRobot's flat keys), so renaming
and joining batches is a hook, and everything else (which component serves which position, the order, the rank
share, resuming) is here once.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.core.in_flight import TrainingLoop, indexed_in_flight
from robo_loaders_plugin.core.indices import item_index
from robo_loaders_plugin.core.iteration import BatchDataset, IndexedDataset, SamplingPlan, ServedDataset, Serving
from robo_loaders_plugin.core.units import plural, some_of
from robo_loaders_plugin.core.worker_processes import ProcessBatches
from robo_loaders_plugin.mixtures.batches import MixtureBatches
from robo_loaders_plugin.mixtures.missing import fill_flat
from robo_loaders_plugin.mixtures.padding import NO_PADDING, Padding, pad_flat
from robo_loaders_plugin.mixtures.sampling import MixtureOrder
from robo_loaders_plugin.storage.buffers import BufferPool

DATASET_INDEX = "dataset_index"  # the key every mixed item carries: its component's position in the mixture
# what a rename map maps a component's dropped key to: a name no mixture keeps, so the key is left out of the item
# even where another key of the component is renamed onto its name
DROPPED = "\x00dropped:"


class MixtureHooks:
    """How a framework's items and batches are built, renamed and joined (the defaults: flat dicts of tensors,
    torch's ``default_collate``); the adapters subclass it where their layout differs."""

    def item(self, component_dataset, i: int) -> Any:
        """One item of a component (its dataset's ``[i]``).

        Args:
            component_dataset: The component's dataset.
            i: Its local index.

        Returns:
            The item, in the framework's layout.
        """
        return component_dataset[int(i)]

    def collate_items(self, items: list) -> Any:
        """A batch of items, as the framework's DataLoader collates them (torch's ``default_collate``).

        Args:
            items: Items of one component.

        Returns:
            The batch.
        """
        return torch.utils.data.default_collate(items)

    def component_batch(self, component_dataset, local_indices: list[int]) -> Any:
        """A component's batch: an indexed dataset's own ``collate`` (its fast path), else its items collated.

        Args:
            component_dataset: The component's dataset.
            local_indices: Its local indices, in batch order.

        Returns:
            The batch.
        """
        if isinstance(component_dataset, IndexedDataset):
            return component_dataset.collate(local_indices)
        return self.collate_items([self.item(component_dataset, i) for i in local_indices])

    def rename(self, batch_or_item: Any, mapping: Mapping[str, str], keep: Any) -> Any:
        """Rename a component's keys to the mixture's and keep only the mixture's keys (flat dicts).

        Args:
            batch_or_item: A component's batch or item.
            mapping: ``{component key: mixture key}``.
            keep: The mixture's keys (``None``: every key).

        Returns:
            The renamed dict.
        """
        out = {mapping.get(k, k): v for k, v in batch_or_item.items()}
        return out if keep is None else {k: v for k, v in out.items() if k in keep}

    def pad(self, batch_or_item: Any, sizes: Mapping[str, tuple[int, int]], rows: int | None) -> Any:
        """Pad a component's renamed item or batch to the mixture's sizes and add each padded key's mask (flat
        dicts: ``mixtures.padding.pad_flat``).

        Args:
            batch_or_item: A component's renamed item or batch.
            sizes: ``{mixture key: (the component's size, the mixture's)}`` of every padded key.
            rows: A batch's rows, or ``None`` for an item.

        Returns:
            The padded item or batch.
        """
        return pad_flat(batch_or_item, sizes, rows)

    def template(self, item: Any, camera: str) -> dict:
        """What an item of a component that has ``camera`` serves of it (flat dicts: the camera and its ``_is_pad``),
        from which a component without it gets zeros (``mixtures.missing``).

        Args:
            item: A renamed item of a component that has the camera.
            camera: The camera's mixture key.

        Returns:
            ``{key: value}``.
        """
        return {key: item[key] for key in (camera, f"{camera}_is_pad") if key in item}

    def fill(self, batch_or_item: Any, cameras: Sequence[str], templates: Mapping, rows: int | None) -> Any:
        """Serve every camera of ``cameras``, zeros where the component lacks it, and its ``<camera>_is_missing``
        flag (flat dicts: ``mixtures.missing.fill_flat``).

        Args:
            batch_or_item: A component's renamed (and padded) item or batch.
            cameras: The cameras the mixture serves with ``"missing_cameras": "zeros"``, in its order.
            templates: What this component lacks, from :meth:`template` (empty when it has every camera).
            rows: A batch's rows, or ``None`` for an item.

        Returns:
            The filled item or batch.
        """
        return fill_flat(batch_or_item, cameras, templates, rows)

    def concat(self, batches: list, positions: list[np.ndarray], size: int, pool: BufferPool | None) -> Any:
        """Join component batches into one: component batch ``j``'s rows go to rows ``positions[j]``.

        Why a scatter into one array: joining then reordering copied every batch twice, and into new arrays each
        time (a fresh array page-faults); one copy into a recycled array is what a single dataset's batch costs.

        Args:
            batches: Renamed component batches with the same keys.
            positions: Where each batch's rows go in the mixed batch (together: every row once).
            size: Rows of the mixed batch.
            pool: Recycles the mixed batch's CPU arrays (``storage.buffers.BufferPool``), or ``None``.

        Returns:
            The mixed batch.
        """
        return _scatter(batches, positions, int(size), pool)

    def before_workers(self, datasets: Sequence[Any]) -> None:
        """Called in the training process before the worker processes of a ``native`` mixture start (once per
        run): a framework lets go here of what a worker should open itself (robomimic's HDF5 handles). Default:
        nothing.

        Args:
            datasets: The components' datasets.
        """

    def in_worker(self) -> None:
        """Called in each worker process of a ``native`` mixture before it builds a batch (through the DataLoader's
        ``worker_init_fn``): a framework drops here what a forked worker must not share with the training process,
        e.g. open video decoders, whose file offsets the processes would move under each other. Default: nothing.
        """

    def draws_random(self, component_dataset) -> bool:
        """Whether a component's items draw random numbers (LeRobot's image transforms), so that its batches must be
        built where the framework builds them, in worker processes seeded from the run's seed: in the training
        process they would draw from its RNG, and its threads in no fixed order (other augmentations at every run
        of one seed). Default: ``False``.

        Args:
            component_dataset: The component's dataset.

        Returns:
            Whether its items draw random numbers.
        """
        del component_dataset  # items draw nothing unless a framework says so
        return False

    def close_component(self, component_dataset) -> None:
        """Release what a component's dataset holds (``close()`` on a backend's dataset: its cache entry may then be
        pruned, its maps, memory and recycled arrays go); the framework's own datasets are left to the framework.

        Args:
            component_dataset: The component's dataset.
        """
        if isinstance(component_dataset, ServedDataset):
            component_dataset.close()

    def dataset_index(self, components: np.ndarray, batch: bool) -> Any:
        """The ``dataset_index`` value: an ``int64`` tensor of one entry per item (``batch``), or a scalar.

        Args:
            components: The component of each item (one entry when not ``batch``).
            batch: Whether a batch's value is wanted.

        Returns:
            The value.
        """
        values = torch.as_tensor(np.asarray(components, dtype=np.int64))
        return values if batch else values[0]


# how many garbage_collected_once blocks are open (a mixture's build runs on the thread that starts training)
_BUILDS_OPEN = [0]


@contextlib.contextmanager
def garbage_collected_once():
    """A mixture's build, with CPython's full garbage collection run once as it ends, before its first batch; the
    objects from before it frozen while it runs. Nested blocks (a build inside the start that reads its index) do
    this once, for the outermost.

    Why collect at the end: building hundreds of components (the frameworks' dataset objects, their metadata, the
    stores' headers) leaves many objects pending for CPython's next full collection (it runs once they reach a
    quarter of the objects that survived the last one), so that collection ran during the first batches, a pass over
    every object of the process (~0.3 s at 100 pretraining-shaped components, ~480k objects: longer than 30
    batches of a cached backend). Collected here it is paid once, at start-up; the next full collection waits until
    the heap has grown by another quarter, which a training loop's steady batches do not reach.

    Why freeze (``gc.freeze``) while it runs: the same growth triggered full collections during the build, each a
    pass over the imports' objects too (two of ~0.25 s at 400 components); frozen, they pass over the build's own
    objects. They are unfrozen before the last collection, which sees every object as before. Objects frozen before
    the block (this Python freezes a few hundred of its own at start) are unfrozen with them: a frozen object is
    only skipped by collections, so unfreezing changes which objects a collection passes over, never a result.
    Nothing is frozen with collection disabled.

    Yields:
        Nothing; on an exception the objects are unfrozen and nothing is collected.
    """
    outer = _BUILDS_OPEN[0] == 0
    freezing = outer and gc.isenabled()
    if freezing:
        gc.freeze()
    _BUILDS_OPEN[0] += 1
    try:
        yield
    finally:
        _BUILDS_OPEN[0] -= 1
        if freezing:
            gc.unfreeze()
    if outer:
        gc.collect()


def _span(pos: np.ndarray) -> slice | None:
    """``pos`` as a slice when it is a run of consecutive rows (a plain copy instead of an indexed one)."""
    if pos.size and int(pos[-1]) - int(pos[0]) + 1 == pos.size and (pos.size == 1 or (np.diff(pos) == 1).all()):
        return slice(int(pos[0]), int(pos[-1]) + 1)
    return None


def _scatter(batches: list, positions: list[np.ndarray], size: int, pool):
    first = batches[0]
    if isinstance(first, Mapping):
        return {k: _scatter([b[k] for b in batches], positions, size, pool) for k in first}
    if len(batches) == 1 and _span(positions[0]) == slice(0, size):
        return first  # one component, rows in order: its batch as built
    if isinstance(first, torch.Tensor):
        shape = (size,) + tuple(first.shape[1:])
        np_dtype = _numpy_dtype(first.dtype)
        if pool is not None and first.device.type == "cpu" and np_dtype is not None:
            out = torch.from_numpy(pool.empty(shape, np_dtype))
        else:
            out = torch.empty(shape, dtype=first.dtype, device=first.device)
        for b, pos in zip(batches, positions):
            span = _span(pos)
            if span is not None:
                out[span].copy_(b)
            elif _numpy_ok(out, b):
                # numpy's fancy-index assignment: ~10x faster than torch's index_put_ for camera frames on the CPU
                out.numpy()[pos] = b.numpy()
            else:
                out[torch.from_numpy(pos).to(out.device)] = b.to(out.device)
        return out
    if isinstance(first, np.ndarray):
        shape = (size,) + first.shape[1:]
        arr = pool.empty(shape, first.dtype) if pool is not None else np.empty(shape, dtype=first.dtype)
        for b, pos in zip(batches, positions):
            arr[pos] = b
        return arr
    if isinstance(first, (list, tuple)):
        rows: list = [None] * size
        for b, pos in zip(batches, positions):
            for x, p in zip(b, pos.tolist()):
                rows[p] = x
        return rows
    raise TypeError(f"cannot join batch values of type {type(first).__name__}")


def _array_bytes(batch) -> int:
    """Bytes of every array of a (nested) batch: what the pool hands out for it."""
    if isinstance(batch, Mapping):
        return sum(_array_bytes(v) for v in batch.values())
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.nbytes)
    return 0


def _numpy_ok(out: torch.Tensor, part: torch.Tensor) -> bool:
    """Whether a part can be written into ``out`` through numpy (both on the CPU, same dtype, no grad)."""
    return (
        out.device.type == "cpu"
        and part.device.type == "cpu"
        and part.dtype == out.dtype
        and not part.requires_grad
        and _numpy_dtype(out.dtype) is not None
    )


def _numpy_dtype(dtype: torch.dtype):
    """The numpy dtype of a torch dtype, or ``None`` (bfloat16 has none)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None


class MixtureDataset(BatchDataset):
    """Components' datasets behind one range of global indices (component ``k``'s window ``i`` is
    ``offsets[k] + i``); every item and batch renamed to the mixture's keys and tagged with ``dataset_index``.

    Its kind for the adapters is ``batch`` whatever the backend's: a pass is the mixture's order
    (:class:`MixtureOrder`), served by :class:`MixtureBatches`.

    Args:
        datasets: Each component's dataset, built by the chosen backend as a single dataset would be.
        names: The components' names (logs and messages).
        renames: Each component's ``{component key: mixture key}``.
        keep: The mixture's keys (common to every component after the renames), handed to ``hooks.rename``.
        hooks: The framework's :class:`MixtureHooks`.
        weights: One weight per component, or ``None`` (weighted by size: plain concatenation).
        seed: The order seed when the framework's plan gives none.
        serving: What the adapters log and hold (``core.iteration.Serving``).
        eligible: Per component, the local windows a pass serves (``MixtureOrder``'s ``eligible``; ``None``: every
            window): the framework's own per-dataset rule, e.g. LeRobot's sampler leaving episode ends out. Every
            window stays reachable by index (``len``, ``[i]``, ``collate``).

    Raises:
        ValueError: the lists differ in length, a component has no window, or eligible windows are wrong.
    """

    setting = "the mixture"  # how the user gives it (train.data_mixture, --dataset.mixture), for messages

    def __init__(
        self,
        datasets: Sequence[Any],
        names: Sequence[str],
        renames: Sequence[Mapping[str, str]],
        keep: Any,
        hooks: MixtureHooks,
        weights: Sequence[float] | None,
        seed: int,
        serving: Serving,
        eligible: Sequence[np.ndarray | None] | None = None,
        padding: Padding = NO_PADDING,
        cameras: Sequence[str] = (),
        missing: Sequence[Sequence[str]] | None = None,
    ):
        super().__init__(serving=serving)
        if not (len(datasets) == len(names) == len(renames)) or (weights is not None and len(weights) != len(names)):
            raise ValueError("a mixture needs one name, rename map (and weight) per component dataset")
        self.datasets, self.names = list(datasets), list(names)
        self.renames = [dict(r) for r in renames]
        self.keep, self.hooks = keep, hooks
        self.padding = padding
        self.weights = None if weights is None else [float(w) for w in weights]
        self.seed = int(seed)
        self.sizes = [len(d) for d in self.datasets]
        self._layout = MixtureOrder(self.sizes, self.weights, self.seed, eligible=eligible)  # raises when empty
        self.offsets = self._layout.offsets
        # the mixed batches' arrays and the components' parts, recycled once nothing references them (as a single
        # dataset's are), in one pool bounded by the batches in flight once a pass starts (batch_source): the
        # components' own pools kept a buffer for every part size they saw (17.5 batches' bytes where 5 were stated)
        self.buffer_pool = BufferPool(max_per_shape=64)
        for dataset in self.datasets:
            if isinstance(dataset, ServedDataset) and dataset.buffer_pool is not None:
                dataset.buffer_pool = self.buffer_pool
        self._sizing: TrainingLoop | None = None  # the pass's loop, until its first batch gives the bytes of one
        self.eligible = self._layout.eligible
        self.cameras = list(cameras)
        self.missing = [list(m) for m in (missing or [[] for _ in self.datasets])]
        self.templates = self._templates(self.missing)
        # builds a batch once over all components where the framework can (``lerobot.joined``); None: per component
        self.joined: Any = None
        self._processes: ProcessBatches | None = None  # the worker processes of a native mixture's passes
        self._processes_how: tuple = ()  # how they were started (count, context, prefetch)
        self._units: tuple[np.ndarray | None, int] | None = None  # units(), found on first use
        self._item_by_item: bool | None = None  # _per_component's choice, made at its first batch

    def __getstate__(self) -> dict:
        """Pickled for spawned workers without the training process's worker processes."""
        state = dict(self.__dict__)
        state["_processes"] = None
        return state

    def _templates(self, missing: Sequence[Sequence[str]]) -> list[dict]:
        """Per component, what it lacks of :attr:`cameras`, as one item of the first component that has each
        camera serves it (read once, here)."""
        out: list[dict] = [{} for _ in self.datasets]
        items: dict[int, Any] = {}
        for k, lacking in enumerate(missing):
            for camera in lacking:
                j = next(j for j, others in enumerate(missing) if camera not in others)
                if j not in items:
                    items[j] = self.hooks.rename(self.hooks.item(self.datasets[j], 0), self.renames[j], self.keep)
                out[k].update(self.hooks.template(items[j], camera))
        return out

    def _complete(self, k: int, values: Any, rows: int | None) -> Any:
        """A component's renamed item or batch, padded and its cameras filled as the mixture serves them."""
        if self.padding:
            try:
                values = self.hooks.pad(values, self.padding.of(k), rows)
            except ValueError as exc:  # a demo storing a key wider or narrower than the first (a bare error)
                raise SourceError(f"{self.setting}: component {k} ({self.names[k]}): {exc}") from exc
        if self.cameras:
            values = self.hooks.fill(values, self.cameras, self.templates[k], rows)
        return values

    def __len__(self) -> int:
        """Every window of every component (the global index range)."""
        return self._layout.rows

    @property
    def pass_length(self) -> int:
        """Positions of a pass: every component's eligible windows (``len(self)`` when all are)."""
        return self._layout.total

    def order(self, seed: int | None = None, shuffle: bool = True) -> MixtureOrder:
        """The pass order for a seed.

        Args:
            seed: The order seed (``None``: the dataset's).
            shuffle: Whether the order is drawn.

        Returns:
            The :class:`MixtureOrder`.
        """
        units, buffer = self.units()
        seed = self.seed if seed is None else seed
        return MixtureOrder(self.sizes, self.weights, seed, shuffle, self.eligible, units, buffer)

    def units(self) -> tuple[np.ndarray | None, int]:
        """The unit of every global index and the units a pass keeps open, when every component is served by unit
        (a pipeline-served backend: ``pipeline.batches.PipelineDataset``, whose frame source loads an episode, or a
        part of one, whole), else ``(None, 1)``: the pass is served in its drawn order.

        Why: such a component loads a whole unit for the first item it serves of it; drawn at random over hundreds
        of components, a batch's items were each in a unit of its own until every unit had been loaded once (docs
        and measurements: ``pipeline.plan.serve_by_unit``). The buffer is the smallest of the components' shuffle
        buffers: each component's episode cache holds at least two of its own (``PassOptions.episode_capacity``),
        so the units a pass keeps open never evict one another.

        Returns:
            ``(units, buffer)``: unit ids distinct across components (each component's ``episode_of()`` after the
            previous components'), and the units open at once.
        """
        from robo_loaders_plugin.pipeline.batches import PipelineDataset

        if self._units is None:
            by_unit = bool(self.datasets) and all(isinstance(d, PipelineDataset) for d in self.datasets)
            parts, base = [], 0
            for d in self.datasets if by_unit else ():
                own = np.asarray(d.episode_of(), dtype=np.int64)
                if len(own) != len(d):  # not one unit per window: served in the drawn order (slower, as correct)
                    by_unit = False
                    break
                parts.append(own + base)
                base += int(own.max()) + 1 if len(own) else 0
            buffer = 1
            if by_unit:
                buffers = [int(d.passes.shuffle_buffer) for d in self.datasets]
                buffer = min(buffers)
                self._say_buffer(buffers)
            self._units = (np.concatenate(parts), buffer) if by_unit else (None, 1)
        return self._units

    def _say_buffer(self, buffers: list[int]) -> None:
        """One warning when a few components' shuffle buffers set the whole mixture's well below the others' (a
        component of large units, sized down to fit its memory): every stretch of every pass then mixes that few
        units, which the user would otherwise only see as ``(1 unit open)`` in the passes' log line."""
        buffer, most = min(buffers), max(buffers)
        if 2 * buffer > most:
            return
        from robo_loaders_plugin.core.log import get_logger

        low = [name for name, b in zip(self.names, buffers) if b == buffer]
        get_logger(__name__).warning(
            f"warning: {self.setting}: each pass keeps {plural(buffer, 'unit')} open, the smallest "
            f"shuffle_buffer of its components ({some_of(low)}: {buffer}; the others up to {most}): any stretch of a "
            "pass mixes that few units (episodes, or parts of long ones), so its batches mix fewer episodes; give "
            "the backend more memory for them (cache_memory), or serve those components in a mixture of their own"
        )

    def locate(self, index: int) -> tuple[int, int]:
        """The (component, local index) of a global index.

        Args:
            index: In ``[0, len(self))``.

        Returns:
            ``(component, local index)``.

        Raises:
            IndexError: out of range.
        """
        comps, local = self._layout.split([index])
        return int(comps[0]), int(local[0])

    def close(self) -> None:
        """Close every component (``hooks.close_component``: each backend dataset's cache entry may then be pruned,
        its maps, memory and recycled arrays released) and the mixture's own recycled arrays. Idempotent; a read
        afterwards (``[i]``, :meth:`collate`, a pass) fails with one line naming the mixture.
        """
        if self._closed:
            return
        if self._processes is not None:
            self._processes.close()
            self._processes = None
        self.joined = None  # it holds the components' frame sources, closed below
        for dataset in self.datasets:
            self.hooks.close_component(dataset)
        super().close()

    def _check_open(self) -> None:
        if self._closed:
            raise RoboLoadersError(
                f"{self.setting}: the mixture of {len(self.names)} components ({some_of(self.names)}) was closed, "
                "and its components with it; build it again to read from it"
            )

    def __getitem__(self, index):
        self._check_open()
        k, i = self.locate(item_index(index, type(self).__name__))
        item = self.hooks.rename(self.hooks.item(self.datasets[k], i), self.renames[k], self.keep)
        item = self._complete(k, item, None)
        item[DATASET_INDEX] = self.hooks.dataset_index(np.array([k]), batch=False)
        return item

    def collate(self, indices, joined: bool = True) -> Any:
        """The batch of these global indices, in their order: built once over all components where the mixture
        set that up (:attr:`joined`), else each component's part built as its dataset builds a batch, renamed,
        padded and filled, then joined.

        Args:
            indices: Global indices.
            joined: ``False``: built part by part even where the joined batches are set up (the same batch: what
                tests and benchmarks compare the joined path with).

        Returns:
            The mixed batch, with ``dataset_index``.
        """
        self._check_open()
        comps, local = self._layout.split(indices)
        if joined and self.joined is not None and len(comps):
            batch = self.joined.collate(self.offsets[comps] + local, comps, self.buffer_pool)
        else:
            batch = self._per_component(comps, local)
        loop, self._sizing = self._sizing, None
        if loop is not None and len(comps):  # a pass's first batch: the pool bounded by its batches in flight
            row_bytes = -(-_array_bytes(batch) // len(comps))
            self.buffer_pool.bound(indexed_in_flight(row_bytes, loop).host_bytes)
        batch[DATASET_INDEX] = self.hooks.dataset_index(comps, batch=True)
        return batch

    def _per_component(self, comps: np.ndarray, local: np.ndarray) -> Any:
        """A batch built by the components' own datasets (without ``dataset_index``): item by item when they are
        the frameworks' own (:meth:`_by_items`) or when a component's items draw random numbers, else part by part
        (:meth:`_by_parts`).

        Why item by item where items draw random numbers (LeRobot's image transforms): the framework's loader
        draws them item by item in batch order; part by part, a batch mixing components gave the same draws to
        other items, so one seed trained on other augmentations than ``native``'s (a reviewer's reproduction:
        the second step's loss differed)."""
        if self._item_by_item is None:  # asked once (a getattr per component per batch: ~400 at 400 components)
            self._item_by_item = bool(self.datasets) and (
                not any(isinstance(d, IndexedDataset) for d in self.datasets)
                or any(self.hooks.draws_random(d) for d in self.datasets)
            )
        if self._item_by_item:
            return self._by_items(comps, local)
        return self._by_parts(comps, local)

    def _by_items(self, comps: np.ndarray, local: np.ndarray) -> Any:
        """A batch of the frameworks' own datasets (``native``) as their DataLoader builds one: each item renamed,
        padded and filled (as ``mix[i]``), then one collate of all of them.

        Why not part by part: their batches are their items collated anyway, and a collate per component plus the
        scatter of the parts cost ~12 ms a batch of 27 components, a third of a robomimic batch of 32 small windows
        (profiled: robomimic's 100-file mixture served 0.51x a hand-written ``ConcatDataset``, whose one collate
        cost 1.6 ms). The batch is the one built part by part, key for key (``tests``: both ways)."""
        items = []
        for k, i in zip(comps.tolist(), local.tolist()):
            item = self.hooks.rename(self.hooks.item(self.datasets[k], i), self.renames[k], self.keep)
            items.append(self._complete(k, item, None))
        return self.hooks.collate_items(items)

    def _by_parts(self, comps: np.ndarray, local: np.ndarray) -> Any:
        """A batch built part by part: each component's rows by its own dataset, renamed, padded and filled, then
        scattered into the mixed batch (without ``dataset_index``)."""
        parts, positions = [], []
        for k in np.unique(comps):
            sel = np.flatnonzero(comps == k)
            batch = self.hooks.component_batch(self.datasets[k], local[sel].tolist())
            parts.append(self._complete(k, self.hooks.rename(batch, self.renames[k], self.keep), len(sel)))
            positions.append(sel)
        batch = self.hooks.concat(parts, positions, len(comps), self.buffer_pool)
        del parts  # the components' arrays go back to the pool
        return batch

    def batch_threads(self, plan: SamplingPlan) -> int:
        """Threads building batches: the plan's worker budget, none when a component builds its batches on the
        training thread (GPU-resident data) or its items draw random numbers (:meth:`MixtureHooks.draws_random`).

        Args:
            plan: What the native loop would serve (its ``num_workers``).

        Returns:
            The thread count (0: the training thread).
        """
        if any(isinstance(d, ServedDataset) and d.serving.batch_threads == 0 for d in self.datasets):
            return 0
        if any(self.hooks.draws_random(d) for d in self.datasets):
            # no worker process asked for (:meth:`worker_processes`): the training thread, in order, as the
            # framework's own loader without workers; a thread would draw beside the training loop's own draws
            return 0
        return int(plan.num_workers)

    def worker_processes(self, plan: SamplingPlan) -> int:
        """Worker processes building batches: the plan's worker processes (the framework DataLoader's count) when
        every component is the framework's own dataset (``native``: Python item by item, GIL held, so threads would
        build one batch at a time), or when a component's items draw random numbers (:meth:`MixtureHooks.draws_random`:
        drawn in workers seeded from the run's seed, as the framework draws them, the same at every run of a seed;
        a component serving from the GPU builds none there), else 0 (the backends' batches are built by threads,
        ``batch_threads``).

        Args:
            plan: What the native loop would serve (its ``num_workers``).

        Returns:
            The process count (0: threads).
        """
        if not self.datasets:
            return 0
        served = [d for d in self.datasets if isinstance(d, ServedDataset)]
        if served and not any(self.hooks.draws_random(d) for d in self.datasets):
            return 0
        if any(d.serving.batch_threads == 0 for d in served):
            return 0
        asked = plan.num_workers if plan.worker_processes is None else plan.worker_processes
        return max(0, int(asked))

    def batch_source(self, plan: SamplingPlan) -> MixtureBatches:
        """The mixture's passes for a framework's plan (its seed when it gives one, else the dataset's).

        Args:
            plan: What the native loop would serve.

        Returns:
            The :class:`MixtureBatches`.
        """
        seed = self.seed if plan.seed is None else int(plan.seed)
        # the batches in flight as the footprints count them (core.in_flight: 2 ahead per thread + 1 held, which
        # MixtureBatches keeps), in bytes once the first batch is built: the most the pool keeps
        self._sizing = TrainingLoop(int(plan.batch_size), int(plan.num_workers))
        self.buffer_pool.round_rows = int(plan.batch_size)  # parts of any size share the batches' buffers
        workers = self.worker_processes(plan)
        how = (workers, plan.worker_context, plan.prefetch_factor)
        if workers and (self._processes is None or self._processes_how != how):
            if self._processes is not None:
                self._processes.close()
            self._processes = ProcessBatches(
                self.collate,
                workers,
                seed,
                prefetch_per_worker=plan.prefetch_factor or 2,
                context=plan.worker_context,
                worker_init=self.hooks.in_worker,
                before_start=functools.partial(self.hooks.before_workers, self.datasets),
            )
            self._processes_how = how
        return MixtureBatches(
            self.collate,
            self.order(seed, plan.shuffle),
            plan,
            self.batch_threads(plan),
            names=self.names,
            processes=self._processes if workers else None,
        )
