"""Can NVDEC decode these videos here? Answered before training, so that ``decode_device: cuda`` fails at start-up
with what to do, and ``auto`` picks the CPU with a reason, instead of a decode error mid-run.

Three things must hold, and a GPU alone proves none of them: the GPU's NVDEC has the codec (AV1 is missing on
data-centre GPUs: a table, from NVIDIA's support matrix, that needs no decode); the installed torchcodec is a CUDA
build (the PyPI wheel is CPU-only and refuses ``device="cuda"``); and torchcodec does not silently fall back to a CPU
decoder for the stream (NVCUVID missing, an unsupported profile). The last two are found by decoding a short clip
encoded here, in memory, with the dataset's codec: the probe also backs ``robo-loaders doctor``.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

# GPUs whose NVDEC cannot decode AV1 (NVIDIA's NVDEC support matrix): Pascal, Volta, Turing, GA100 and Hopper,
# matched as whole model names in torch.cuda.get_device_name() ("RTX A3000" and "RTX 2000 Ada" are Ampere GA10x and
# Ada, which can, like A10, A40, L4, L40, RTX 30xx/40xx and Blackwell).
NO_AV1_NVDEC = (
    r"\bA100\b",
    r"\bA800\b",
    r"\bA30\b",
    r"\bH100\b",
    r"\bH200\b",
    r"\bH800\b",
    r"\bH20\b",
    r"\bGH200\b",
    r"\bV100\b",
    r"\bP100\b",
    r"\bP40\b",
    r"\bP4\b",
    r"\bT4\b",
    r"\bT(400|600|1000|1200)\b",
    r"TITAN (V|RTX)\b",
    r"RTX 20[5-8]0",
    r"GTX 16[5-6]0",
    r"Quadro RTX",
)
AV1_CODECS = ("av1", "libsvtav1", "libaom-av1", "libdav1d")
_PROBE_CODECS = {
    "h264": "h264",
    "libx264": "h264",
    "avc": "h264",
    "hevc": "hevc",
    "h265": "hevc",
    "libx265": "hevc",
    **dict.fromkeys(AV1_CODECS, "av1"),
}
MIN_PROBE_PSNR = 30.0  # the probe clip decodes at over 40 dB on the CPU with every codec
CUDA_BUILD_HINT = (
    "the installed torchcodec is a CPU-only build (the PyPI wheel is): install the CUDA build from "
    "PyTorch's index, e.g. pip install 'torchcodec<0.12' --index-url "
    "https://download.pytorch.org/whl/cu126 (docs/video-stream.md)"
)


def video_codecs(source) -> dict[str, str]:
    """Camera key -> codec name as ``meta/info.json`` records it.

    Args:
        source: A LeRobot v3 source (its ``features`` and ``video_keys``).

    Returns:
        ``{camera key: codec}``, lower case; ``''`` when not recorded.
    """
    return {k: str((source.features[k].get("info") or {}).get("video.codec", "")).lower() for k in source.video_keys}


def lacks_av1(gpu_name: str) -> bool:
    """Whether NVIDIA's table says NVDEC on ``gpu_name`` has no AV1 (:data:`NO_AV1_NVDEC`).

    Args:
        gpu_name: As ``torch.cuda.get_device_name()`` gives it.
    """
    return any(re.search(pattern, gpu_name) for pattern in NO_AV1_NVDEC)


def nvdec_problem(source, gpu_name: str) -> str | None:
    """Why NVDEC on ``gpu_name`` cannot decode this dataset's videos by NVIDIA's table, if it cannot.

    Args:
        source: A LeRobot v3 source.
        gpu_name: As ``torch.cuda.get_device_name()`` gives it.

    Returns:
        What to do (decode on the CPU, or transcode to H.264) when some camera is AV1 and the GPU has no AV1 NVDEC;
        else ``None``.
    """
    av1 = [k for k, codec in video_codecs(source).items() if codec in AV1_CODECS]
    if av1 and lacks_av1(gpu_name):
        return (
            f"NVDEC on {gpu_name} cannot decode AV1, and {', '.join(av1)} are AV1 (LeRobot's default encoding). "
            "Decode on the CPU (decode_device: cpu), or train from an H.264 copy of the dataset (same tables, "
            f"frames and timestamps): robo-loaders transcode {source.root} <OUT> --codec h264 "
            "(docs/transcode.md)"
        )
    return None


def open_decoder(src, device: str):
    """A torchcodec ``VideoDecoder`` opened the way the backends decoding video open every one (LeRobot's
    approximate seek mode; NVDEC under the beta CUDA backend), so that the probe tests exactly what training will
    use.

    Args:
        src: What ``VideoDecoder`` reads: a path, bytes or a file-like object.
        device: ``"cpu"``, or a CUDA device (``"cuda"``, ``"cuda:1"``).

    Returns:
        The decoder.
    """
    from torchcodec.decoders import VideoDecoder, set_cuda_backend

    if device == "cpu":
        return VideoDecoder(src, seek_mode="approximate")
    with set_cuda_backend("beta"):
        return VideoDecoder(src, seek_mode="approximate", device=device)


@dataclasses.dataclass(frozen=True)
class Probe:
    """What :func:`probe` found.

    Attributes:
        codec: The codec probed.
        device: The device it was decoded on.
        ok: Whether the device decodes it (no CPU fallback, frames close to the clip encoded).
        detail: What was found, or what to do about it.
    """

    codec: str
    device: str
    ok: bool
    detail: str


@functools.cache
def probe(codec: str = "h264", device: str = "cuda") -> Probe:
    """Decode an 8-frame 64x64 yuv420p clip (LeRobot's pixel format) of ``codec`` on ``device`` as
    :func:`open_decoder` opens the backends' decoders, and compare it with the frames encoded. Once per process and
    (codec, device) (cached).

    Args:
        codec: The codec to encode the clip with (``h264``, ``hevc``, ``av1``).
        device: Where to decode it.

    Returns:
        The :class:`Probe`: not ok when decoding fails (a CPU-only torchcodec build names the fix), when torchcodec
        fell back to a CPU decoder, or when the frames are under :data:`MIN_PROBE_PSNR` from the clip.

    Raises:
        VideoError: this PyAV cannot encode the clip.
    """
    from robo_loaders_plugin.storage.video import VideoSettings, encode, psnr

    yy, xx = np.mgrid[0:64, 0:64]
    frames = np.stack([np.stack([xx * 3 + 4 * t, yy * 3 + 20, (xx + yy) + 60 + 6 * t], -1) for t in range(8)]).astype(
        np.uint8
    )  # smooth: yuv420p's halved chroma loses little
    data = encode(frames, VideoSettings(codec=codec, pix_fmt="yuv420p", gop=4), f"the {codec} probe clip")
    try:
        dec = open_decoder(data, device)
        out = dec.get_frames_at(indices=list(range(len(frames)))).data
    except Exception as exc:  # noqa: BLE001 - RuntimeError from torchcodec's C++ core: no other type to catch
        text = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        if "Unsupported device" in text:
            return Probe(codec, device, False, CUDA_BUILD_HINT)
        return Probe(codec, device, False, f"decoding a {codec} clip on {device} failed: {text[:200]}")
    if device != "cpu" and bool(dec.cpu_fallback):
        return Probe(
            codec, device, False, f"torchcodec decodes {codec} on the CPU instead of NVDEC ({dec.cpu_fallback})"
        )
    db = psnr(out.cpu().numpy().transpose(0, 2, 3, 1), frames)
    if db < MIN_PROBE_PSNR:
        return Probe(
            codec,
            device,
            False,
            f"{codec} frames decoded on {device} are {db:.1f} dB from the clip "
            f"encoded (a working decoder gives over {MIN_PROBE_PSNR:.0f} dB)",
        )
    return Probe(codec, device, True, f"decodes {codec} ({db:.1f} dB against the clip encoded)")


def nvdec_unusable(source) -> str | None:
    """Why NVDEC cannot decode ``source``'s videos in this process, or ``None`` when it can.

    Decoding decides (a GPU the table lists may have been misread by name); the table turns an AV1 failure into what
    to do about it. H.264 is probed first: it proves the torchcodec build.

    Args:
        source: A LeRobot v3 source.

    Returns:
        The reason (no CUDA GPU, a CPU-only torchcodec, a codec NVDEC does not decode here), or ``None``.
    """
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    codecs = sorted({_PROBE_CODECS.get(c, "h264") for c in video_codecs(source).values()})
    for codec in ["h264"] + [c for c in codecs if c != "h264"]:  # H.264 first: it proves the torchcodec build
        p = probe(codec, "cuda")
        if not p.ok:
            return (
                codec == "av1" and nvdec_problem(source, torch.cuda.get_device_name())
            ) or f"NVDEC cannot be used here: {p.detail}"
    return None
