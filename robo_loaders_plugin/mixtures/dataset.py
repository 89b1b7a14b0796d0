"""A mixture as one dataset the frameworks see: its components' datasets behind global indices, mixed batches.

Why the framework hooks: the components are built by the chosen backend exactly as a single dataset would be (the
framework's own dataset for ``native``), so their items and batches are in the framework's layout; only the
framework knows how its keys nest (robomimic's ``obs``/``next_obs``/``goal_obs``, LeRobot's flat keys), so renaming
and joining batches is a hook, and everything else (which component serves which position, the order, the rank
share, resuming) is here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from robo_loaders_plugin.core.iteration import BatchDataset, IndexedDataset, SamplingPlan, ServedDataset, Serving
from robo_loaders_plugin.mixtures.batches import MixtureBatches
from robo_loaders_plugin.mixtures.sampling import MixtureOrder

DATASET_INDEX = "dataset_index"  # the key every mixed item carries: its component's position in the mixture


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

    def concat(self, batches: list, order: np.ndarray | None) -> Any:
        """Join component batches into one, then put its items in ``order``.

        Args:
            batches: Renamed component batches with the same keys.
            order: ``result[j] = joined[order[j]]`` (``None``: as joined).

        Returns:
            The mixed batch.
        """
        return _concat(batches, None if order is None else torch.as_tensor(order))

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


def _concat(batches: list, order):
    first = batches[0]
    if isinstance(first, Mapping):
        return {k: _concat([b[k] for b in batches], order) for k in first}
    if isinstance(first, torch.Tensor):
        if len(batches) == 1:
            return first if order is None else first[order.to(first.device)]
        placed = _placed_on_cpu(batches, order)
        if placed is not None:
            return placed
        joined = torch.cat([b.to(first.device) for b in batches])
        return joined if order is None else joined[order.to(joined.device)]
    if isinstance(first, np.ndarray):
        if len(batches) == 1:
            return first if order is None else first[order.numpy()]
        out = np.empty((sum(len(b) for b in batches), *first.shape[1:]), dtype=np.result_type(*batches))
        _place(out, [np.asarray(b) for b in batches], order)
        return out
    if isinstance(first, (list, tuple)):
        joined_list = [x for b in batches for x in b]
        return joined_list if order is None else [joined_list[int(j)] for j in order]
    raise TypeError(f"cannot join batch values of type {type(first).__name__}")


def _placed_on_cpu(batches: list, order) -> torch.Tensor | None:
    """The joined, reordered batch written once into a fresh tensor through numpy, or ``None`` where that does not
    apply (a GPU tensor, a dtype numpy lacks such as bfloat16, a tensor needing grad, parts that differ in dtype or
    shape: torch's own path then joins them, or says why not).

    Why: ``torch.cat`` and then indexing copies a batch twice through torch's CPU kernels, about 10x slower than one
    numpy fancy-index assignment for camera frames (a BC-RNN batch of two 84x84 cameras over 10 steps: ~17 ms
    against ~1.5 ms per key on one core), which made a mixture's batches several times slower than the same
    backend's on one dataset.
    """
    first = batches[0]
    shape, dtype = first.shape[1:], first.dtype
    if any(b.device.type != "cpu" or b.requires_grad or b.dtype != dtype or b.shape[1:] != shape for b in batches):
        return None
    try:
        arrays = [b.numpy() for b in batches]
    except TypeError:  # a dtype numpy lacks
        return None
    out = torch.empty((sum(len(b) for b in batches), *shape), dtype=dtype)
    _place(out.numpy(), arrays, order)
    return out


def _place(out: np.ndarray, arrays: list, order) -> None:
    """``out[j] = joined[order[j]]`` for ``joined`` the rows of ``arrays`` in turn, without building ``joined``:
    each array's rows go straight to their positions (``order``'s inverse)."""
    if order is None:
        dest = np.arange(len(out))
    else:
        dest = np.empty(len(out), dtype=np.int64)
        dest[np.asarray(order)] = np.arange(len(out))
    start = 0
    for a in arrays:
        out[dest[start : start + len(a)]] = a
        start += len(a)


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

    Raises:
        ValueError: the lists differ in length, or a component has no window.
    """

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
    ):
        super().__init__(serving=serving)
        if not (len(datasets) == len(names) == len(renames)) or (weights is not None and len(weights) != len(names)):
            raise ValueError("a mixture needs one name, rename map (and weight) per component dataset")
        self.datasets, self.names = list(datasets), list(names)
        self.renames = [dict(r) for r in renames]
        self.keep, self.hooks = keep, hooks
        self.weights = None if weights is None else [float(w) for w in weights]
        self.seed = int(seed)
        self.sizes = [len(d) for d in self.datasets]
        self._layout = MixtureOrder(self.sizes, self.weights, self.seed)  # raises on an empty component
        self.offsets = self._layout.offsets

    def __len__(self) -> int:
        return self._layout.total

    def order(self, seed: int | None = None, shuffle: bool = True) -> MixtureOrder:
        """The pass order for a seed.

        Args:
            seed: The order seed (``None``: the dataset's).
            shuffle: Whether the order is drawn.

        Returns:
            The :class:`MixtureOrder`.
        """
        return MixtureOrder(self.sizes, self.weights, self.seed if seed is None else seed, shuffle)

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

    def __getitem__(self, index):
        k, i = self.locate(int(index))
        item = self.hooks.rename(self.hooks.item(self.datasets[k], i), self.renames[k], self.keep)
        item[DATASET_INDEX] = self.hooks.dataset_index(np.array([k]), batch=False)
        return item

    def collate(self, indices) -> Any:
        """The batch of these global indices, in their order: each component's part built as its dataset builds a
        batch, renamed, joined.

        Args:
            indices: Global indices.

        Returns:
            The mixed batch, with ``dataset_index``.
        """
        comps, local = self._layout.split(indices)
        parts, positions = [], []
        for k in np.unique(comps):
            sel = np.flatnonzero(comps == k)
            batch = self.hooks.component_batch(self.datasets[k], local[sel].tolist())
            parts.append(self.hooks.rename(batch, self.renames[k], self.keep))
            positions.append(sel)
        joined_at = np.concatenate(positions)
        order = None if (np.diff(joined_at) > 0).all() else np.argsort(joined_at, kind="stable")
        batch = self.hooks.concat(parts, order)
        batch[DATASET_INDEX] = self.hooks.dataset_index(comps, batch=True)
        return batch

    def batch_threads(self, plan: SamplingPlan) -> int:
        """Threads building batches: the plan's worker budget, none when a component builds its batches on the
        training thread (GPU-resident data).

        Args:
            plan: What the native loop would serve (its ``num_workers``).

        Returns:
            The thread count (0: the training thread).
        """
        if any(isinstance(d, ServedDataset) and d.serving.batch_threads == 0 for d in self.datasets):
            return 0
        return int(plan.num_workers)

    def batch_source(self, plan: SamplingPlan) -> MixtureBatches:
        """The mixture's passes for a framework's plan (its seed when it gives one, else the dataset's).

        Args:
            plan: What the native loop would serve.

        Returns:
            The :class:`MixtureBatches`.
        """
        seed = self.seed if plan.seed is None else int(plan.seed)
        return MixtureBatches(
            self.collate, self.order(seed, plan.shuffle), plan, self.batch_threads(plan), names=self.names
        )
