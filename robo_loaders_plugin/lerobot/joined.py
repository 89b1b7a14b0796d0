"""A LeRobot mixture's batches built once over all its components, not once per component (issue 44 item 2).

Why: a batch of a pretraining-shaped mixture draws from ~25 components, and building each component's part with its
own dataset's ``collate`` (its windows, its item rules, then renaming, padding, filling and scattering the part)
cost ~0.4 ms a part on top of its frame reads, ten times one dataset's batch at 10 components
(``benchmarks/mixture_batch_cost.py``). Here the components' episode runs are joined into one row map and one set of
``delta_timestamps`` windows, their frame sources behind one :class:`JoinedFrames` that maps each mixture key to the
component's own and pads or zero-fills as the mixture serves it; a batch is then LeRobot's item rules applied once
(``windows.lerobot.gathered``), with the masks, flags and ``task`` strings computed for all rows at once. The
components' frame sources (their caches, per component as before) are still read once per component and key group.

Used when every component is a backend's ``LeRobotSamples`` on the CPU without image transforms or rate conversion
and with the same windows (:meth:`JoinedBatches.of`); any other mixture keeps the per-component path
(``mixtures.dataset.MixtureDataset.collate``), which serves the same batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import psutil
import torch

from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource
from robo_loaders_plugin.lerobot.dataset import LeRobotSamples
from robo_loaders_plugin.mixtures.missing import missing_key
from robo_loaders_plugin.mixtures.padding import Padding, mask_key
from robo_loaders_plugin.windows import lerobot as rules

logger = get_logger(__name__)


# the most bytes the joined low-dim tables may hold (``JoinedFrames.keep_low_dim``), and the share of the memory
# available at the start they may take: a pretraining mixture's vectors and columns are ~150 bytes a row, so ~1.7
# million rows fit; beyond that each batch reads them from the components' frame sources as the cameras are
LOW_DIM_BYTES = 256 << 20
LOW_DIM_SHARE = 0.05


class JoinedFrames(FrameSource):
    """The components' frame sources as one: unit ``unit_offsets[k] + u`` is component ``k``'s unit ``u``, a field is
    the mixture's key (read as the component's own, ``fields[k]``), vectors padded with zeros to the mixture's width
    and a key a component lacks (a camera) served as zeros.

    The low-dim fields (columns, actions, states: not camera frames) may be kept in one table of every component's
    rows (:meth:`keep_low_dim`), read once through each component's own frame source (checked as every read of it
    is): a batch then reads each of them with one index over all components, where it read them with one call per
    component, ~30 us each, most of a small-frame mixture's batch (``benchmarks/mixture_batch_cost.py``).

    Args:
        sources: Each component's frame source.
        unit_lengths: Each component's units' steps (its dataset's ``rowmap.run_lengths``).
        fields: Per component, ``{mixture key: its own key}`` of the keys it serves.
        widths: ``{mixture key: (each component's width, the mixture's)}`` of the padded vectors.
    """

    def __init__(
        self,
        sources: Sequence[FrameSource],
        unit_lengths: Sequence[np.ndarray],
        fields: Sequence[Mapping[str, str]],
        widths: Mapping[str, tuple[Sequence[int], int]],
    ):
        self.sources = list(sources)
        self.unit_lengths = [np.asarray(n, dtype=np.int64) for n in unit_lengths]
        self.unit_offsets = np.concatenate([[0], np.cumsum([len(n) for n in self.unit_lengths])]).astype(np.int64)
        joined = np.concatenate(self.unit_lengths) if self.unit_lengths else np.zeros(0, np.int64)
        self.unit_rows = np.concatenate([[0], np.cumsum(joined)[:-1]]).astype(np.int64) if joined.size else joined
        self.rows = int(joined.sum())
        self.fields = [dict(f) for f in fields]
        self.widths = dict(widths)
        self._infos: dict[str, FieldInfo] = {}
        self.tables: dict[str, np.ndarray] = {}  # kept low-dim fields, one row per joined row (keep_low_dim)
        self.lengths = joined

    def low_dim_bytes(self, fields: Sequence[str]) -> int:
        """Bytes of the tables :meth:`keep_low_dim` would hold for ``fields`` (their low-dim ones), from metadata.

        Args:
            fields: Mixture keys.

        Returns:
            The bytes.
        """
        total = 0
        for f in fields:
            info = self.info(f)
            if not info.frames:
                total += self.rows * int(np.prod(info.shape, dtype=np.int64)) * info.dtype.itemsize
        return total

    def keep_low_dim(self, fields: Sequence[str]) -> list[str]:
        """Read the low-dim fields among ``fields`` of every component's rows into one table each (padded; zeros
        where a component lacks the field), in joined row order.

        Args:
            fields: Mixture keys.

        Returns:
            The fields kept.
        """
        kept = []
        for f in fields:
            info = self.info(f)
            if info.frames or f in self.tables:
                continue
            table = np.zeros((self.rows, *info.shape), dtype=info.dtype)
            for k, own in enumerate(self.fields):
                lengths = self.unit_lengths[k]
                if f not in own or not len(lengths):
                    continue
                units = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
                steps = np.arange(units.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
                value = self.sources[k].gather_fields([own[f]], units, steps)[own[f]]
                value = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
                first = int(self.unit_rows[self.unit_offsets[k]])
                rows = table[first : first + units.size]
                if f in self.widths:
                    rows[..., : value.shape[-1]] = value
                else:
                    rows[...] = value
            table.flags.writeable = False
            self.tables[f] = table
            kept.append(f)
        return kept

    def info(self, field: str) -> FieldInfo:
        """The mixture's field: the first component serving it says dtype and kind; a padded vector is the
        mixture's width.

        Args:
            field: A mixture key.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            KeyError: no component serves it.
        """
        info = self._infos.get(field)
        if info is None:
            k = next((k for k, f in enumerate(self.fields) if field in f), None)
            if k is None:
                raise KeyError(f"no component of the mixture serves {field!r}")
            own = self.sources[k].info(self.fields[k][field])
            shape = own.shape if field not in self.widths else (*own.shape[:-1], self.widths[field][1])
            info = self._infos[field] = FieldInfo(own.dtype, tuple(shape), own.frames)
        return info

    def take(self, field, episodes, steps, out) -> None:
        """``out[b, ...] = field[episodes[b]][steps[b, ...]]`` (through :meth:`gather_fields`).

        Args:
            field: A mixture key.
            episodes: (B,) joined unit indices.
            steps: (B,) or (B, T) steps.
            out: The destination.
        """
        out[...] = self.gather_fields([field], np.asarray(episodes), np.asarray(steps))[field]

    def gather_fields(self, fields, episodes: np.ndarray, steps: np.ndarray, pool=None) -> dict:
        """The fields at joined (unit, step) pairs: one ``gather_fields`` of each component's rows, written into
        the mixture's arrays (padding and missing keys as zeros).

        Args:
            fields: Mixture keys.
            episodes: (B,) joined unit indices.
            steps: (B,) or (B, T) integer steps.
            pool: Recycles the output arrays, or ``None``.

        Returns:
            ``{field: numpy array}``.
        """
        units = np.asarray(episodes, dtype=np.int64)
        out = {}
        read = [f for f in fields if f not in self.tables]
        if len(read) < len(fields):  # kept low-dim fields: one index over every component
            at = self.unit_rows[units].reshape(units.shape + (1,) * (steps.ndim - 1)) + steps
            for f in fields:
                if f in self.tables:
                    table = self.tables[f]
                    dest = pool.empty(at.shape + table.shape[1:], table.dtype) if pool is not None else None
                    out[f] = np.take(table, at, axis=0, out=dest)
            if not read:
                return out
            fields = read
        comp = np.searchsorted(self.unit_offsets, units, side="right") - 1
        for f in fields:
            info = self.info(f)
            shape = tuple(steps.shape) + tuple(info.shape)
            out[f] = pool.empty(shape, info.dtype) if pool is not None else np.empty(shape, info.dtype)
        for k in np.unique(comp).tolist():
            sel = np.flatnonzero(comp == k)
            own = self.fields[k]
            mine = [f for f in fields if f in own]
            values = (
                self.sources[k].gather_fields([own[f] for f in mine], units[sel] - self.unit_offsets[k], steps[sel])
                if mine
                else {}
            )
            for f in fields:
                dest = out[f]
                if f not in own:
                    dest[sel] = 0
                    continue
                value = values[own[f]]
                if isinstance(value, torch.Tensor):
                    value = value.numpy()
                if f in self.widths and self.widths[f][0][k] != self.widths[f][1]:
                    w = self.widths[f][0][k]
                    part = np.zeros((sel.size, *dest.shape[1:]), dest.dtype)
                    part[..., :w] = value
                    dest[sel] = part
                else:
                    dest[sel] = value
        return out


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
        self._keep_low_dim(columns)
        self.lacks = {cam: np.asarray([cam in m for m in missing], dtype=bool) for cam in self.cameras}

    def _keep_low_dim(self, columns: Sequence[str]) -> None:
        """Keep the low-dim columns in RAM (``JoinedFrames.keep_low_dim``) when they fit the budget, else say so."""
        need = self.frames.low_dim_bytes(columns)
        budget = min(LOW_DIM_BYTES, int(LOW_DIM_SHARE * psutil.virtual_memory().available))
        if need > budget:
            logger.info(
                f"mixture: the low-dim columns of {self.frames.rows} rows take {format_bytes(need)}, over the "
                f"{format_bytes(budget)} kept in memory; each batch reads them from every component it draws from"
            )
            return
        kept = self.frames.keep_low_dim(columns)
        logger.info(
            f"mixture: {len(kept)} low-dim columns of {self.frames.rows} rows kept in memory ({format_bytes(need)}), "
            "each read by one index per batch"
        )

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
        for cam in self.cameras:
            lacking = torch.from_numpy(self.lacks[cam][comps])
            pad = f"{cam}_is_pad"
            if pad in batch:
                batch[pad] = batch[pad] | lacking.reshape(-1, *([1] * (batch[pad].ndim - 1)))
            batch[missing_key(cam)] = lacking
        for key, own in self.own.items():
            size = self.padding.sizes[key]
            batch[mask_key(key)] = torch.from_numpy(np.arange(size)[None, :] < own[comps][:, None])
        task_index = row["task_index"].tolist()
        batch["task"] = [self.tasks[c][t] for c, t in zip(comps.tolist(), task_index)]
        return {k: batch[k] for k in self.keys}
