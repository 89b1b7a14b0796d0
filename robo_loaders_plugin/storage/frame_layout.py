"""How camera frames lie at rest (shards and compressed caches), and the copy back to what the framework serves.

Why not as served: LeRobot serves frames channels first, (C, H, W), and three planes of one colour each pack
worse with LZ4 than the same pixels interleaved, (H, W, C): camera-like 480p frames packed 1.25:1 channels first
and 1.75:1 channels last (docs/scale.md, L480: shards 29% smaller). So a channels-first frame is stored channels
last, the field records it (``layout``), and the reader puts the channels back first while it copies each frame
into the batch (:class:`ServedRows`): decompressed into a scratch of a few frames that stays in cache, then split
into the output's planes, no second pass over the batch. A frame already channels last (robomimic serves
(H, W, C)) is stored as served. Whatever the rule picks, the recorded layout is what the reader inverts, so the
rule decides only how well frames pack, never what is served.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np

from robo_loaders_plugin.storage.pages import empty_small_pages

CHANNELS_LAST = "hwc"  # a (C, H, W) frame stored as (H, W, C); a field without ``layout`` is stored as served
LAYOUTS = (CHANNELS_LAST,)
_MAX_CHANNELS = 4


def stored_layout(step_shape) -> str | None:
    """The layout a frames field is stored in: channels last for a channels-first step (C, H, W) of 2 to 4 channels,
    fewer than its height and width; ``None`` (stored as served) for anything else, one channel included (the
    same bytes either way).

    Args:
        step_shape: The shape of one served frame.

    Returns:
        :data:`CHANNELS_LAST` or ``None``.
    """
    shape = tuple(int(n) for n in step_shape)
    if len(shape) == 3 and 1 < shape[0] <= _MAX_CHANNELS and shape[0] < min(shape[1:]):
        return CHANNELS_LAST
    return None


def checked_layout(value, step_shape) -> str | None:
    """A layout read from a header, checked against the frame it describes.

    Args:
        value: The field's recorded ``layout`` (``None``: absent, stored as served).
        step_shape: The shape of one served frame.

    Returns:
        The layout.

    Raises:
        ValueError: an unknown layout (written by a newer robo-loaders), or channels last for a frame that is not
            3-D.
    """
    if value is None:
        return None
    if value not in LAYOUTS:
        raise ValueError(f"frame layout {value!r} is unknown (this robo-loaders reads {', '.join(LAYOUTS)})")
    if len(tuple(step_shape)) != 3:
        raise ValueError(f"frame layout {value!r} needs (C, H, W) frames, the header says {list(step_shape)}")
    return value


def stored_shape(step_shape, layout: str | None) -> tuple:
    """The shape one frame is stored in.

    Args:
        step_shape: The shape of one served frame.
        layout: Its stored layout.

    Returns:
        The stored frame's shape.
    """
    c, *rest = tuple(step_shape)
    return (*rest, c) if layout == CHANNELS_LAST else tuple(step_shape)


def to_stored(frame: np.ndarray, layout: str | None) -> np.ndarray:
    """One served frame in its stored layout (a view; the codec makes it contiguous as it compresses).

    Args:
        frame: The frame as served.
        layout: The stored layout.

    Returns:
        The frame to compress.
    """
    return frame.transpose(1, 2, 0) if layout == CHANNELS_LAST else frame


def copy_served(stored: np.ndarray, out: np.ndarray, layout: str | None) -> None:
    """Write one stored frame into ``out`` as served: the transposing copy of a channels-last frame.

    Why OpenCV when it is there (LeRobot depends on it): ``cv2.split`` writes the planes with SIMD at nearly copy
    speed (29 us for a 480x640x3 frame where numpy's strided transpose takes 264 us, this machine); numpy otherwise.

    Args:
        stored: The decompressed frame, in its stored layout, C-contiguous.
        out: The served frame's destination (written in place).
        layout: The stored layout.
    """
    if layout != CHANNELS_LAST:
        np.copyto(out, stored.reshape(out.shape))
        return
    cv2 = _cv2()
    if cv2 is not None and out.flags.c_contiguous and stored.dtype == np.uint8:
        planes = list(out)
        got = cv2.split(stored, planes)
        if all(g is p for g, p in zip(got, planes)):
            return  # written in place (OpenCV hands back new arrays only when it could not)
    np.copyto(out, stored.transpose(2, 0, 1))


def channels_first(frames: np.ndarray) -> np.ndarray:
    """A C-contiguous (N, C, H, W) copy of ``frames``, which a video decoder hands back as a channels-first view of
    (N, H, W, C) memory (torchcodec does).

    Why not ``np.ascontiguousarray``: its strided transpose was a sixth of a 480p unit's decode (0.52 of 3.2 ms a
    frame); :func:`copy_served` writes the planes with OpenCV in half the time (0.35 against 0.7 ms a 480p frame
    here, the new array's page faults included).

    Args:
        frames: (N, C, H, W) frames of any strides.

    Returns:
        The frames, C-contiguous (``frames`` itself when they already are).
    """
    if frames.ndim != 4 or frames.dtype != np.uint8 or frames.flags.c_contiguous:
        return np.ascontiguousarray(frames)
    stored = frames.transpose(0, 2, 3, 1)
    if not stored.flags.c_contiguous:  # not a view of channels-last memory: numpy's copy
        return np.ascontiguousarray(frames)
    out = empty_small_pages(frames.shape, np.uint8)
    for n in range(len(out)):
        copy_served(stored[n], out[n], CHANNELS_LAST)
    return out


GROUP_BYTES = 512 << 10  # small frames are put back a group at a time: one OpenCV call per group, not per frame


class ServedRows:
    """Frames decompressed in their stored layout into a scratch of a few frames (:meth:`slot`), then written into
    their rows of ``out`` as served, a group at a time (:meth:`flush`).

    Why groups: an OpenCV call costs ~7 us whatever its size, as much as decompressing an 84x84 frame; splitting a
    group of frames at once (and copying their planes into runs of consecutive rows) costs ~1.7 us a frame. A frame
    of more than :data:`GROUP_BYTES` is split straight into its row's planes.

    Args:
        out: The output, one served frame per row (``out[r]``), C-contiguous rows.
        layout: The frames' stored layout (``None``: :meth:`slot` is the row itself).
    """

    def __init__(self, out: np.ndarray, layout: str | None):
        self.out, self.layout = out, layout
        self.rows: list[int] = []
        if layout is None:
            return
        self.stored = stored_shape(out.shape[1:], layout)
        per = max(1, out[0].nbytes if len(out) else 1)
        self.group = max(1, GROUP_BYTES // per)
        self.scratch = _scratch("stored", (self.group, *self.stored), out.dtype)

    def slot(self, row: int) -> np.ndarray:
        """Where to decompress the frame of output row ``row``: the row itself when frames are stored as served,
        else the next frame of the scratch (the group is flushed first when full).

        Args:
            row: The row of ``out`` the frame belongs to.

        Returns:
            A writable, C-contiguous array of one stored frame.
        """
        if self.layout is None:
            return self.out[row]
        if len(self.rows) == self.group:
            self.flush()
        self.rows.append(row)
        return self.scratch[len(self.rows) - 1]

    def flush(self) -> None:
        """Write the frames decompressed since the last flush into their rows, as served."""
        n, rows = len(self.rows), self.rows
        if not n:
            return
        self.rows = []
        if n == 1 or self.group == 1:
            for j, r in enumerate(rows):
                copy_served(self.scratch[j], self.out[r], self.layout)
            return
        h, w, c = self.stored
        cv2 = _cv2()
        if cv2 is not None and self.out.dtype == np.uint8 and self.out.flags.c_contiguous:
            planes = _scratch("planes", (c, self.group * h, w), np.uint8)
            views = [planes[k, : n * h] for k in range(c)]
            got = cv2.split(self.scratch[:n].reshape(n * h, w, c), views)
            if all(g is v for g, v in zip(got, views)):
                _scatter(self.out, rows, planes[:, : n * h].reshape(c, n, h, w).transpose(1, 0, 2, 3))
                return
        _scatter(self.out, rows, self.scratch[:n].transpose(0, 3, 1, 2))


def _scatter(out: np.ndarray, rows: list[int], frames: np.ndarray) -> None:
    """``out[rows[j]] = frames[j]`` for every ``j``: one copy per run of consecutive rows when there are few runs,
    else one indexed assignment. Why: a mixture's batch writes each component's frames into its rows, scattered over
    the batch (runs of one row): 64 frames of 32x32 in random rows took 146 us put back a copy per row, 96 us so.
    The runs are found with numpy: a loop over the rows in Python cost ~30 us a batch of a 400-component mixture."""
    at = np.asarray(rows, dtype=np.intp)
    if not at.size:
        return
    breaks = np.flatnonzero(np.diff(at) != 1) + 1
    if breaks.size > 1:
        out[at] = frames
        return
    for a, b in zip((0, *breaks.tolist()), (*breaks.tolist(), at.size)):
        np.copyto(out[at[a] : at[a] + b - a], frames[a:b])


_local = threading.local()


def _scratch(name: str, shape: tuple, dtype) -> np.ndarray:
    """A buffer of this thread's, kept for the next call of the same shape (no page faults per batch)."""
    key = (name, shape, np.dtype(dtype).str)
    bufs = _local.__dict__.setdefault("bufs", {})
    buf = bufs.get(key)
    if buf is None:
        if len(bufs) > 8:  # shapes seen by this thread: a few per dataset
            bufs.clear()
        buf = bufs[key] = np.empty(shape, dtype)
    return buf


_CV2: list = []


def _cv2():
    """OpenCV, imported once (``None`` when it is not installed)."""
    if not _CV2:
        try:
            import cv2
        except ImportError:
            cv2 = None
        _CV2.append(cv2)
    return _CV2[0]


def sampled_ratio(frames: Iterable[np.ndarray], codec) -> float | None:
    """How well these frames pack as a shard or store packs them: each in its stored layout (:func:`stored_layout`),
    compressed with ``codec``. Why measured: the ratio is a property of the pixels (noise 1:1, renders 4:1), which no
    metadata gives; a disk estimate from a few frames of the source is closer than any fixed guess.

    Args:
        frames: Served frames (a few, spread over the source).
        codec: The ``storage.codec.FrameCodec`` that will compress them.

    Returns:
        Decoded bytes / compressed bytes, or ``None`` when there is no frame.
    """
    raw = packed = 0
    for frame in frames:
        frame = np.asarray(frame)
        raw += frame.nbytes
        packed += len(codec.compress(to_stored(frame, stored_layout(frame.shape))))
    return raw / packed if packed else None
