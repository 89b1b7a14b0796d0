"""``storage.video.decode``: a segment decoded by torchcodec is PyAV's frames, byte for byte, and a segment that is not
what its header says is refused (the frames served by ``video_stream`` on robomimic's video shards).

Why against PyAV: the segments are encoded with PyAV, and decode used PyAV's per-frame RGB conversion until it
moved to torchcodec (one call per segment, without the GIL); every frame a converted file served before must be
served the same after.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from robo_loaders_plugin.storage.video import VideoError, VideoSettings, decode, encode, video_tracks


def _frames(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """Smooth moving gradients with noise: what a camera gives, not a flat image every codec gets right."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    out = [
        np.stack([(x * 4 + i * 3) % 256, (y * 4 + i) % 256, ((x + y) * 2 + i * 5) % 256], -1)
        + rng.integers(0, 24, (h, w, 3))
        for i in range(n)
    ]
    return np.clip(np.stack(out), 0, 255).astype(np.uint8)


def _pyav_frames(data: bytes) -> np.ndarray:
    """Every frame as PyAV decodes and converts it (``to_ndarray(format="rgb24")``, swscale's defaults)."""
    import av

    with av.open(io.BytesIO(data), "r", format="mp4") as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])


@pytest.mark.parametrize(
    "codec,pix_fmt,shape",
    [
        ("h264", "yuv444p", (23, 32, 32)),
        ("h264", "yuv444p", (40, 84, 84)),
        ("h264", "yuv420p", (12, 96, 128)),
        ("hevc", "yuv444p", (9, 64, 64)),
        ("av1", "yuv420p", (9, 64, 96)),
    ],
)
def test_a_segment_decodes_to_pyavs_frames_byte_for_byte(codec, pix_fmt, shape):
    n, h, w = shape
    data = encode(_frames(n, h, w), VideoSettings(codec=codec, pix_fmt=pix_fmt, gop=8))
    ours, theirs = decode(data, n, (h, w, 3), "segment"), _pyav_frames(data)
    assert ours.shape == (n, h, w, 3) and ours.dtype == np.uint8 and ours.flags.c_contiguous and ours.flags.writeable
    assert ours.tobytes() == theirs.tobytes()
    # control: the comparison sees one value off in one frame
    other = theirs.copy()
    other[n // 2, h // 2, w // 2, 1] ^= 1
    assert ours.tobytes() != other.tobytes()
    # and frames of another segment are not these
    assert decode(
        encode(_frames(n, h, w, seed=1), VideoSettings(codec=codec, pix_fmt=pix_fmt)), n, (h, w, 3)
    ).tobytes() != (theirs.tobytes())


def test_a_segment_of_other_frames_than_its_header_says_is_refused():
    data = encode(_frames(6, 32, 32), VideoSettings())
    assert decode(data, 6, (32, 32, 3)).shape == (6, 32, 32, 3)  # control: what the header says
    with pytest.raises(VideoError, match=r"seg: holds 6 frames, the header says 7"):
        decode(data, 7, (32, 32, 3), "seg")
    with pytest.raises(VideoError, match=r"seg: holds 6 frames, the header says 5"):
        decode(data, 5, (32, 32, 3), "seg")
    with pytest.raises(VideoError, match=r"seg: frames are \(32, 32, 3\), the header says \(32, 48, 3\)"):
        decode(data, 6, (32, 48, 3), "seg")


def test_a_segment_with_two_video_streams_is_refused():
    """torchcodec decodes the best stream of a file and says nothing of others: the MP4's tracks are counted."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        streams = [container.add_stream("libx264", rate=20) for _ in range(2)]
        for s in streams:
            s.width, s.height, s.pix_fmt = 32, 32, "yuv444p"
        for i, rgb in enumerate(_frames(4, 32, 32)):
            for s in streams:
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
                frame.pts = i
                container.mux(s.encode(frame))
        for s in streams:
            container.mux(s.encode(None))
    two = buf.getvalue()
    assert video_tracks(two) == 2
    with pytest.raises(VideoError, match=r"seg: holds 2 video streams, not 1"):
        decode(two, 4, (32, 32, 3), "seg")
    assert video_tracks(encode(_frames(4, 32, 32), VideoSettings())) == 1  # control: a segment as encoded


def test_a_cut_off_segment_is_refused_naming_it():
    """Every cut, wherever it falls (inside a box, inside a box's header, before the movie box the muxer writes
    last), is refused as what it is, not as a segment of no video streams."""
    data = encode(_frames(6, 32, 32), VideoSettings())
    assert decode(data, 6, (32, 32, 3), "seg").shape == (6, 32, 32, 3)  # control: the whole segment
    for cut in range(12, len(data), max(1, len(data) // 97)):
        with pytest.raises(VideoError, match=r"^seg: (MP4 box|not a whole MP4)"):
            decode(data[:cut], 6, (32, 32, 3), "seg")


def test_one_thread_asks_ffmpeg_for_no_threads_of_its_own(monkeypatch):
    """``threads=1`` decodes on the calling thread: PyAV's default let FFmpeg start a thread per core for every
    segment, in every worker."""
    import torchcodec.decoders

    seen = []
    real = torchcodec.decoders.VideoDecoder

    def recording(*args, **kwargs):
        seen.append(kwargs.get("num_ffmpeg_threads"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torchcodec.decoders, "VideoDecoder", recording)
    data = encode(_frames(3, 32, 32), VideoSettings())
    decode(data, 3, (32, 32, 3))
    decode(data, 3, (32, 32, 3), threads=0)
    assert seen == [1, 0]
