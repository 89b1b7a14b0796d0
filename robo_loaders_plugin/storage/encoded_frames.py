"""Camera frames still encoded: :class:`EncodedFrames` (one Blosc2 blob per frame) and :class:`VideoSegmentFrames`
(an episode's frames of one camera as one lossy video segment).

Why a module of their own, outside ``shards/``: the robo-shards reader produces them
(``ShardReader.read_episode(decode_frames=False)``), but what holds them is the frame side: the episode buffer of
``frames/episodes.py`` keeps loaded episodes compressed in RAM (a backend's in-memory store builds them with
:meth:`EncodedFrames.encode`), decoding only the frames a batch needs. In ``storage/``, not
``frames/``, so that storage never imports the frame layer: the reader and the frame sources both import this
module. Errors are :class:`ShardError`: the frames come from a shard (or were encoded here), so damage the CRC did
not catch means the shard must be converted again. Frames stored in another layout than served (channels last,
``storage.frame_layout``) are put back as served while each is copied out, never in a second pass.
"""

from __future__ import annotations

import math

import numpy as np

from robo_loaders_plugin.storage import frame_layout
from robo_loaders_plugin.storage.codec import CodecError, FrameCodec
from robo_loaders_plugin.storage.shards.format import _AGAIN, ShardError, _dtype, _short, is_int


class EncodedFrames:
    """One frames member still compressed. Why: a LeRobot sample uses each camera frame about once per pass,
    so decoding a whole episode up front would only multiply the memory of an episode buffer by the
    compression ratio; frames are decompressed when a batch needs them, like the compressed cache does.

    ``shape`` is the served frames' (N, ...); ``layout`` how each is stored (``storage.frame_layout``; ``None``: as
    served)."""

    def __init__(
        self, data: bytes, offsets: np.ndarray, dtype: np.dtype, shape: tuple, where: str, layout: str | None = None
    ):
        self.data = np.frombuffer(data, dtype=np.uint8)
        self.offsets, self.dtype, self.shape, self.where = offsets, dtype, shape, where
        self.layout = layout

    @classmethod
    def from_member(cls, data: bytes, desc: dict, where: str) -> EncodedFrames:
        """A frames member read from a shard, checked: the frame table and each frame's header (cheap), so that a
        damaged member is refused as it is read, and the hot path decodes small frames without checking each header
        again (``FrameCodec.decoder``).

        Args:
            data: The member's bytes (the frames' Blosc2 chunks, back to back).
            desc: The member's description in the episode header (``shape``, ``dtype``, ``offsets``, and ``layout``
                when the frames are stored in another layout than served).
            where: Names the member in errors.

        Returns:
            The frames, still compressed.

        Raises:
            ShardError: an invalid shape, dtype or layout, a frame table that does not match the data, or a frame
                whose header announces another size.
        """
        shape, dtype = desc.get("shape"), _dtype(desc.get("dtype"), where)
        if not isinstance(shape, list) or not shape or not all(is_int(n) for n in shape):
            raise ShardError(f"{where}: shape {_short(shape)} is invalid")
        shape = tuple(shape)
        try:
            layout = frame_layout.checked_layout(desc.get("layout"), shape[1:])
        except ValueError as exc:
            raise ShardError(f"{where}: {exc}; convert it again with this robo-loaders") from None
        try:
            offsets = np.asarray(desc.get("offsets"))
        except (TypeError, ValueError, OverflowError):
            offsets = np.zeros(0)
        if (
            offsets.dtype.kind not in "iu"
            or offsets.shape != (shape[0] + 1,)
            or offsets[0] != 0
            or offsets[-1] != len(data)
            or np.any(np.diff(offsets) <= 0)
        ):
            raise ShardError(f"{where}: frame table does not match its data")
        offsets = offsets.astype(np.int64)
        frames = cls(data, offsets, dtype, shape, where, layout)
        nbytes = math.prod(shape[1:]) * dtype.itemsize
        try:
            for j in range(shape[0]):
                FrameCodec.check_size(frames.data[offsets[j] : offsets[j + 1]], nbytes, f"{where} frame {j}")
        except CodecError as exc:
            raise ShardError(str(exc)) from None
        return frames

    @classmethod
    def encode(cls, frames: np.ndarray, codec: FrameCodec, where: str) -> EncodedFrames:
        """Compress (N, ...) frames one by one (a buffer of decoded episodes kept compressed in RAM).

        Args:
            frames: The frames, first axis the frame index.
            codec: How to compress each frame.
            where: Names the frames in later errors.

        Returns:
            The compressed frames.
        """
        blobs = [codec.compress(f) for f in frames]
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
        return cls(b"".join(blobs), offsets, frames.dtype, tuple(frames.shape), where)

    def __len__(self) -> int:
        return self.shape[0]

    def rows(self, lo: int, hi: int) -> EncodedFrames:
        """Frames ``lo..hi-1`` as their own compressed frames, their bytes copied (nothing else stays referenced).

        Args:
            lo: The first frame.
            hi: The end frame (exclusive), ``lo < hi <= len(self)``.

        Returns:
            The frames, still compressed.
        """
        offs = self.offsets
        return EncodedFrames(
            self.data[offs[lo] : offs[hi]].tobytes(),
            offs[lo : hi + 1] - offs[lo],
            self.dtype,
            (hi - lo,) + tuple(self.shape[1:]),
            self.where,
            self.layout,
        )

    def decode_into(self, indices, out: np.ndarray, out_rows=None) -> None:
        """Decompress frame ``indices[j]`` into ``out[out_rows[j]]`` (``out[j]`` by default), as served: frames
        stored in another layout are decompressed into a scratch of a few frames and copied into their rows
        transposed (``frame_layout.ServedRows``).

        Args:
            indices: Frame indices, in any order, repeats allowed.
            out: The destination; each row written must be a writable, C-contiguous frame.
            out_rows: Rows of ``out`` to write, one per index (default ``0, 1, ...``).

        Raises:
            ShardError: a frame cannot be decompressed (damage the member's CRC did not catch).
        """
        data, offs = self.data, self.offsets
        decompress = FrameCodec.decoder_into(out)
        rows = range(len(indices)) if out_rows is None else out_rows
        try:
            if self.layout is None:
                for j, i in zip(rows, indices):
                    decompress(data[offs[i] : offs[i + 1]], out[j])
                return
            served = frame_layout.ServedRows(out, self.layout)
            for j, i in zip(rows, indices):
                decompress(data[offs[i] : offs[i + 1]], served.slot(j))
            served.flush()
        except CodecError as exc:  # a frame Blosc2 refuses; the CRC makes this a hostile-input case
            raise ShardError(f"{self.where}: frame {i} cannot be decompressed ({exc})") from None

    def decode_all(self) -> np.ndarray:
        """Every frame, decompressed into a new (N, ...) array."""
        out = np.empty(self.shape, dtype=self.dtype)
        self.decode_into(range(self.shape[0]), out)
        return out


class VideoSegmentFrames(EncodedFrames):
    """One video member (an episode's frames of one camera as a video segment), still encoded.

    Why an :class:`EncodedFrames`: whatever holds compressed frames (an episode buffer) holds these the same way.
    A segment decodes in order from its keyframe, so it is meant to be decoded whole, once per load
    (``decode_all``); ``decode_into`` decodes it whole too, then copies the frames asked for."""

    def __init__(self, data, settings: dict, shape: tuple, where: str, threads: int = 1):
        self.data = np.frombuffer(data, dtype=np.uint8)
        self.offsets, self.dtype, self.shape, self.where = None, np.dtype(np.uint8), shape, where
        self.settings, self.threads, self.mse, self.layout = settings, threads, None, None

    @classmethod
    def from_member(cls, data, desc: dict, where: str) -> VideoSegmentFrames:
        """A video member read from a shard, with what is cheap to check checked (shape, dtype, codec, the MP4's first
        box); decoding checks the rest.

        Args:
            data: The member's bytes (an MP4 file).
            desc: The member's description in the episode header (``shape``, ``dtype``, ``video`` settings, ``mse``).
            where: Names the member in errors.

        Returns:
            The segment, still encoded.

        Raises:
            ShardError: the shape is not (N, H, W, 3), the dtype not uint8, the settings name no known codec, or the
                data is not an MP4 file.
        """
        from robo_loaders_plugin.storage.video import ENCODERS

        shape, settings = desc.get("shape"), desc.get("video")
        if (
            not isinstance(shape, list)
            or len(shape) != 4
            or not all(is_int(n) for n in shape)
            or shape[3] != 3
            or min(shape) < 1
        ):
            raise ShardError(f"{where}: video shape {_short(shape)} is not (N, H, W, 3)")
        if _dtype(desc.get("dtype"), where) != np.uint8:
            raise ShardError(f"{where}: video frames must be uint8, the header says {_short(desc.get('dtype'))}")
        if not isinstance(settings, dict) or settings.get("codec") not in ENCODERS:
            raise ShardError(f"{where}: video settings {_short(settings)} name no known codec ({', '.join(ENCODERS)})")
        if len(data) < 12 or bytes(memoryview(data)[4:8]) != b"ftyp":
            raise ShardError(f"{where}: not an MP4 file (no 'ftyp' box at its start)")
        frames = cls(data, settings, tuple(shape), where)
        frames.mse = desc.get("mse") if isinstance(desc.get("mse"), float) else None
        return frames

    def decode_all(self) -> np.ndarray:
        """Every frame of the segment, decoded in order into a new (N, H, W, 3) uint8 array.

        Raises:
            ShardError: the segment cannot be decoded, or holds other frames than its header says.
        """
        from robo_loaders_plugin.storage.video import VideoError, decode

        try:
            return decode(self.data, self.shape[0], self.shape[1:], self.where, self.threads)
        except VideoError as exc:  # the CRC matched, so a writer or a hostile input made it: convert again
            raise ShardError(f"{exc}; {_AGAIN}") from None

    def decode_into(self, indices, out: np.ndarray, out_rows=None) -> None:
        """Decode the whole segment, then copy frame ``indices[j]`` into ``out[out_rows[j]]``.

        A segment decodes in order from its keyframe, so asking for a few frames costs a whole decode; callers decode
        a segment once per load with :meth:`decode_all`.

        Args:
            indices: Frame indices.
            out: The destination array.
            out_rows: Rows of ``out`` to write, one per index (default ``0, 1, ...``).

        Raises:
            ShardError: the segment cannot be decoded.
        """
        frames = self.decode_all()
        for j, i in zip(range(len(indices)) if out_rows is None else out_rows, indices):
            out[j] = frames[i]
