"""Frames from a compressed episode store (``episode_store``): one file mapped by every process.

Raw (low-dim) fields are read where they lie in the mapped file, a batch of windows with one fancy index over a
rows view of it (no per-process copy of every episode's rows); camera frames are decompressed straight into the
output array (frames stored channels last through a scratch of a few frames, put back as served while copied:
``storage.frame_layout``), and a repeated step in a window (padding repeats the first/last step) is copied from its
neighbour instead of decoded again.

Every read is checked against the store's checksums after it is copied or decoded (a frame per blob, raw rows per
block of about 4 kB): bytes of the mapped file that change while the run reads it are a ``StoreError`` naming the
file, episode, field and frame or steps, never wrong data (``episode_store``).
"""

from __future__ import annotations

import numpy as np

from robo_loaders_plugin.backends.compressed_cache.episode_store import (
    EpisodeStore,
    StoreError,
    check_blobs_across,
    decode_across,
)
from robo_loaders_plugin.frames.base import (
    FieldInfo,
    FrameSource,
    JoinedField,
    broadcast_episodes,
    part_offsets,
    step_slots,
)
from robo_loaders_plugin.storage import frame_layout
from robo_loaders_plugin.storage.codec import FrameCodec


class CompressedFrames(FrameSource):
    """A frame source over a compressed episode store (see the module's docstring).

    Pickled (DataLoader workers), it keeps the store and its hold; the lookup tables are rebuilt lazily in each
    process.

    Args:
        store: The opened store.
        hold: Keeps a RAM-only store file alive (a cache entry in use) as long as this source lives (``None``:
            nothing to keep).
    """

    def __init__(self, store: EpisodeStore, hold=None):
        self.store = store
        self.hold = hold  # keeps a RAM-only store file alive (and a cache entry in use) as long as this source lives
        self.lengths = np.array([e["length"] for e in store.episodes], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self._infos: dict[str, FieldInfo] = {}
        self._flat: dict[str, np.ndarray] = {}  # raw fields: each episode's byte offset of the field
        self._rows: dict[str, tuple] = {}  # raw fields: (rows view of the mapped file, each episode's first element)
        self._bounds: dict[str, tuple] = {}
        self._blocks: dict[str, tuple] = {}  # raw fields: the store's checked blocks (EpisodeStore.raw_blocks)

    def __getstate__(self):  # per-process lookup tables are rebuilt lazily, not shipped to workers
        return {"store": self.store, "hold": self.hold}

    def __setstate__(self, state):
        CompressedFrames.__init__(self, state["store"], state["hold"])

    def close(self) -> None:
        """Drop the lookup tables (views of the mapped file) and unmap the store now; the hold is the dataset's
        to release."""
        self._infos, self._flat, self._rows, self._bounds, self._blocks = {}, {}, {}, {}, {}
        self.store.close()

    def info(self, field: str) -> FieldInfo:
        """dtype and per-step shape of ``field``, checked the same in every episode (first call per field).

        Args:
            field: The field's name.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            StoreError: two episodes store the field with another dtype or step shape.
        """
        info = self._infos.get(field)
        if info is None:
            first = self.store.frame_info(0, field)
            # one dtype and step shape per field, or samples would differ (read off the header's dicts: the store's
            # per-episode accessors cost ~2 us a call, a second per field of a 10,000-episode store in each process)
            descs = [e["fields"].get(field) for e in self.store.episodes]
            for ep, d in enumerate(descs):
                if (
                    d is None
                    or d["dtype"] != descs[0]["dtype"]
                    or d["shape"][1:] != descs[0]["shape"][1:]
                    or d.get("layout") != descs[0].get("layout")
                ):
                    other = self.store.frame_info(ep, field)  # raises naming the episode when the field is absent
                    raise StoreError(
                        f"{self.store.path}: {self.store.episodes[ep]['name']}/{field} is "
                        f"{other[:2]}, layout {d.get('layout')} but {self.store.episodes[0]['name']}/{field} is "
                        f"{first[:2]}, layout {descs[0].get('layout')} (dtype, shape, stored layout); every "
                        "episode must store a field the same way"
                    )
            info = self._infos[field] = FieldInfo(*first)
        return info

    def _raw_starts(self, field: str) -> np.ndarray:
        """Each episode's byte offset of ``field`` in the mapped file (once per process and field), checked to lie
        on an element boundary.

        Why offsets and not the field concatenated: a concatenation copied every episode's rows in every process
        (the main one and each DataLoader worker) before its first batch, touching a page of the file per episode
        and field: seconds at a million frames. A batch reads its rows where they are instead."""
        starts = self._flat.get(field)
        if starts is None:
            k = self.info(field).dtype.itemsize  # one dtype and step shape in every episode, or a clear error
            starts = np.fromiter(
                (e["fields"][field]["offset"] for e in self.store.episodes),
                dtype=np.int64,
                count=len(self.store.episodes),
            )
            if np.any(starts % k):  # the writer aligns raw arrays to 64 bytes: a file not written so is refused
                raise StoreError(f"{self.store.path}: {field}: raw rows not aligned to their {k}-byte elements")
            self._flat[field] = starts
        return starts

    def _raw_rows(self, field: str, info: FieldInfo, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The mapped file seen as rows of ``field`` starting at every element (a sliding-window view: no copy),
        and each episode's first element: a batch's rows are then one fancy index along the first axis.

        Raw arrays are 64-byte aligned in the store, so every episode's rows start on an element boundary."""
        cached = self._rows.get(field)
        if cached is None:
            starts = self._raw_starts(field)
            k = info.dtype.itemsize
            buf = self.store._buf
            typed = buf[: len(buf) // k * k].view(info.dtype)
            rows = typed if n == 1 else np.lib.stride_tricks.sliding_window_view(typed, n)
            cached = self._rows[field] = (rows, starts // k)
        return cached

    def take(self, field, episodes, steps, out):
        """``out[b, ...] = field[episodes[b]][steps[b, ...]]``.

        Raw fields: their rows indexed out of the mapped file in one step. Frames: decompressed straight into
        ``out``, each step once per row; a step repeating the one before it in the row (padding) is copied instead.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            out: The destination, ``steps.shape + step shape``, C-contiguous.

        Raises:
            StoreError: what was read does not match the store's checksums (the file changed after it was built);
                the message names the file, the episode, the field and the frame or steps.
        """
        info = self.info(field)
        if not info.frames:
            ep = broadcast_episodes(episodes, steps)
            n = int(np.prod(info.shape, dtype=np.int64))
            rows, first = self._raw_rows(field, info, n)
            at = (first[ep] + steps * n).reshape(-1)
            # fancy indexing, not np.take: take would first copy a strided view whole
            out.reshape((at.size,) + rows.shape[1:])[...] = rows[at]
            self._check_rows(field, np.asarray(episodes).reshape(-1), steps)
            return
        flat_out = out.reshape((-1,) + tuple(info.shape))
        starts, ends, _, _, sums, stored = self._frames_layout(field)
        fresh, todo, blobs = self._fresh_blobs(field, np.asarray(episodes), steps)
        self.store.decode_frames(
            starts[blobs].tolist(),
            ends[blobs].tolist(),
            flat_out,
            todo.tolist(),
            sums=sums[blobs].tolist(),
            frames=blobs,
            key=field,
            layout=stored,
        )
        _repeat_padding(flat_out, fresh, None)

    def _frames_layout(self, field: str) -> tuple:
        """Where a frames field's blobs are (located at its first read; each blob checked before its first decode,
        not all at open): ``(starts, ends, decoded sizes, checked flags, checksums, stored layout)``."""
        layout = self._bounds.get(field)
        if layout is None:
            starts, ends, expected = self.store.blob_layout(field)
            layout = self._bounds[field] = (
                starts,
                ends,
                expected,
                np.zeros(len(starts), dtype=bool),
                self.store.frame_sums(field),
                self.store.frame_layout(0, field),  # the same in every episode (info)
            )
        return layout

    def _fresh_blobs(self, field: str, episodes: np.ndarray, steps: np.ndarray) -> tuple:
        """Which steps of a read decode a blob: ``(fresh, positions of the fresh steps, their blobs)``; a step
        repeating the one before it in its row (padding) is copied after decoding instead. Blobs not read before are
        checked here (``EpisodeStore.check_blobs``)."""
        starts, ends, expected, checked, sums, _ = self._frames_layout(field)
        base = self.starts[episodes]
        g = (base.reshape(base.shape + (1,) * (steps.ndim - 1)) + steps).reshape(-1)
        fresh = _fresh(g, steps.shape[-1] if steps.ndim > 1 else 1)
        todo = fresh.nonzero()[0]
        blobs = g[todo]
        new = blobs[~checked[blobs]]
        if new.size:
            self.store.check_blobs(field, starts[new], ends[new], expected[new], frames=new, sums=sums[new])
            checked[new] = True
        return fresh, todo, blobs

    @classmethod
    def join_field(cls, parts) -> JoinedStores | None:
        """See :meth:`FrameSource.join_field`: the field's blobs in every part's store laid out as one
        (:class:`JoinedStores`).

        Args:
            parts: ``(source, field)`` pairs, every source a ``CompressedFrames``.

        Returns:
            The joined reader, or ``None`` when the field is not camera frames in every store, or the stores hold
            it in different dtypes, shapes or stored layouts.
        """
        infos = [source.info(field) for source, field in parts]
        if not parts or not all(i.frames for i in infos):
            return None
        if len({(np.dtype(i.dtype), tuple(i.shape)) for i in infos}) != 1:
            return None
        layouts = {source.store.frame_layout(0, field) for source, field in parts}
        return JoinedStores(parts, infos[0], layouts.pop()) if len(layouts) == 1 else None

    def _check_rows(self, field: str, episodes: np.ndarray, steps: np.ndarray) -> None:
        """Check the blocks of a raw field holding the rows just copied (``EpisodeStore.check_blocks``): per row of
        the read, every block from its lowest step's to its highest's.

        Why per row, not per step: this runs for every raw field of every read, and the blocks of a window are
        found from two numbers (a per-step ``np.unique`` cost ~12 us a field for one sample)."""
        layout = self._blocks.get(field)
        if layout is None:
            base, per = (layout := self.store.raw_blocks(field))[:2]
            self._blocks[field] = layout = layout + (np.asarray(base, np.int64), np.asarray(per, np.int64))
        base, per = layout[0], layout[1]
        blocks: range | set[int]
        if len(episodes) == 1:  # one sample: Python ints beat numpy on a handful of steps
            e, s = int(episodes[0]), steps.reshape(-1).tolist()
            blocks = range(base[e] + min(s) // per[e], base[e] + max(s) // per[e] + 1)
        else:  # few numpy calls: each costs about a microsecond whatever its size
            first, per = layout[5][episodes], layout[6][episodes]
            if steps.ndim == 1 or steps.shape[1] == 1:
                blocks = set((first + steps.reshape(-1) // per).tolist())
            else:
                lo, hi = (first + steps.min(1) // per).tolist(), (first + steps.max(1) // per).tolist()
                spanned = set(lo).union(hi)
                for a, z in zip(lo, hi):
                    if z - a > 1:  # a window wider than two blocks
                        spanned.update(range(a + 1, z))
                blocks = spanned
        self.store.check_blocks(field, layout[:5], blocks)


class JoinedStores(JoinedField):
    """One camera of several compressed stores as one (:meth:`CompressedFrames.join_field`): every store's blob
    table of the field (offsets, decoded sizes, checksums) concatenated once, so a mixture's batch finds, checks
    and orders all its frames with a few numpy calls over the whole batch, then decodes each store's share in one
    loop into the batch, put back in its served layout once (``frame_layout.ServedRows``).

    Why: read one store at a time, a batch paid ~10 numpy calls, a decoder and a layout buffer per component it
    touched, ~35 us each, where one dataset pays them once (``benchmarks/mixture_batch_cost.py``). Each blob is
    still checked before its first decode and each frame against its checksum after, as :meth:`CompressedFrames.take`
    does; a damaged frame is named by its file, episode, field and step.

    Args:
        parts: ``(source, field)`` pairs, every source a ``CompressedFrames`` holding the field as ``info`` says.
        info: The field's dtype and step shape (one for all parts).
        layout: How every store holds its frames (``EpisodeStore.frame_layout``).
    """

    def __init__(self, parts, info: FieldInfo, layout):
        self.stores = [source.store for source, _ in parts]
        self.fields = [field for _, field in parts]
        self.step_shape, self.layout = tuple(info.shape), layout
        tables = [source.store.blob_layout(field) + (source.store.frame_sums(field),) for source, field in parts]
        counts = [len(t[0]) for t in tables]
        self.blob_base = part_offsets(counts)  # each part's first blob
        self.starts, self.ends, self.expected, self.sums = (np.concatenate([t[i] for t in tables]) for i in range(4))
        self.checked = np.zeros(int(self.blob_base[-1]), dtype=bool)
        # each part's episodes' first blob, end to end; a part's first entry at episode_base[part]
        self.first_blob = np.concatenate([self.blob_base[p] + source.starts for p, (source, _) in enumerate(parts)])
        self.episode_base = part_offsets([len(source.starts) for source, _ in parts])

    def take(self, parts, episodes, steps, rows, out) -> None:
        """See :meth:`JoinedField.take`.

        Args:
            parts: (B,) each row's part.
            episodes: (B,) each row's episode in its part's store.
            steps: (B,) or (B, T) step indices.
            rows: (B,) the rows of ``out`` to write.
            out: The destination.

        Raises:
            StoreError: what was read does not match its store's checksums; the message names the file, the
                episode, the field and the frame.
        """
        steps = np.asarray(steps)
        T = steps.shape[-1] if steps.ndim > 1 else 1
        first = self.first_blob[self.episode_base[parts] + episodes]
        g = (first[:, None] + steps.reshape(first.size, T)).reshape(-1)
        fresh = _fresh(g, T)
        todo = fresh.nonzero()[0]
        blobs = g[todo]
        # in the rows' order, not grouped by store: the frames are then put back in their layout in runs of rows
        # (``frame_layout.ServedRows``), and a batch's few frames of each store lie apart in its file either way
        owner = np.repeat(parts, T)[todo]
        local = blobs - self.blob_base[owner]  # the store's own frame numbers, to name a damaged one
        new = ~self.checked[blobs]
        if new.any():
            self._check(blobs[new], owner[new], local[new])
        at = step_slots(rows, T)
        flat_out = out.reshape((-1,) + self.step_shape)
        served = frame_layout.ServedRows(flat_out, self.layout)
        decode_across(
            self.stores,
            self.fields,
            served,
            FrameCodec.decoder_into(flat_out, shared=True),  # mapped files
            owner.tolist(),
            self.starts[blobs].tolist(),
            self.ends[blobs].tolist(),
            at[todo].tolist(),
            self.sums[blobs].tolist(),
            local,
        )
        served.flush()
        _repeat_padding(flat_out, fresh, at)

    def _check(self, blobs: np.ndarray, owner: np.ndarray, local: np.ndarray) -> None:
        """Check blobs not read before (``episode_store.check_blobs_across``: one loop over every store's new
        blobs), then mark them checked."""
        check_blobs_across(
            self.stores,
            self.fields,
            owner,
            self.starts[blobs],
            self.ends[blobs],
            self.expected[blobs],
            local,
            self.sums[blobs],
        )
        self.checked[blobs] = True


def _fresh(blobs: np.ndarray, T: int) -> np.ndarray:
    """Which of a read's steps (rows of ``T`` blobs, end to end) decode their blob: each row's first, and every
    step not repeating the one before it in its row (padding repeats a step: copied after decoding instead)."""
    fresh = np.empty(blobs.size, dtype=bool)
    fresh[:1] = True
    np.not_equal(blobs[1:], blobs[:-1], out=fresh[1:])
    fresh[::T] = True
    return fresh


def _repeat_padding(flat_out: np.ndarray, fresh: np.ndarray, at: np.ndarray | None) -> None:
    """Copy each step that repeats the one before it in its row (``~fresh``: padding, not decoded) from the last
    decoded step; ``at``: each step's row of ``flat_out`` (``None``: its position)."""
    if fresh.all():
        return
    src = np.maximum.accumulate(np.where(fresh, np.arange(fresh.size), 0))
    rep = np.flatnonzero(~fresh)
    if at is None:
        flat_out[rep] = flat_out[src[rep]]
    else:
        flat_out[at[rep]] = flat_out[at[src[rep]]]
