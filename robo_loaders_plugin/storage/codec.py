"""Per-frame lossless compression with Blosc2.

Why per frame: a training window touches a handful of frames of one episode, so each frame is its own blob and
can be decompressed alone. Why Blosc2: it decompresses straight into a caller-provided buffer (no intermediate
``bytes`` object and no extra copy, the cost that erased the gains of the loader this project answers), wraps
LZ4 and Zstandard behind one API, and decompresses with the GIL released through its context API (below). The
measured comparison that picked the default is in docs/codecs.md; ``benchmarks/codecs.py`` reproduces it.

Why ``decompress2`` with ``set_releasegil(True)`` for large frames: ``blosc2.decompress`` holds the GIL and goes
through the library's global context, so batch threads decompressing side by side take turns (two threads are no
faster than one). ``decompress2`` decompresses with a context of its own, with the GIL released once
``set_releasegil(True)`` is set (process-wide; this module sets it at import), so threads decompress side by side.
Its per-call cost outweighs that on small frames, so frames under :data:`GIL_FREE_MIN_BYTES` keep ``decompress``
(the measurements: docs/benchmarks.md, *Measurements behind the code*).
``decompress2`` writes as many bytes as the blob's header announces, whatever the output holds, so every large
frame's header is checked against its output first (:meth:`FrameCodec.decompress_into`), on a copy where the blob
lies in memory another process may write (a mapped file).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import blosc2
import numpy as np

from robo_loaders_plugin.core.codecs import CODECS, DEFAULT_CODEC, DEFAULT_FILTER, FILTERS  # also re-exported

# the names (core.codecs) to Blosc2's values
CODEC_CHOICES = {name: getattr(blosc2.Codec, name.upper()) for name in CODECS}
FILTER_CHOICES = {
    name: blosc2.Filter.NOFILTER if name == "none" else getattr(blosc2.Filter, name.upper()) for name in FILTERS
}
DEFAULT_LEVEL = 5

blosc2.set_releasegil(True)  # decompress2 and compress2 release the GIL (the module's docstring)
GIL_FREE_MIN_BYTES = 64 << 10  # frames this large or larger take decompress2 (the module's docstring says why)


class CodecError(ValueError):
    """A codec setting out of range, or a compressed frame that is not what its table says (corrupt)."""


def use_single_thread() -> None:
    """Decompress single-threaded in this process: Blosc2's internal thread pool costs more per call than it saves
    on a frame-sized chunk, and DataLoader workers (or batch threads) are the parallelism here."""
    if blosc2.nthreads != 1:
        blosc2.set_nthreads(1)


@dataclasses.dataclass(frozen=True)
class FrameCodec:
    """How frames are compressed: one Blosc2 chunk per frame (see the module's docstring).

    Attributes:
        codec: One of :data:`CODEC_CHOICES` (``lz4``, ``lz4hc``, ``zstd``, ``blosclz``).
        level: Compression level, 0..9.
        filter: One of :data:`FILTER_CHOICES` (``none``, ``shuffle``, ``bitshuffle``).

    Raises:
        CodecError: an unknown codec or filter, or a level outside 0..9 (at construction).
    """

    codec: str = DEFAULT_CODEC
    level: int = DEFAULT_LEVEL
    filter: str = DEFAULT_FILTER

    def __post_init__(self):
        if self.codec not in CODEC_CHOICES:
            raise CodecError(f"unknown codec {self.codec!r}; choose one of {sorted(CODEC_CHOICES)}")
        if self.filter not in FILTER_CHOICES:
            raise CodecError(f"unknown filter {self.filter!r}; choose one of {sorted(FILTER_CHOICES)}")
        if not 0 <= int(self.level) <= 9:
            raise CodecError(f"codec level must be 0..9, got {self.level!r}")

    def as_dict(self) -> dict:
        """The settings as a JSON-able dict (recorded with the data they compressed)."""
        return dataclasses.asdict(self)

    def compress(self, frame: np.ndarray) -> bytes:
        """Compress one frame to a self-describing Blosc2 chunk (single-threaded).

        Args:
            frame: The frame (made C-contiguous first if it is not).

        Returns:
            The chunk.
        """
        frame = np.ascontiguousarray(frame)
        return blosc2.compress2(
            frame,
            codec=CODEC_CHOICES[self.codec],
            clevel=int(self.level),
            filters=[FILTER_CHOICES[self.filter]],
            typesize=frame.dtype.itemsize,
            nthreads=1,
        )

    @staticmethod
    def check_size(blob, nbytes: int, where: str = "frame") -> None:
        """Check a chunk's header: it decompresses to exactly ``nbytes`` bytes.

        Args:
            blob: The compressed chunk.
            nbytes: The size of the frame it must hold.
            where: Names the frame in the error.

        Raises:
            CodecError: the header is unreadable, or announces another size.
        """
        try:
            n = blosc2.get_cbuffer_sizes(blob)[0]
        except Exception as exc:  # noqa: BLE001 - blosc2 raises various types on a garbage header
            raise CodecError(f"{where}: corrupt compressed frame ({exc})") from None
        if n != nbytes:
            raise CodecError(f"{where}: corrupt compressed frame: holds {n} bytes, expected {nbytes}")

    @classmethod
    def decoder(cls, frame_nbytes: int, shared: bool = False) -> Callable[[Any, np.ndarray], None]:
        """The hot path's :meth:`decompress_into` for frames of one size, chosen once per read. Small frames get the
        bare ``blosc2.decompress`` call without the header check (the call and the check are a noticeable part of
        each frame's ~9 us): their sizes were checked where their tables were loaded, ``decompress`` writes at most
        the output's size, and the stores check each frame's sum after decoding it.

        Args:
            frame_nbytes: The size of every frame it will decompress.
            shared: As :meth:`decompress_into`'s.

        Returns:
            ``decode(blob, out)``.
        """
        if frame_nbytes < GIL_FREE_MIN_BYTES:
            return _decompress_small
        return functools.partial(cls.decompress_into, shared=shared)

    @classmethod
    def decoder_into(cls, out: np.ndarray, shared: bool = False) -> Callable[[Any, np.ndarray], None]:
        """:meth:`decoder` for the frames of ``out`` (frames first; the size of one, none when it is empty): what
        every read that decodes a batch of frames into one array asks.

        Args:
            out: The destination, ``(n,) + frame shape``.
            shared: As :meth:`decompress_into`'s.

        Returns:
            ``decode(blob, out)``.
        """
        return cls.decoder(out[0].nbytes if len(out) else 0, shared)

    @classmethod
    def decompress_into(cls, blob, out: np.ndarray, shared: bool = False) -> None:
        """Decompress one chunk straight into ``out``, after checking its header's size: a frame of
        :data:`GIL_FREE_MIN_BYTES` or more with the GIL released (module docstring). The hot paths, whose sizes were
        checked where their tables were loaded, take :meth:`decoder`'s function instead.

        Args:
            blob: The compressed chunk.
            out: A writable, C-contiguous array of the frame's size.
            shared: ``blob`` lies in memory another process may write (a mapped file): a large frame's blob is
                copied first, so that the header checked is the header ``decompress2`` reads.

        Raises:
            CodecError: the chunk does not hold ``out.nbytes`` bytes, or Blosc2 cannot decompress it.
        """
        if shared and out.nbytes >= GIL_FREE_MIN_BYTES:
            blob = bytes(blob)
        cls.check_size(blob, out.nbytes)
        if out.nbytes < GIL_FREE_MIN_BYTES:
            _decompress_small(blob, out)
            return
        try:
            blosc2.decompress2(blob, dst=out, nthreads=1)
        except ValueError as exc:  # Blosc2's "Error while decompressing"
            raise CodecError(f"corrupt compressed frame ({exc})") from None


def _decompress_small(blob, out: np.ndarray) -> None:
    """A frame under :data:`GIL_FREE_MIN_BYTES`: ``blosc2.decompress`` (writes at most ``out.nbytes``)."""
    try:
        blosc2.decompress(blob, dst=out)
    except RuntimeError:  # Blosc2's "Cannot decompress": say why when the header tells
        FrameCodec.check_size(blob, out.nbytes)
        raise CodecError("corrupt compressed frame (Blosc2 cannot decompress it)") from None
