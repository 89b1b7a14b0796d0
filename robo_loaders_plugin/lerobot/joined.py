"""A LeRobot mixture's batches built once over all its components, not once per component (issue 44 item 2).

Why: a batch of a pretraining-shaped mixture draws from ~25 components, and building each component's part with its
own dataset's ``collate`` (its windows, its item rules, then renaming, padding, filling and scattering the part)
cost ~0.4 ms a part on top of its frame reads, ten times one dataset's batch at 10 components
(``benchmarks/mixture_batch_cost.py``). Here the components' episode runs are joined into one row map and one set of
``delta_timestamps`` windows, their frame sources behind one ``mixtures.joined_frames.JoinedFrames`` that maps each
mixture key to the component's own and pads or zero-fills as the mixture serves it; a batch is then LeRobot's item
rules applied once (``windows.lerobot.gathered``), with the masks, flags and ``task`` strings computed for all rows
at once. The components' frame sources (their caches, per component as before) are still read once per component
and key group.

Used when every component is a backend's ``LeRobotSamples`` on the CPU without image transforms or rate conversion
and with the same windows (:meth:`JoinedBatches.of`); any other mixture keeps the per-component path
(``mixtures.dataset.MixtureDataset.collate``), which serves the same batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.mixtures.joined_frames import JoinedFrames, keep_low_dim_within_budget
from robo_loaders_plugin.mixtures.missing import missing_key
from robo_loaders_plugin.mixtures.padding import Padding, mask_key
from robo_loaders_plugin.windows import lerobot as rules


class JoinedBatches:
    """A LeRobot mixture's batches, built once over all components (module docstring).

    Args:
        datasets: The components' ``LeRobotSamples``.
        renames: Each component's ``{its key: mixture key}``.
        keys: The keys of a mixed batch, in order (``dataset_index`` excluded).
        padding: The mixture's padded vectors.
        cameras: The cameras served with zeros where a component lacks them.
        missing: Per component, the cameras it lacks.
        deltas: The joined ``delta_timestamps`` offsets, by mixture key.
    """

    def __init__(
        self,
        datasets: Sequence[LeRobotSamples],
        renames: Sequence[Mapping[str, str]],
        keys: Sequence[str],
        padding: Padding,
        cameras: Sequence[str],
        missing: Sequence[Sequence[str]],
        deltas: Mapping[str, np.ndarray],
    ):
        self.keys = list(keys)
        self.padding = padding
        self.cameras = list(cameras)
        wanted = set(self.keys) | {"task_index"}  # task_index: each row's task string is looked up by it
        fields, columns, video, images = [], [], [], []
        for d, rename in zip(datasets, renames):
            lay = d.layout
            mine = {rename.get(c, c): c for c in (*lay.columns, *lay.video_keys)}
            fields.append({m: c for m, c in mine.items() if m in wanted})
            for own, into in ((lay.columns, columns), (lay.video_keys, video), (lay.image_keys, images)):
                for c in own:
                    m = rename.get(c, c)
                    if m in wanted and m not in into:
                        into.append(m)
        self.layout = rules.ItemLayout(
            columns=columns,
            video_keys=video,
            image_keys=images,
            camera_keys=[],  # no image transforms (of)
            tasks=[],  # per component: self.tasks
            return_uint8=datasets[0].layout.return_uint8,
        )
        self.tasks = [d.layout.tasks for d in datasets]
        # every component's tasks as ids into one list of the distinct strings (task_ids[task_base[k] + t]): a
        # batch's strings are then looked up in one short list, not in each drawn component's own
        self._task_names = list(dict.fromkeys(t for tasks in self.tasks for t in tasks))
        ids = {t: i for i, t in enumerate(self._task_names)}
        self._task_ids = np.asarray([ids[t] for tasks in self.tasks for t in tasks], dtype=np.int64)
        self._task_count = np.asarray([len(t) for t in self.tasks], dtype=np.int64)
        self._task_base = np.concatenate([[0], np.cumsum(self._task_count)[:-1]]).astype(np.int64)
        n = len(datasets)
        widths = {key: ([int(padding.own[k][key]) for k in range(n)], int(size)) for key, size in padding.sizes.items()}
        self.frames = JoinedFrames(
            [d.frames for d in datasets], [d.rowmap.run_lengths for d in datasets], fields, widths
        )
        self.rowmap = rules.RowMap.joined([d.rowmap for d in datasets])
        self.windows = rules.DeltaWindows.joined(
            [d.windows for d in datasets], {k: v for k, v in deltas.items() if k in wanted}
        )
        self.own = {key: np.asarray(own) for key, (own, _) in widths.items()}
        self._masks: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key -> (own, its table): :meth:`_mask_table`
        keep_low_dim_within_budget(self.frames, columns)
        # (cameras, components): whether component k lacks camera i, read for a batch's rows by one index
        self.lacks = np.asarray([[cam in m for m in missing] for cam in self.cameras], dtype=bool).reshape(
            len(self.cameras), n
        )
        self._flag_keys = [(f"{cam}_is_pad", missing_key(cam)) for cam in self.cameras]

    def _task_strings(self, comps: np.ndarray, task_index: np.ndarray) -> list[str]:
        """Each row's task string: component ``comps[b]``'s task ``task_index[b]``.

        Raises:
            IndexError: a row's ``task_index`` is not one of its component's tasks. LeRobot's item raises past
                the end but reads -1 as the last task (``meta.tasks.iloc``); here neither is served as another
                task (one dataset's ``windows.lerobot`` items still index ``layout.tasks`` as LeRobot does).
        """
        bad = (task_index < 0) | (task_index >= self._task_count[comps])
        if bad.any():
            b = int(np.flatnonzero(bad)[0])
            k = int(comps[b])
            raise IndexError(
                f"component {k}: task_index {int(task_index[b])} outside its {int(self._task_count[k])} tasks "
                "(meta/tasks.parquet): the data and its metadata disagree"
            )
        ids = self._task_ids[self._task_base[comps] + task_index]
        return list(map(self._task_names.__getitem__, ids.tolist()))

    def _mask_table(self, key: str) -> np.ndarray:
        """``key``'s mask of every component, ``(components, padded size)``: row ``k`` marks component ``k``'s real
        entries; a batch's masks are its rows, one index. Why tables (these, :attr:`lacks` and the task ids): built
        per batch from each row's component, the masks, flags and task strings took ~7, ~13 and ~24 us of a batch
        that one dataset of the same frames serves in ~350 us, the task strings most, each looked up in its drawn
        component's own list (in process, 400 pretraining components, 2026-12-07). Built again when :attr:`own` is
        given another array."""
        own = self.own[key]
        kept = self._masks.get(key)
        if kept is None or kept[0] is not own:
            table = np.arange(int(self.padding.sizes[key]))[None, :] < own[:, None]
            kept = self._masks[key] = (own, table)
        return kept[1]

    @staticmethod
    def joinable(mixture) -> dict[str, np.ndarray] | None:
        """Whether a LeRobot mixture's batches can be joined (no row is read), and with which windows.

        Args:
            mixture: The ``LeRobotMixture``.

        Returns:
            The joined ``delta_timestamps`` offsets by mixture key, or ``None`` where its components need the
            per-component path: a component is not a ``LeRobotSamples`` (``native``), serves on a GPU, applies
            image transforms, converts rates, or has other offsets for a key than another component.
        """
        datasets = mixture.datasets
        if not datasets or not all(isinstance(d, LeRobotSamples) for d in datasets):
            return None
        if any(
            d.serving.batch_threads == 0 or d.layout.image_transforms is not None or d.layout.modes for d in datasets
        ):
            return None
        if len({d.layout.return_uint8 for d in datasets}) != 1 or not all(d.windows.per_run for d in datasets):
            return None
        deltas: dict[str, np.ndarray] = {}
        for d, rename in zip(datasets, mixture.renames):
            for key, v in d.windows.deltas.items():
                m = rename.get(key, key)
                if v.dtype.kind != "i" or (m in deltas and not np.array_equal(deltas[m], v)):
                    return None
                deltas[m] = v
        return deltas

    @classmethod
    def of(cls, mixture, keys: Sequence[str]) -> JoinedBatches | None:
        """The joined batches of a LeRobot mixture, or ``None`` where it is not :meth:`joinable`.

        Args:
            mixture: The ``LeRobotMixture`` (its components, renames, padding, cameras and what each lacks).
            keys: The keys of its batches, in order, as the per-component path builds them.

        Returns:
            :class:`JoinedBatches`, or ``None``.
        """
        deltas = cls.joinable(mixture)
        if deltas is None:
            return None
        return cls(mixture.datasets, mixture.renames, keys, mixture.padding, mixture.cameras, mixture.missing, deltas)

    def collate(self, indices: np.ndarray, comps: np.ndarray, pool=None) -> dict:
        """The mixed batch of these global rows (``MixtureDataset.collate``'s, without ``dataset_index``).

        Args:
            indices: Global row indices (the joined rows: component ``k``'s row ``i`` is ``offsets[k] + i``).
            comps: Each row's component.
            pool: Recycles the gathered arrays.

        Returns:
            The batch, keys in :attr:`keys`' order.
        """
        idx = np.asarray(indices, dtype=np.int64)
        row, query, cams, padding = rules.gathered(self.layout, self.frames, self.rowmap, self.windows, idx, pool)
        batch = {k: v.squeeze(1) if v.ndim > 1 and v.shape[1] == 1 else v for k, v in cams.items()}
        batch.update(row)
        batch.update(padding)
        batch.update(query)
        for i, (pad, flag) in enumerate(self._flag_keys):
            lacking = torch.from_numpy(self.lacks[i][comps])
            if pad in batch:
                batch[pad] = batch[pad] | lacking.reshape(-1, *([1] * (batch[pad].ndim - 1)))
            batch[flag] = lacking
        for key in self.own:
            batch[mask_key(key)] = torch.from_numpy(self._mask_table(key)[comps])
        batch["task"] = self._task_strings(comps, row["task_index"].numpy())
        return {k: batch[k] for k in self.keys}
