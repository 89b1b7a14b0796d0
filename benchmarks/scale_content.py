"""How the scale workloads' frames compress, beside the 84x84 robosuite renders of ../shared upscaled to the same
sizes, so a reader can judge how camera-like they are (docs/scale.md).

``python benchmarks/scale_content.py WORKLOADS_DIR OUT.json``: for L480 (LeRobot v3, 480x640) and R240 (robomimic,
240x240), on frames sampled evenly from the dataset: the lossless ratio of the project's default codec (Blosc2
LZ4HC level 5, what compressed_cache and datapipe store) and of plain LZ4 (level 5), and the AV1 ratio of the
same 60 consecutive frames of one camera encoded with LeRobot 0.6.1's defaults (libsvtav1, crf 30, GOP 2,
yuv420p, its default preset) through PyAV; for L480 also the ratio of the whole dataset's AV1 files (every frame
decoded against the files' bytes). The references: the same measures on the real renders of
``../shared/data/robosuite_lift_84_20demos.hdf5`` upscaled bilinearly to 480x640 and to 240x240.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data", "robosuite_lift_84_20demos.hdf5")


def lossless(frames: np.ndarray) -> dict:
    from robo_loaders_plugin.storage.codec import FrameCodec

    out = {}
    for name, codec in (("lz4hc_l5", FrameCodec("lz4hc", 5)), ("lz4_l5", FrameCodec("lz4", 5))):
        raw = sum(f.nbytes for f in frames)
        out[name] = round(raw / sum(len(codec.compress(f)) for f in frames), 3)
    return out


def av1_lerobot(frames: np.ndarray, fps: int = 30) -> float:
    """Decoded bytes / encoded bytes of (N, H, W, 3) frames encoded as LeRobot 0.6.1 encodes by default."""
    import io

    import av
    from lerobot.configs.video import RGBEncoderConfig

    cfg = RGBEncoderConfig()  # libsvtav1, yuv420p, g=2, crf=30, LeRobot's default preset
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream(
            cfg.vcodec, rate=fps, options={k: str(v) for k, v in cfg.get_codec_options().items()}
        )
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], cfg.pix_fmt
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return round(frames.nbytes / len(buf.getvalue()), 2)


def upscale(frames: np.ndarray, h: int, w: int) -> np.ndarray:
    import torch

    t = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    t = torch.nn.functional.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)
    return t.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def lerobot_frames(root: str, count: int = 48) -> tuple[np.ndarray, np.ndarray, dict]:
    """``count`` frames sampled across the dataset (HWC), 60 consecutive frames of one camera, and the AV1 files'
    ratio (every frame decoded / the files' bytes)."""
    from torchcodec.decoders import VideoDecoder

    with open(os.path.join(root, "meta", "info.json")) as f:
        info = json.load(f)
    cams = [k for k, v in info["features"].items() if v["dtype"] == "video"]
    files = sorted(glob.glob(os.path.join(root, "videos", cams[0], "**", "*.mp4"), recursive=True))
    dec = VideoDecoder(files[0])
    n = dec.metadata.num_frames
    sample = dec.get_frames_at(indices=np.linspace(0, n - 1, count).astype(int).tolist()).data.numpy()
    run = dec.get_frames_at(indices=list(range(60))).data.numpy()
    h, w, c = info["features"][cams[0]]["shape"]
    decoded = int(info["total_frames"]) * len(cams) * h * w * c
    video = sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True))
    return (
        sample.transpose(0, 2, 3, 1),
        run.transpose(0, 2, 3, 1),
        {"decoded_bytes": decoded, "video_bytes": video, "ratio": round(decoded / video, 2)},
    )


def hdf5_frames(path: str, key: str = "agentview_image", count: int = 48) -> tuple[np.ndarray, np.ndarray]:
    import h5py

    with h5py.File(path, "r") as f:
        demos = sorted(f["data"].keys(), key=lambda n: int(n[5:]))
        picks = np.linspace(0, len(demos) - 1, count).astype(int)
        sample = np.stack(
            [f[f"data/{demos[i]}/obs/{key}"][min(10, f[f"data/{demos[i]}"].attrs["num_samples"] - 1)] for i in picks]
        )
        run = f[f"data/{demos[0]}/obs/{key}"][:60]
    return sample, run


def main(workloads: str, out: str) -> None:
    result = {
        "codec_note": "lossless ratios: decoded bytes / compressed bytes, one Blosc2 chunk per frame (what "
        "compressed_cache and datapipe store); av1_lerobot: 60 consecutive frames of one camera "
        "encoded with LeRobot 0.6.1's default encoder settings (libsvtav1 crf 30, GOP 2, yuv420p)"
    }
    l480 = os.path.join(workloads, "L480")
    if os.path.isdir(l480):
        sample, run, files = lerobot_frames(l480)
        result["L480"] = {
            "content": "camera-like (sample_data/camera.py: textured background, camera shake and pan, "
            "moving textured objects, sensor noise sigma 1)",
            **lossless(sample),
            "av1_lerobot": av1_lerobot(run),
            "av1_dataset_files": files,
        }
    r240 = os.path.join(workloads, "R240.hdf5")
    if os.path.isfile(r240):
        sample, run = hdf5_frames(r240)
        result["R240"] = {
            "content": "render-like (sample_data/scenes.py: shaded table with texture, cube, gripper)",
            **lossless(sample),
            "av1_lerobot": av1_lerobot(run, 20),
        }
    if os.path.isfile(SHARED):
        sample, run = hdf5_frames(SHARED, count=48)
        result["renders_84"] = {
            "content": "robosuite Lift renders, 84x84 as recorded",
            **lossless(sample),
            "av1_lerobot": av1_lerobot(run, 20),
        }
        for name, (h, w) in (("renders_84_upscaled_480x640", (480, 640)), ("renders_84_upscaled_240", (240, 240))):
            result[name] = {
                "content": f"robosuite Lift renders upscaled bilinearly to {h}x{w}",
                **lossless(upscale(sample, h, w)),
                "av1_lerobot": av1_lerobot(upscale(run, h, w), 20),
            }
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.core.files import atomic_write_json

    result["machine"] = machine()
    atomic_write_json(out, result, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
