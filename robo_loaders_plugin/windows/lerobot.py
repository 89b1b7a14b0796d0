"""LeRobot 0.6.1 item semantics (``DatasetReader.get_item``) as index arrays (no LeRobot import).

An item of row ``i`` (a row of the possibly episode-filtered dataset) holds every tabular column at ``i``; with
``delta_timestamps``, each delta key holds the rows ``index + delta`` clamped into the episode, with
``<key>_is_pad`` True where the unclamped row falls outside it; each camera the frame of its (clamped) rows;
image transforms on every non-depth camera; and the ``task`` string, keys in LeRobot's order. Rows are addressed
in a frame source as (episode unit, step): :class:`RowMap`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch
import torch.utils.data

from robo_loaders_plugin.core.packed import pack_ints, unpack_ints
from robo_loaders_plugin.frames.base import FrameSource, frames_first, gather_at, gather_many


class RowMap:
    """Rows of the dataset as (unit, step) of a frame source whose units are episode runs in row order."""

    def __init__(self, run_lengths):
        lengths = np.asarray(run_lengths, dtype=np.int64)
        self.run_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        # int32: a million rows' run in 4 MB, not 8 (runs are far fewer than 2**31)
        self.run_of_row = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)

    def __len__(self) -> int:
        return len(self.run_of_row)

    @property
    def run_lengths(self) -> np.ndarray:
        """Rows of each run."""
        return np.diff(np.append(self.run_start, len(self.run_of_row)))

    @classmethod
    def joined(cls, rowmaps) -> RowMap:
        """Row maps one after the other: the runs of the first, then the second's, ... (a mixture's components).

        Args:
            rowmaps: The row maps, in order.

        Returns:
            The joined :class:`RowMap`.
        """
        return cls(np.concatenate([r.run_lengths for r in rowmaps]) if rowmaps else [])

    def __getstate__(self):
        """Pickled without ``run_of_row`` (rebuilt from the run starts where it is unpickled).

        Why: a spawned DataLoader worker receives the dataset through a pipe; a payload larger than the pipe's
        buffer blocks the parent until that worker has imported torch and LeRobot, so workers start one after the
        other; this array is 4 B per row of the payload (what it cost at 100k frames: docs/benchmarks.md,
        *Measurements behind the code*)."""
        return {"run_start": pack_ints(self.run_start), "rows": len(self.run_of_row)}

    def __setstate__(self, state):
        self.run_start = unpack_ints(state["run_start"])
        lengths = np.diff(np.concatenate([self.run_start, [state["rows"]]]))
        self.run_of_row = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)

    def locate(self, rows: np.ndarray, anchor: np.ndarray):
        """Where rows are in the frame source: the unit is the anchor's, so a window's rows (clamped into the anchor
        row's episode) are steps of one unit.

        Args:
            rows: Dataset rows (B,) or (B, T), possibly fractional, lying in the episode of ``anchor``.
            anchor: Integer dataset rows (B,), one per batch entry (the items' own rows).

        Returns:
            ``(units (B,), steps like rows)``: steps from each unit's first row (fractional where rows are).
        """
        unit = self.run_of_row[anchor]
        return unit, rows - self.run_start[unit].reshape(unit.shape + (1,) * (rows.ndim - 1))


class DeltaWindows:
    """``delta_timestamps`` windows over rows, each key's offsets in recorded steps: integers as LeRobot's
    ``delta_indices``, or fractional for offsets between recorded frames (rate conversion, ``windows.rates``).

    Built from one (absolute index, episode start, episode end) per row, or, with :meth:`of_runs`, from one per
    episode run: the same windows with 8 bytes per row instead of 24 (a million-frame dataset: 8 MB, not 24)."""

    def __init__(
        self,
        abs_index: np.ndarray,
        episode_from: np.ndarray,
        episode_to: np.ndarray,
        delta_steps: dict | None,
        ends: dict | None = None,
    ):
        self.abs_index = np.asarray(abs_index, dtype=np.int64)
        self.start, self.end = np.asarray(episode_from, np.int64), np.asarray(episode_to, np.int64)
        self._rowmap = None
        self._set_deltas(delta_steps, ends)

    @classmethod
    def of_runs(
        cls,
        rowmap: RowMap,
        first_index: np.ndarray,
        episode_from: np.ndarray,
        episode_to: np.ndarray,
        delta_steps: dict | None,
        ends: dict | None = None,
    ) -> DeltaWindows:
        """Windows over the rows of ``rowmap``'s runs: run ``u``'s first row has absolute index ``first_index[u]``,
        its episode spans absolute indices ``[episode_from[u], episode_to[u])``.

        Args:
            rowmap: The dataset's rows as runs (its ``run_of_row`` is shared, not copied).
            first_index: Absolute index of each run's first row.
            episode_from, episode_to: Each run's episode bounds, as absolute indices.
            delta_steps: Each delta key's offsets in recorded steps.
            ends: For keys read at other rows than their offsets (a transition's outcome when the rate is
                converted: :func:`transition_ends`), the integer offsets read; their pad masks still follow
                ``delta_steps``. ``None``: every key is read at its offsets.

        Returns:
            The windows, holding per-run arrays only."""
        self = cls.__new__(cls)
        self._rowmap = rowmap
        self._first = np.asarray(first_index, dtype=np.int64)
        self._from, self._to = np.asarray(episode_from, np.int64), np.asarray(episode_to, np.int64)
        self._set_deltas(delta_steps, ends)
        return self

    @classmethod
    def joined(cls, windows, delta_steps: dict) -> DeltaWindows:
        """Windows built with :meth:`of_runs`, one after the other (a mixture's components, their rows joined in
        order), with the given offsets.

        Why it holds: a window's rows are found relative to its own run's absolute indices and episode bounds, so
        runs of different datasets (each in its own absolute index space) can sit side by side.

        Args:
            windows: Each dataset's windows (built by :meth:`of_runs`).
            delta_steps: The offsets of the joined windows, by key.

        Returns:
            The joined windows.

        Raises:
            ValueError: a window was not built by :meth:`of_runs`.
        """
        if any(w._rowmap is None for w in windows):
            raise ValueError("only windows built per run (DeltaWindows.of_runs) can be joined")
        if any(w.ends for w in windows):
            raise ValueError("windows read at transition ends (a converted rate) are not joined")
        return cls.of_runs(
            RowMap.joined([w._rowmap for w in windows]),
            np.concatenate([w._first for w in windows]),
            np.concatenate([w._from for w in windows]),
            np.concatenate([w._to for w in windows]),
            delta_steps,
        )

    @property
    def per_run(self) -> bool:
        """Whether these windows hold per-run arrays (:meth:`of_runs`): the ones :meth:`joined` takes."""
        return self._rowmap is not None

    def __getstate__(self):
        """Pickled with its index arrays packed (``core.packed``: a spawned worker's payload stays under the pipe's
        buffer; per-run arrays at 10,000 episodes were 240 kB of it)."""
        arrays = {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray) and v.dtype.kind in "iu"}
        return {
            "packed": {k: pack_ints(v) for k, v in arrays.items()},
            "rest": {k: v for k, v in self.__dict__.items() if k not in arrays},
        }

    def _bounds(self, idx: np.ndarray):
        """(absolute index, episode start, episode end) of rows ``idx``."""
        if self._rowmap is None:
            return self.abs_index[idx], self.start[idx], self.end[idx]
        run = self._rowmap.run_of_row[idx]
        return self._first[run] + (idx - self._rowmap.run_start[run]), self._from[run], self._to[run]

    def _set_deltas(self, delta_steps: dict | None, ends: dict | None = None) -> None:
        self.deltas = {}
        for k, v in (delta_steps or {}).items():
            d = np.asarray(v, dtype=np.float64)
            near = np.rint(d)
            self.deltas[k] = near.astype(np.int64) if np.all(np.abs(d - near) < 1e-6) else d
        self.ends = {k: np.asarray(v, dtype=np.int64) for k, v in (ends or {}).items() if k in self.deltas}
        # keys with the same offsets share one rows array in locate() (gathered together): each key's first twin
        first: dict[bytes, str] = {}
        self.same_as = {
            k: first.setdefault(d.dtype.str.encode() + d.tobytes() + b"|" + self.ends.get(k, d[:0]).tobytes(), k)
            for k, d in self.deltas.items()
        }

    def __setstate__(self, state):
        self.__dict__.update(state["rest"])
        self.__dict__.update({k: unpack_ints(v) for k, v in state["packed"].items()})

    def locate(self, idx: np.ndarray):
        """The delta keys' window rows of items ``idx``, as LeRobot's ``get_item`` computes them: rows clamped into
        the episode, and a pad mask where the unclamped row falls outside it.

        Args:
            idx: Dataset rows (B,), non-negative.

        Returns:
            ``({key: rows (B, T)}, {"<key>_is_pad": bool (B, T)})``; keys with the same offsets share one rows
            array (they are gathered together), each its own pad mask; rows are fractional for fractional offsets
            (then the pad mask allows 1e-6 of rounding).
        """
        rows, padding = {}, {}
        abs_idx, start, end = (a[:, None] for a in self._bounds(idx))
        for key, deltas in self.deltas.items():
            same = self.same_as[key]
            if same != key:
                rows[key], padding[f"{key}_is_pad"] = rows[same], padding[f"{same}_is_pad"].copy()
                continue
            target = abs_idx + deltas[None, :]
            if deltas.dtype.kind == "f":
                padding[f"{key}_is_pad"] = (target < start - 1e-6) | (target > end - 1 + 1e-6)
            else:
                padding[f"{key}_is_pad"] = (target < start) | (target >= end)
            read = target if key not in self.ends else abs_idx + self.ends[key][None, :]
            rows[key] = idx[:, None] + (np.clip(read, start, end - 1) - abs_idx)  # an episode's rows are contiguous
        return rows, padding


# LeRobot's keys that hold what a transition from a frame to the next one ended with (``next.reward``,
# ``next.done``, ``next.success``): at a converted rate, read at the last recorded step the transition covers
TRANSITION_PREFIX = "next."


def transition_ends(delta_indices: dict, rate: float) -> dict[str, np.ndarray]:
    """The rows a transition's outcome (``next.*`` keys) is read at when windows are served at another rate: for the
    policy's step ``i`` (recorded offset ``i * rate``), the last recorded step the transition to step ``i + 1``
    covers, ``ceil((i + 1) * rate) - 1``, as robomimic's ``rewards`` and ``dones`` are read
    (``windows.robomimic.SequenceWindows.transition_ends``).

    Why: read at the step's own recorded offset, ``next.reward`` was the reward of the first recorded step of the
    transition, not of the one reaching the next target step (``rate - 1`` recorded steps behind), and an episode's
    last ``next.done`` was never served when its length was not a multiple of the rate (a reviewer's reproduction);
    a fractional offset blended a sparse reward (0.5 for a 0/1 reward).

    Args:
        delta_indices: The policy's windows in its own steps (LeRobot's ``delta_indices``).
        rate: Recorded steps per policy step (recorded fps / target fps).

    Returns:
        ``{key: int64 offsets}`` for the windowed ``next.*`` keys (``DeltaWindows.of_runs``'s ``ends``).
    """
    return {
        k: np.ceil((np.asarray(v, dtype=np.float64) + 1) * float(rate) - 1e-6).astype(np.int64) - 1
        for k, v in delta_indices.items()
        if k.startswith(TRANSITION_PREFIX)
    }


@dataclasses.dataclass
class ItemLayout:
    """What a LeRobot item holds, read off the native dataset once by the adapter."""

    columns: list  # tabular columns in the HF dataset's order (PNG image columns included)
    video_keys: list
    image_keys: list  # PNG columns: served as float32 in [0, 1], as torchvision's ToTensor does
    camera_keys: list  # non-depth cameras: image transforms apply to these
    tasks: list  # task string by task_index
    return_uint8: bool
    image_transforms: Callable | None = None
    modes: dict | None = None  # how each delta key is read between recorded frames (fractional offsets only)


def _tensor(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


def gathered(
    layout: ItemLayout, frames: FrameSource, rowmap: RowMap, windows: DeltaWindows, idx: np.ndarray, pool=None
):
    """(columns at the rows, delta keys at their window rows, cameras, pad masks); arrays recycled from ``pool`` (a
    ``storage.buffers.BufferPool``) when given. What :func:`items` and :func:`collate` are built from (and a joined
    mixture's batches, ``lerobot.joined``).

    Keys read at the same rows are gathered in one call (:func:`~robo_loaders_plugin.frames.base.gather_many`):
    every tabular column at the items' rows, and delta keys with the same offsets (a camera and
    ``observation.state``) at their shared window. A delta key's column is read once, at its window: the item's
    value at its own row is replaced by the window in LeRobot's item, so it takes that place in ``columns``.

    Args:
        layout: What an item holds.
        frames: The frame source every field is read from.
        rowmap: The dataset's rows as (unit, step) of ``frames``.
        windows: The ``delta_timestamps`` windows.
        idx: Dataset rows (B,).
        pool: Recycles the gathered arrays, or ``None``.

    Returns:
        ``(row, query, cams, padding)``: ``{column: (B, ...) tensor}``, ``{delta key: (B, T, ...)}``,
        ``{camera: (B, T, C, H, W) or (B, 1, C, H, W)}`` and ``{"<key>_is_pad": (B, T) bool}``.
    """
    query_rows, padding = windows.locate(idx)
    groups: dict[int, tuple[np.ndarray, list]] = {}
    for key in layout.columns:
        if key not in query_rows:
            groups.setdefault(id(idx), (idx, []))[1].append(key)
    for key, rows in query_rows.items():
        groups.setdefault(id(rows), (rows, []))[1].append(key)
    plain = idx[:, None]  # cameras without a window: one frame each
    for key in layout.video_keys:
        if key not in query_rows:
            groups.setdefault(id(plain), (plain, []))[1].append(key)
    values = {}
    for rows, keys in frames_first(frames, list(groups.values())):
        unit, steps = rowmap.locate(rows, idx)
        if steps.dtype.kind == "f":
            for key in keys:
                values[key] = _tensor(gather_at(frames, key, unit, steps, layout.modes[key], pool))
        else:
            values.update((k, _tensor(v)) for k, v in gather_many(frames, keys, unit, steps, pool).items())
    for key in layout.image_keys:
        if key in values:
            values[key] = values[key].to(dtype=torch.float32).div(255)
    row = {name: values[name] for name in layout.columns}
    query = {key: values[key] for key in query_rows if key not in layout.video_keys}
    cams = {}
    for key in layout.video_keys:
        t = values[key]
        cams[key] = t if layout.return_uint8 else t.type(torch.float32) / 255
    device = next(iter(row.values())).device if row else None
    padding = {k: torch.from_numpy(v).to(device) for k, v in padding.items()}
    return row, query, cams, padding


def items(layout: ItemLayout, frames: FrameSource, rowmap: RowMap, windows: DeltaWindows, idx: np.ndarray) -> list:
    """The items ``LeRobotDataset[i]`` returns for rows ``idx`` (checked, non-negative), built a batch at a time:
    one gather per key, then split into items.

    Args:
        layout: What an item holds.
        frames: The frame source every field is read from.
        rowmap: The dataset's rows as (unit, step) of ``frames``.
        windows: The ``delta_timestamps`` windows.
        idx: Dataset rows (B,).

    Returns:
        B dicts, as ``LeRobotDataset[i]``: the columns, the pad masks and delta keys when there are windows, the
        cameras (image transforms applied), and ``task``.
    """
    row, query, cams, padding = gathered(layout, frames, rowmap, windows, idx)
    out = []
    for b in range(len(idx)):
        item = {k: v[b] for k, v in row.items()}
        if windows.deltas:
            item = {**item, **{k: v[b] for k, v in padding.items()}}
            for key, val in query.items():
                item[key] = val[b]
        if cams:
            item = {**{k: v[b].squeeze(0) for k, v in cams.items()}, **item}
        if layout.image_transforms is not None:
            for cam in layout.camera_keys:
                item[cam] = layout.image_transforms(item[cam])
        item["task"] = layout.tasks[int(item["task_index"])]
        out.append(item)
    return out


def collate(
    layout: ItemLayout, frames: FrameSource, rowmap: RowMap, windows: DeltaWindows, idx: np.ndarray, pool=None
) -> dict:
    """The batch torch's DataLoader would hand ``lerobot-train`` for rows ``idx``: built from the gathered arrays
    directly, in the keys and layout ``default_collate`` gives the items (image transforms, which apply per item,
    go through the items).

    Args:
        layout: What an item holds.
        frames: The frame source every field is read from.
        rowmap: The dataset's rows as (unit, step) of ``frames``.
        windows: The ``delta_timestamps`` windows.
        idx: Dataset rows (B,).
        pool: Recycles the gathered arrays (a ``storage.buffers.BufferPool``; ``None``: new arrays); unused with
            image transforms.

    Returns:
        ``{key: batched tensor}``, and ``task`` as a list of B strings.
    """
    if layout.image_transforms is not None:
        return torch.utils.data.default_collate(items(layout, frames, rowmap, windows, idx))
    row, query, cams, padding = gathered(layout, frames, rowmap, windows, idx, pool)
    batch = {k: v.squeeze(1) if v.ndim > 1 and v.shape[1] == 1 else v for k, v in cams.items()}
    batch.update(row)
    if windows.deltas:
        batch.update(padding)
        batch.update(query)
    batch["task"] = [layout.tasks[t] for t in row["task_index"].tolist()]
    return batch
