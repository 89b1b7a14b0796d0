"""Camera frames of one episode as one video segment (an MP4 in memory), encoded by PyAV, decoded by torchcodec.

Why per-episode segments: a training pass opens each episode once and decodes it whole, in order, so a segment
needs one keyframe (its first frame, which every encoder makes a keyframe) and no seek; the default GOP (32) only
bounds what a partial decode would cost, shorter ones cost size. Why lossy at all: image datasets that do not fit
in RAM (robomimic#27) shrink far more than lossless Blosc2's ~2x: robosuite Lift's 84x84 cameras (20 demos) as
H.264 crf 18 4:4:4 take 50-95x less at 40.5-42.2 dB PSNR, the whole file 35x less (measured with
``robo-loaders convert robomimic ... --frames h264``). The loss is measured when writing (:func:`psnr`, kept in
each segment's header) so a converter reports it per camera.

Colour: frames are RGB24 in, RGB24 out, as YUV 4:4:4 by default (robomimic's cameras are small, 84x84 or less,
where 4:2:0 chroma subsampling costs 1-4 dB for a few percent of size; decoding is on the CPU, so NVDEC's lack of
H.264 4:4:4 does not matter here); the encoder's YUV conversion and the decoder's way back are both
swscale's defaults (BT.601, limited range), so nothing but compression changes a pixel.
"""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.sched import keeps_scheduling

ENCODERS = {"h264": "libx264", "hevc": "libx265", "av1": "libaom-av1"}  # --frames -> FFmpeg encoder
# crf defaults: about 38-40 dB on robosuite's 84x84 cameras (libaom's crf scale is 0..63)
DEFAULT_CRF = {"h264": 18, "hevc": 20, "av1": 30}
MAX_CRF = {"h264": 51, "hevc": 51, "av1": 63}
DEFAULT_GOP = 32
PIX_FMTS = ("yuv420p", "yuv444p")
DEFAULT_FPS = 20  # the stream's time base only (robomimic files rarely say their rate); crf does not depend on it
# libaom's slowest presets gain little on small frames; x265 is silenced (it logs to stderr on its own)
_ENCODER_OPTIONS = {"libaom-av1": {"cpu-used": "8", "row-mt": "1"}, "libx265": {"x265-params": "log-level=error"}}
PSNR_CAP = 100.0  # dB reported for identical frames (MSE 0)
MIN_HEVC_WIDTH = 64  # libx265 (as PyAV 15 bundles it) corrupts its heap on narrower frames and aborts the process
MIN_HEVC_HEIGHT = 16  # and refuses lower ones ("Invalid argument": every height 8-15, reviewers' 7x64, 12x96)


class VideoError(RoboLoadersError):
    """A segment cannot be encoded with these settings, or a stored one cannot be decoded."""


@dataclasses.dataclass(frozen=True)
class VideoSettings:
    """How a segment is encoded; checked when made.

    Attributes:
        codec: ``h264``, ``hevc`` or ``av1`` (:data:`ENCODERS` maps it to FFmpeg's encoder).
        crf: Constant rate factor, 0..:data:`MAX_CRF` of the codec; ``None`` gives :data:`DEFAULT_CRF` of the codec.
        gop: Frames between keyframes (>= 1).
        pix_fmt: ``yuv444p`` (default) or ``yuv420p``.
        fps: The stream's frame rate (its time base only; crf does not depend on it).

    Raises:
        VideoError: a value outside those ranges (at construction).
    """

    codec: str = "h264"
    crf: int | None = None  # None: DEFAULT_CRF[codec]
    gop: int = DEFAULT_GOP
    pix_fmt: str = "yuv444p"
    fps: int = DEFAULT_FPS

    def __post_init__(self):
        if self.codec not in ENCODERS:
            raise VideoError(f"video codec {self.codec!r}: choose one of {', '.join(ENCODERS)}")
        if self.crf is None:
            object.__setattr__(self, "crf", DEFAULT_CRF[self.codec])
        if type(self.crf) is not int or not 0 <= self.crf <= MAX_CRF[self.codec]:
            raise VideoError(f"crf {self.crf!r}: must be an integer within 0..{MAX_CRF[self.codec]} for {self.codec}")
        if type(self.gop) is not int or self.gop < 1:
            raise VideoError(f"gop {self.gop!r}: must be an integer >= 1 (frames between keyframes)")
        if self.pix_fmt not in PIX_FMTS:
            raise VideoError(f"pixel format {self.pix_fmt!r}: choose one of {', '.join(PIX_FMTS)}")
        if type(self.fps) is not int or self.fps < 1:
            raise VideoError(f"fps {self.fps!r}: must be an integer >= 1")

    @property
    def encoder(self) -> str:
        """FFmpeg's encoder for :attr:`codec` (``libx264``, ``libx265``, ``libaom-av1``)."""
        return ENCODERS[self.codec]

    def as_dict(self) -> dict:
        """The settings as a JSON-able dict, with the encoder's name (recorded in each segment's header)."""
        return dict(dataclasses.asdict(self), encoder=self.encoder)

    @classmethod
    def from_dict(cls, d: dict) -> VideoSettings:
        """Settings recorded by :meth:`as_dict` (other keys, such as ``encoder``, ignored).

        Args:
            d: The recorded dict.

        Returns:
            The :class:`VideoSettings`.

        Raises:
            VideoError: a recorded value is out of range.
        """
        return cls(**{k: d[k] for k in ("codec", "crf", "gop", "pix_fmt", "fps") if k in d})

    def check_available(self) -> None:
        """Fail before any work when this PyAV's FFmpeg lacks the encoder."""
        import av

        try:
            av.codec.Codec(self.encoder, "w")
        except av.codec.codec.UnknownCodecError:
            raise VideoError(
                f"--frames {self.codec} needs the {self.encoder} encoder, which the FFmpeg of the "
                f"installed PyAV {av.__version__} lacks; choose another --frames"
            ) from None


@dataclasses.dataclass(frozen=True)
class VideoSegment:
    """An encoded segment as a shard writer stores it: ``shape`` (N, H, W, 3) uint8 of the frames it holds, and the
    squared error of its decoded frames against the source (summed, with the number of values), for reports."""

    data: bytes
    shape: tuple
    settings: VideoSettings
    sse: float
    values: int

    @property
    def psnr(self) -> float:
        """PSNR (dB) of the decoded frames against the source, :data:`PSNR_CAP` when identical."""
        return psnr_from_mse(self.sse / self.values if self.values else 0.0)


def check_frames(frames: np.ndarray, settings: VideoSettings, where: str) -> None:
    """Refuse frames these settings cannot encode, before any encoder runs.

    Args:
        frames: The frames to encode.
        settings: How they would be encoded.
        where: Names the frames in the error.

    Raises:
        VideoError: the frames are not (N >= 1, H, W, 3) uint8; narrower than :data:`MIN_HEVC_WIDTH` or lower
            than :data:`MIN_HEVC_HEIGHT` for ``hevc`` (libx265 aborts the process on the first, fails on the
            second); or of odd size for ``yuv420p``.
    """
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise VideoError(f"{where}: video segments hold (N, H, W, 3) uint8 frames, got {frames.shape} {frames.dtype}")
    check_frame_size(*frames.shape[1:3], settings, where)


def check_frame_size(h: int, w: int, settings: VideoSettings, where: str) -> None:
    """Refuse a frame size these settings cannot encode: :func:`check_frames` from the shape alone, so that a
    conversion checks its cameras before it plans anything (a refusal from the first worker came after the output
    recorded the settings, so the corrected command was refused as "other options": a reviewer's reproduction).

    Args:
        h: Frame height in pixels.
        w: Frame width in pixels.
        settings: How they would be encoded.
        where: Names the frames in the error.

    Raises:
        VideoError: see :func:`check_frames`.
    """
    if settings.codec == "hevc" and w < MIN_HEVC_WIDTH:
        raise VideoError(
            f"{where}: frames {w} pixels wide; libx265 crashes on frames narrower than "
            f"{MIN_HEVC_WIDTH} pixels (the whole process aborts), so use --frames h264 or av1"
        )
    if settings.codec == "hevc" and h < MIN_HEVC_HEIGHT:
        raise VideoError(
            f"{where}: frames {h} pixels high; libx265 cannot encode frames lower than {MIN_HEVC_HEIGHT} pixels, "
            "so use --frames h264 or av1"
        )
    if settings.pix_fmt == "yuv420p" and (h % 2 or w % 2):
        raise VideoError(
            f"{where}: frames of {h}x{w} cannot be stored as yuv420p (odd size); use pixel format "
            "yuv444p or keep this field lossless"
        )


@keeps_scheduling
def encode(frames: np.ndarray, settings: VideoSettings, where: str = "frames") -> bytes:
    """(N, H, W, 3) uint8 RGB frames as an MP4 with one video stream, frame i at pts i.

    Args:
        frames: The frames.
        settings: How to encode them.
        where: Names the frames in errors.

    Returns:
        The MP4 file's bytes.

    Raises:
        VideoError: the frames cannot be encoded with these settings (:func:`check_frames`, or FFmpeg refused).
    """
    import av

    frames = np.ascontiguousarray(frames)
    check_frames(frames, settings, where)
    buf = io.BytesIO()
    try:
        with av.open(buf, "w", format="mp4") as container:
            stream = container.add_stream(settings.encoder, rate=settings.fps)
            stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], settings.pix_fmt
            stream.codec_context.gop_size = settings.gop
            options = dict(_ENCODER_OPTIONS.get(settings.encoder, {}), crf=str(settings.crf))
            if settings.encoder == "libx265" and len(frames) <= 2:
                # libx265 with B-frames flushed packets of nonsense DTS for 2-frame segments, which the MP4 muxer
                # refused ("Not yet implemented in FFmpeg"), a demo of 2 steps failing a conversion (a reviewer's
                # reproduction); a segment that short has nothing to gain from B-frames
                options["x265-params"] += ":bframes=0"
            stream.options = options
            for i, rgb in enumerate(frames):
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts = i
                container.mux(stream.encode(frame))
            container.mux(stream.encode(None))
    except av.FFmpegError as exc:
        raise VideoError(f"{where}: {settings.encoder} cannot encode {frames.shape} frames ({exc})") from None
    return buf.getvalue()


def decode(data, n: int, shape: tuple, where: str = "video", threads: int = 1) -> np.ndarray:
    """Every frame of a segment, in order, as (N, H, W, 3) uint8 RGB, decoded by torchcodec.

    Why torchcodec, not PyAV (which encodes): its decoding and conversion run without the GIL, so threads decoding
    segments run beside each other (PyAV's held it: two threads decoding 32x32 segments finished no sooner than
    one), and a segment costs one call instead of a Python step and an RGB conversion per frame (23 frames of 32x32:
    0.93 ms against 1.72 ms). The call still takes the GIL back about 9 times a segment, between its native steps,
    so beside a thread running Python each return waits for that thread's switch interval (measured:
    docs/benchmarks.md). The frames are the same bytes: both convert with swscale's defaults (tested against PyAV's
    decode for every codec and pixel format).

    Args:
        data: The MP4 file's bytes (any buffer).
        n: How many frames the segment's header says it holds.
        shape: (H, W, 3), the size the header says.
        where: Names the segment in errors.
        threads: Decoder threads; 1 decodes on this thread (FFmpeg starts none), 0 lets FFmpeg choose.

    Returns:
        The frames.

    Raises:
        VideoError: the data cannot be decoded, holds other than one video stream, or holds another number or size
            of frames than ``n`` and ``shape`` say.
    """
    from torchcodec.decoders import VideoDecoder

    blob = bytes(memoryview(data))
    tracks = video_tracks(blob, where)
    if tracks != 1:
        raise VideoError(f"{where}: holds {tracks} video streams, not 1")
    try:  # exact: the frames counted from the stream's packets, not taken from its header
        # NHWC: the frames as FFmpeg converts them, contiguous, so no permute and no copy follow: each was a step
        # that gives the GIL up and waits to take it back beside threads assembling batches (measured:
        # docs/benchmarks.md, *Measurements behind the code*)
        decoder = VideoDecoder(blob, seek_mode="exact", num_ffmpeg_threads=max(0, int(threads)), dimension_order="NHWC")
        meta = decoder.metadata
        if meta.num_frames != n:
            raise VideoError(f"{where}: holds {meta.num_frames} frames, the header says {n}")
        if (meta.height, meta.width, 3) != tuple(shape):
            raise VideoError(f"{where}: frames are {(meta.height, meta.width, 3)}, the header says {tuple(shape)}")
        frames = decoder.get_frames_in_range(0, n).data
    except (RuntimeError, ValueError, IndexError) as exc:  # what torchcodec raises for data FFmpeg refuses
        raise VideoError(f"{where}: cannot be decoded ({type(exc).__name__}: {exc})") from None
    if tuple(frames.shape) != (n,) + tuple(shape):
        raise VideoError(f"{where}: decoded {tuple(frames.shape)}, the header says {(n,) + tuple(shape)}")
    return np.ascontiguousarray(frames.numpy())  # already contiguous: no copy


def video_tracks(mp4: bytes, where: str = "video") -> int:
    """How many video tracks an MP4 holds, from its boxes (``moov/trak/mdia/hdlr`` of handler ``vide``).

    Why read the boxes: torchcodec decodes the best video stream of a file and says nothing of the others, and a
    segment holding two would be served as whichever it chose.

    Args:
        mp4: The MP4 file's bytes.
        where: Names the segment in errors.

    Returns:
        The number of video tracks.

    Raises:
        VideoError: no ``moov`` box (a segment cut short), or a box cut off, running past the end of the data or
            smaller than its own header.
    """
    count, movies = 0, 0
    for moov in _boxes(mp4, 0, len(mp4), where, b"moov"):
        movies += 1
        for trak in _boxes(mp4, *moov, where, b"trak"):
            for mdia in _boxes(mp4, *trak, where, b"mdia"):
                for start, end in _boxes(mp4, *mdia, where, b"hdlr"):
                    count += end - start >= 12 and mp4[start + 8 : start + 12] == b"vide"
    if not movies:  # the muxer writes it last: a segment cut short has none
        raise VideoError(f"{where}: not a whole MP4 (no 'moov' box in its {len(mp4)} bytes)")
    return count


def _boxes(data: bytes, start: int, end: int, where: str, kind: bytes):
    """(payload start, payload end) of each box of type ``kind`` among the boxes in ``data[start:end]``."""
    at = start
    while at + 8 <= end:
        size, name, head = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8], 8
        if size == 1:  # a 64-bit size follows the type
            if at + 16 > end:
                raise VideoError(f"{where}: MP4 box {name!r} at byte {at} is cut off")
            size, head = int.from_bytes(data[at + 8 : at + 16], "big"), 16
        elif size == 0:  # the box runs to the end of its parent
            size = end - at
        if size < head or at + size > end:
            raise VideoError(f"{where}: MP4 box {name!r} at byte {at} says {size} bytes; {end - at} are left")
        if name == kind:
            yield at + head, at + size
        at += size
    if at < end:
        raise VideoError(f"{where}: MP4 box header at byte {at} is cut off ({end - at} bytes left)")


def squared_error(a: np.ndarray, b: np.ndarray) -> float:
    """Sum of squared differences of two arrays of equal shape, 16 frames at a time (no float64 copy of a whole
    episode).

    Args:
        a: Frames (uint8).
        b: Frames of the same shape.

    Returns:
        The sum.
    """
    total = 0.0
    for i in range(0, len(a), 16):
        # int64: np.dot sums in the arrays' dtype, and 16 frames of 640x480x3 differing by 30 overflow int32
        d = (a[i : i + 16].astype(np.int64) - b[i : i + 16]).ravel()
        total += float(np.dot(d, d))
    return total


def psnr_from_mse(mse: float) -> float:
    """PSNR (dB) of 8-bit values from their mean squared error, capped at :data:`PSNR_CAP` (also for MSE 0).

    Args:
        mse: The mean squared error.

    Returns:
        ``10 * log10(255**2 / mse)``, at most :data:`PSNR_CAP`.
    """
    return PSNR_CAP if mse <= 0 else min(PSNR_CAP, 10 * math.log10(255.0**2 / mse))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR (dB) of uint8 frames ``a`` against ``b`` over all their values (:data:`PSNR_CAP` when identical).

    Args:
        a: Frames.
        b: The reference frames, of the same shape.

    Returns:
        The PSNR.

    Raises:
        ValueError: the shapes differ.
    """
    if a.shape != b.shape:
        raise ValueError(f"psnr of arrays of different shapes {a.shape} and {b.shape}")
    return psnr_from_mse(squared_error(a, b) / max(1, a.size))


def encode_segment(frames: np.ndarray, settings: VideoSettings, where: str = "frames") -> VideoSegment:
    """Encode, then decode back to measure the loss (a converter reports it; cheap next to encoding).

    Args:
        frames: (N, H, W, 3) uint8 RGB frames.
        settings: How to encode them.
        where: Names the frames in errors.

    Returns:
        The :class:`VideoSegment`, with the squared error of its decoded frames.

    Raises:
        VideoError: the frames cannot be encoded, or the result cannot be decoded.
    """
    data = encode(frames, settings, where)
    back = decode(data, len(frames), frames.shape[1:], where)
    return VideoSegment(data, tuple(frames.shape), settings, squared_error(back, frames), int(frames.size))
