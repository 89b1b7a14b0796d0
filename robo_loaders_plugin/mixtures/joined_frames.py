"""The components' frame sources of a mixture as one frame source (issue 44 item 2), for the adapters' joined
batches (``lerobot.joined``, ``robomimic.joined``): a batch of a mixture is then built once over all components by
the framework's own item rules, not once per component.

Why a frame source: the item rules (``windows``) already turn a batch's indices into (unit, step) reads of one
source; joining the components' units behind one source lets those rules run once, and this source maps each
mixture field to the component's own, pads vectors to the mixture's width and zero-fills a field a component lacks
(a camera), where the per-component path renamed, padded, filled and scattered each component's part.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

import numpy as np
import psutil
import torch

from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource, part_offsets

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
    is; at the start, or, for a source that reads whole episode records, as batches first reach each episode):
    a batch then reads each of them with one index over all components, where it read them with one call per
    component, ~30 us each, most of a small-frame mixture's batch (``benchmarks/mixture_batch_cost.py``). A camera
    is read across all components in one call where their sources' class joins it (``FrameSource.join_field``: a
    store's class may lay out every component's frames once and decode a batch's in one loop, or copy held rows
    straight into the batch), else once per component.

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
        self.unit_offsets = part_offsets([len(n) for n in self.unit_lengths])
        joined = np.concatenate(self.unit_lengths) if self.unit_lengths else np.zeros(0, np.int64)
        self.unit_rows = np.concatenate([[0], np.cumsum(joined)[:-1]]).astype(np.int64) if joined.size else joined
        self.rows = int(joined.sum())
        self.fields = [dict(f) for f in fields]
        self.widths = dict(widths)
        self._infos: dict[str, FieldInfo] = {}
        self.tables: dict[str, np.ndarray] = {}  # kept low-dim fields, one row per joined row (keep_low_dim)
        # which joined units' rows the tables hold (None: all): a source that reads its low-dim rows as batches
        # reach its units (FrameSource.low_dim_up_front false) fills its units' rows at their first batch
        self._filled: np.ndarray | None = None
        self._fill_lock = threading.Lock()
        self._fill_pid = os.getpid()  # the process the lock was made in (:meth:`_lock`)
        self._joined: dict[tuple, tuple | None] = {}  # cameras read as one (_joined_cameras)
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
        """Keep the low-dim fields among ``fields`` of every component's rows in one table each (padded; zeros
        where a component lacks the field), in joined row order: read now from the components whose sources have
        their rows at hand (``FrameSource.low_dim_up_front``), from the others' units as batches first reach them
        (:meth:`gather_fields`).

        Args:
            fields: Mixture keys.

        Returns:
            The fields kept.
        """
        kept = [f for f in dict.fromkeys(fields) if f not in self.tables and not self.info(f).frames]
        tables = {f: np.zeros((self.rows, *self.info(f).shape), dtype=self.info(f).dtype) for f in kept}
        filled = np.ones(len(self.lengths), dtype=bool) if self._filled is None else self._filled.copy()
        for k, own in enumerate(self.fields):
            lengths = self.unit_lengths[k]
            mine = [f for f in kept if f in own]
            if not mine or not len(lengths):
                continue
            if not self.sources[k].low_dim_up_front:
                # its units' rows of every kept table, the earlier ones too, written at their first batch
                filled[self.unit_offsets[k] : self.unit_offsets[k] + len(lengths)] = False
                continue
            # every field of the component in one read of its units (a source reads a unit once for all fields)
            units = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            steps = np.arange(units.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            values = self.sources[k].gather_low_dim([own[f] for f in mine], units, steps)
            self._write_rows(tables, k, mine, values, int(self.unit_rows[self.unit_offsets[k]]))
        for f in kept:
            tables[f].setflags(write=False)  # a batch reads it; only a unit's first fill writes (_fill)
            self.tables[f] = tables[f]
        self._filled = None if filled.all() else filled
        return kept

    def pending_units(self) -> int:
        """Joined units whose rows the kept tables do not hold yet (written as batches first reach them).

        Returns:
            The count (0 when the tables hold every unit's rows).
        """
        return 0 if self._filled is None else int((~self._filled).sum())

    def _write_rows(self, tables: Mapping[str, np.ndarray], k: int, mine, values: Mapping, first: int) -> None:
        """Component ``k``'s values of the mixture fields ``mine`` (``values`` by its own keys) into ``tables``'
        rows from ``first`` on, padded vectors in their first entries."""
        own = self.fields[k]
        for f in mine:
            value = values[own[f]]
            value = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            rows = tables[f][first : first + len(value)]
            if f in self.widths:
                rows[..., : value.shape[-1]] = value
            else:
                rows[...] = value

    def _fill(self, units: np.ndarray) -> None:
        """Write the kept tables' rows of the joined ``units`` not yet filled (components whose sources read their
        low-dim rows as batches reach their units), each unit's once: read through the component's source
        (:meth:`FrameSource.low_dim_of_unit`: a unit a batch has loaded keeps them), written under a lock, then
        marked filled."""
        filled = self._filled
        if filled is None:
            return
        pending = units[~filled[units]]
        if not pending.size:
            return
        reads = []
        for u in np.unique(pending).tolist():
            k = int(np.searchsorted(self.unit_offsets, u, side="right") - 1)
            own = self.fields[k]
            mine = [f for f in self.tables if f in own]
            values = self.sources[k].low_dim_of_unit([own[f] for f in mine], u - int(self.unit_offsets[k]))
            reads.append((u, k, mine, values))
        with self._lock():
            tables = list(self.tables.values())
            for t in tables:
                t.setflags(write=True)
            try:
                for u, k, mine, values in reads:
                    if not filled[u]:  # else another thread filled it meanwhile (the same rows)
                        self._write_rows(self.tables, k, mine, values, int(self.unit_rows[u]))
                        filled[u] = True
            finally:
                for t in tables:
                    t.setflags(write=False)

    def _lock(self) -> threading.Lock:
        """The fills' lock; made anew in a process forked since it was made (a DataLoader's worker started by
        ``fork``): another thread may have held it at the fork, and the child's first fill would wait forever."""
        if self._fill_pid != os.getpid():
            self._fill_lock, self._fill_pid = threading.Lock(), os.getpid()
        return self._fill_lock

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
        """The fields at joined (unit, step) pairs, written into the mixture's arrays (padding and missing keys as
        zeros): kept low-dim fields by one index into their tables, a camera by one read across the components
        where their sources' class joins it (:meth:`FrameSource.join_field`), anything else by one
        ``gather_fields`` of each component's rows.

        Args:
            fields: Mixture keys.
            episodes: (B,) joined unit indices.
            steps: (B,) or (B, T) integer steps.
            pool: Recycles the output arrays, or ``None``.

        Returns:
            ``{field: numpy array}``.
        """
        units = np.asarray(episodes, dtype=np.int64)
        read = [f for f in fields if f not in self.tables]
        out = self._gather_read(read, units, steps, pool) if read else {}
        if len(read) < len(fields):  # kept low-dim fields: one index over every component
            self._fill(units)  # after the reads above: a unit they loaded keeps its low-dim fields
            at = self.unit_rows[units].reshape(units.shape + (1,) * (steps.ndim - 1)) + steps
            for f in fields:
                if f in self.tables:
                    table = self.tables[f]
                    dest = pool.empty(at.shape + table.shape[1:], table.dtype) if pool is not None else None
                    out[f] = np.take(table, at, axis=0, out=dest)
        return {f: out[f] for f in dict.fromkeys(fields)}

    def _gather_read(self, fields, units: np.ndarray, steps: np.ndarray, pool) -> dict:
        """The fields not kept in tables (:meth:`gather_fields`): the cameras by one joined read where their
        sources' class joins them (:meth:`_read_cameras`), the rest per component."""
        out: dict = {}
        comp = np.searchsorted(self.unit_offsets, units, side="right") - 1
        fields = self._read_cameras(fields, comp, units, steps, out, pool)
        if not fields:
            return out
        for f in fields:
            info = self.info(f)
            shape = tuple(steps.shape) + tuple(info.shape)
            out[f] = pool.empty(shape, info.dtype) if pool is not None else np.empty(shape, info.dtype)
        sels = {k: np.flatnonzero(comp == k) for k in np.unique(comp).tolist()}
        for k, sel in sels.items():
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

    def _read_cameras(self, fields, comp: np.ndarray, units, steps, out: dict, pool) -> list:
        """Read the cameras among ``fields`` that their sources' class joins into ``out``; the fields left.

        Cameras of one dtype and step shape are read together, in one joined read whose parts are every
        (component, camera) pair (:meth:`_joined_cameras`), into one array of which each camera's batch is a slice:
        a batch's frames are then located, checked and decoded in one pass whatever the number of cameras. Why: a
        joined read costs ~0.4 ms a call besides its frames (locating, ordering, a decoder and a layout buffer set
        up, frames put back in their layout), and a mixture whose components have one to three cameras serves
        three camera keys where each component holds fewer: read one camera at a time, one dataset of two cameras
        and the same frames built its batch in 0.71-0.74x the pretraining mixture's time, 0.89x read together
        (compressed stores, in process, 2026-12-07: docs/benchmarks.md, *A pretraining-shaped mixture*). A group
        its class declines is read one camera at a time.
        """
        groups: dict = {}
        for f in fields:
            info = self.info(f)
            if info.frames:
                groups.setdefault((np.dtype(info.dtype).str, tuple(info.shape)), []).append(f)
        done: set = set()
        for group in groups.values():
            tries = [tuple(group)] if len(group) == 1 else [tuple(group), *((f,) for f in group)]
            for cams in tries:
                if done.isdisjoint(cams) and self._read_joined(cams, comp, units, steps, out, pool):
                    done.update(cams)
        return [f for f in fields if f not in done]

    def _joined_cameras(self, cams: tuple):
        """``(reader, each camera's part of each component, or -1)`` of cameras ``cams`` read across all components
        as one (:meth:`FrameSource.join_field` over every (component, camera) pair, built at their first read in each
        process), or ``None`` where the components' sources decline or are of several classes."""
        if cams not in self._joined:
            pairs = [(c, k) for c in cams for k, own in enumerate(self.fields) if c in own]
            kinds = {type(self.sources[k]) for _, k in pairs}
            reader = None
            if len(kinds) == 1:
                reader = kinds.pop().join_field([(self.sources[k], self.fields[k][c]) for c, k in pairs])
            part = np.full((len(cams), len(self.sources)), -1, dtype=np.int64)
            for p, (c, k) in enumerate(pairs):
                part[cams.index(c), k] = p
            self._joined[cams] = None if reader is None else (reader, part)
        return self._joined[cams]

    def _read_joined(self, cams: tuple, comp: np.ndarray, units, steps, out: dict, pool) -> bool:
        """Cameras ``cams`` of every component read in one call into one array (:meth:`_joined_cameras`), camera
        ``i``'s batch its rows ``i * B`` to ``(i + 1) * B``, the rows of components without it zeros; ``False``:
        their sources' class declines."""
        joined = self._joined_cameras(cams)
        if joined is None:
            return False
        reader, part_of = joined
        info, n = self.info(cams[0]), comp.size
        shape = (len(cams) * n, *steps.shape[1:], *info.shape)
        stack = pool.empty(shape, info.dtype) if pool is not None else np.empty(shape, info.dtype)
        for i, c in enumerate(cams):
            out[c] = stack[i * n : (i + 1) * n]
        parts = part_of[:, comp].reshape(-1)  # row i * n + b: camera i of item b
        rows = np.flatnonzero(parts >= 0)
        if rows.size < parts.size:
            stack[parts < 0] = 0
        if rows.size:
            item = rows % n
            reader.take(parts[rows], units[item] - self.unit_offsets[comp[item]], steps[item], rows, stack)
        return True

    def __getstate__(self):  # the joined readers hold per-process views (mapped files): built again where used
        state = self.__dict__.copy()
        state["_joined"] = {}
        del state["_fill_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._fill_lock, self._fill_pid = threading.Lock(), os.getpid()
        if self._filled is None:
            return
        for f, table in self.tables.items():  # rows still to fill: each table must be writable again
            try:
                table.setflags(write=True)
            except ValueError:  # its memory is an immutable buffer (pickle protocol 5's read-only arrays)
                table = self.tables[f] = table.copy()
            table.setflags(write=False)


def keep_low_dim_within_budget(frames: JoinedFrames, fields: Sequence[str]) -> list[str]:
    """Keep the low-dim ``fields`` in memory (:meth:`JoinedFrames.keep_low_dim`) when they take at most
    :data:`LOW_DIM_BYTES` and :data:`LOW_DIM_SHARE` of the memory available now; one log line says which.

    Args:
        frames: The joined frame source.
        fields: Mixture fields (camera frames among them are left out).

    Returns:
        The fields kept (none over the budget).
    """
    need = frames.low_dim_bytes(fields)
    budget = min(LOW_DIM_BYTES, int(LOW_DIM_SHARE * psutil.virtual_memory().available))
    if need > budget:
        logger.info(
            f"mixture: the low-dim fields of {frames.rows} steps take {format_bytes(need)}, over the "
            f"{format_bytes(budget)} kept in memory; each batch reads them from every component it draws from"
        )
        return []
    kept = frames.keep_low_dim(fields)
    later = frames.pending_units()
    when = f"; {later} episodes' rows written as batches first reach them (their sources read whole records)"
    logger.info(
        f"mixture: {len(kept)} low-dim fields of {frames.rows} steps kept in memory ({format_bytes(need)}), each read "
        f"by one index per batch{when if later else ''}"
    )
    return kept
