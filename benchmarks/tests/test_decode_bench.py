"""``python -m benchmarks.harness decode``: video_stream's decoder alone, every frame of every camera once per
device row, on the generated datasets (tiny: this checks the plumbing, never speed)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def harness(args):
    """The harness as the benchmark scripts run it: from the repository root."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    return p.returncode, p.stdout + p.stderr


def test_bench_decode(lerobot_datasets, tmp_path):
    """Every frame of every camera decoded once per row; a second cpu row is compared with the first (the path NVDEC
    rows take on a GPU), and cuda is a row that says why it was not measured where it cannot run."""
    import torch

    from robo_loaders_plugin.storage.video import PSNR_CAP

    out = tmp_path / "d.json"
    root = lerobot_datasets["h264_3cam_multifile"]
    rc, log = harness(["decode", "--root", str(root), "--devices", "cpu,cpu,cuda", "--json", str(out)])
    assert rc == 0, log[-3000:]
    data = json.loads(out.read_text())
    cpu, again, cuda = data["results"]
    info = json.loads((root / "meta" / "info.json").read_text())
    cams = ["observation.images.cam0", "observation.images.cam1", "observation.images.cam2"]
    assert data["codecs"] == dict.fromkeys(cams, "h264") and data["episodes"] == info["total_episodes"]
    for r in (cpu, again):
        assert r["frames"] == 3 * info["total_frames"] and r["frames_per_s"] > 0 and r["cpu_fallback"] == []
    assert cpu["frames_per_s_vs_cpu"] == 1.0 and "psnr_db_vs_cpu" not in cpu
    assert again["psnr_db_vs_cpu"] == dict.fromkeys(cams, PSNR_CAP)  # CPU decoding is deterministic
    if not torch.cuda.is_available():
        assert cuda == {"device": "cuda", "not_measured": "torch sees no CUDA GPU"}
    rc, log = harness(["decode", "--root", str(root), "--devices", "cpu,nvdec"])
    assert rc == 2 and "nvdec: devices are cpu and cuda" in log


@pytest.mark.cuda
def test_bench_decode_nvdec(lerobot_datasets, tmp_path):
    """On a GPU: NVDEC decodes the H.264 dataset within 40 dB of the CPU decode (docs/video-stream.md), and an AV1
    dataset on a GPU whose NVDEC cannot decode AV1 is the refusal row, not a number."""
    import torch

    from robo_loaders_plugin.sources.nvdec import lacks_av1

    out = tmp_path / "d.json"
    rc, log = harness(["decode", "--root", str(lerobot_datasets["h264_3cam_multifile"]), "--json", str(out)])
    assert rc == 0, log[-3000:]
    cpu, cuda = json.loads(out.read_text())["results"]
    assert cuda["frames"] == cpu["frames"] and min(cuda["psnr_db_vs_cpu"].values()) >= 40, cuda
    rc, log = harness(["decode", "--root", str(lerobot_datasets["av1_1cam"]), "--json", str(out)])
    assert rc == 0, log[-3000:]
    cuda = json.loads(out.read_text())["results"][1]
    if lacks_av1(torch.cuda.get_device_name()):
        assert "cannot decode AV1" in cuda["not_measured"] and "robo-loaders transcode" in cuda["not_measured"]
    else:
        assert cuda["frames"] > 0 and min(cuda["psnr_db_vs_cpu"].values()) >= 40, cuda
