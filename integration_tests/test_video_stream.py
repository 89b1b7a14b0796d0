"""video_stream: LeRobot items decoded straight from the videos, local or remote (a real HTTP server with byte
ranges and moto's S3 API on 127.0.0.1): equal to LeRobotDataset's items, every frame once per pass, seeded
passes, resume at the sampler's offset, about the videos' size read per pass; lerobot-train end to end."""
import glob
import json
import os

import numpy as np
import pytest
import torch

from lerobot_helpers import REPO, random_indices, same_item
from remote_servers import HttpServer, S3Server

from robo_loaders_plugin import BackendOptionError, SourceError, get_backend
from robo_loaders_plugin.core.iteration import record_built
from robo_loaders_plugin.lerobot.factories import LeRobotStreamSamples, video_stream_dataset
from robo_loaders_plugin.lerobot.integration import cycle, sampling_plan
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3, nvdec_problem

NAMES = ["av1_1cam", "h264_3cam_multifile", "png_1cam"]


def native(root, preset="none", return_uint8=True, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(REPO, root=root)
    return LeRobotDataset(REPO, root=root, delta_timestamps=delta_timestamps(preset, meta), return_uint8=return_uint8,
                          **kw)


def sampler_for(nat, seed=3):
    from lerobot.datasets import EpisodeAwareSampler

    return EpisodeAwareSampler(nat.meta.episodes["dataset_from_index"], nat.meta.episodes["dataset_to_index"],
                               episode_indices_to_use=nat.episodes, shuffle=True, seed=seed,
                               absolute_to_relative_idx=nat.absolute_to_relative_idx)


def video_bytes(root) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("preset,return_uint8,buffer", [("act", True, "raw"), ("diffusion", False, "lz4"),
                                                         ("none", True, "raw")])
def test_items_equal_lerobot_dataset(lerobot_datasets, name, preset, return_uint8, buffer):
    nat = native(lerobot_datasets[name], preset, return_uint8)
    ours = video_stream_dataset(nat, buffer=buffer)
    assert isinstance(ours, LeRobotStreamSamples) and len(ours) == len(nat)
    for i in random_indices(len(nat), 120, seed=len(name) + len(preset)):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")


def test_a_pass_serves_every_frame_once_in_a_seeded_order_and_resumes(lerobot_datasets):
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", episodes=[0, 2, 3, 4])
    ds = video_stream_dataset(nat, shuffle_buffer=2, cache_episodes=2, decode_threads=1)
    record_built(get_backend("video_stream"), ds)
    dl = torch.utils.data.DataLoader(ds, batch_size=10, sampler=sampler_for(nat), num_workers=2)
    per_pass = -(-len(nat) // 10)
    stream = cycle(dl)
    batches = [next(stream) for _ in range(per_pass + 3)]
    a2r = nat.absolute_to_relative_idx
    seen = [a2r[int(i)] for b in batches[:per_pass] for i in b["index"]]
    assert sorted(seen) == sorted(sampler_for(nat).indices)  # every frame the sampler serves, exactly once
    for b in (0, per_pass - 1, per_pass + 1):
        rows = [a2r[int(i)] for i in batches[b]["index"]]
        same_item(batches[b], torch.utils.data.default_collate([nat[r] for r in rows]), f"batch {b}")
    assert batches[per_pass]["index"].tolist() != batches[0]["index"].tolist()  # the next pass is another order
    assert ds.frames.cache.loads <= 2 * 4 + 4  # each episode decoded about once per pass (plus the spot checks)
    again = cycle(torch.utils.data.DataLoader(ds, batch_size=10, sampler=sampler_for(nat)))
    assert next(again)["index"].tolist() == batches[0]["index"].tolist()  # seeded: the same first pass
    sampler = sampler_for(nat)  # lerobot-train's --resume: compute_sampler_state(step) -> load_state_dict
    sampler.load_state_dict({"epoch": 1, "start_index": 2 * 10})
    resumed = cycle(torch.utils.data.DataLoader(ds, batch_size=10, sampler=sampler))
    assert next(resumed)["index"].tolist() == batches[per_pass + 2]["index"].tolist()


def one_pass(ds, nat, batch_size=16):
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler_for(nat), num_workers=2)
    return list(ds.batch_source(sampling_plan(dl)))


def test_over_http_only_the_videos_bytes_are_read_once_per_pass(lerobot_datasets):
    root = lerobot_datasets["h264_3cam_multifile"]
    nat = native(root, "act")
    with HttpServer(root) as server:
        ours = video_stream_dataset(nat, source=server.url)
        for i in random_indices(len(nat), 40, seed=1):
            same_item(ours[i], nat[i], f"http[{i}]")
        fresh = video_stream_dataset(nat, source=server.url)
        before = sum(v for k, v in server.served.items() if k.endswith(".mp4"))
        batches = one_pass(fresh, nat)
        served = sum(v for k, v in server.served.items() if k.endswith(".mp4")) - before
    assert sum(len(b["index"]) for b in batches) == len(nat)
    assert served <= 1.2 * video_bytes(root), (served, video_bytes(root))
    assert fresh.frames.cache.loads >= len(nat.meta.episodes)  # ...decoding every episode of the pass


def test_from_s3_items_equal_and_remote_mismatch_refused(lerobot_datasets):
    root = lerobot_datasets["av1_1cam"]
    nat = native(root, "diffusion")
    with S3Server(root) as s3:
        ours = video_stream_dataset(nat, source=s3.url, storage_options=s3.storage_options)
        batches = one_pass(ours, nat)
        for b in batches[:3]:
            same_item(b, torch.utils.data.default_collate([nat[int(i)] for i in b["index"]]), "s3 batch")
        source = LeRobotV3(nat.root, s3.storage_options, videos_from=s3.url)
        assert source.remote_bytes_read == 0
        other = native(lerobot_datasets["h264_3cam_multifile"])
        with pytest.raises(SourceError, match="is not the dataset at"):
            video_stream_dataset(other, source=s3.url, storage_options=s3.storage_options)


def test_bad_options_and_nvdec_codec_check(lerobot_datasets):
    nat = native(lerobot_datasets["av1_1cam"])
    with pytest.raises(BackendOptionError, match="buffer must be 'raw' or 'lz4'"):
        video_stream_dataset(nat, buffer="zip")
    with pytest.raises(BackendOptionError, match="decode_device must be"):
        video_stream_dataset(nat, decode_device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(BackendOptionError, match="decode_device='cuda' but torch sees no CUDA GPU"):
            video_stream_dataset(nat, decode_device="cuda")
        assert video_stream_dataset(nat, decode_device="auto").build_summary.count("(cpu decode") == 1
    av1, h264 = LeRobotV3(lerobot_datasets["av1_1cam"]), LeRobotV3(lerobot_datasets["h264_3cam_multifile"])
    problem = nvdec_problem(av1, "NVIDIA A100-SXM4-80GB")
    assert "cannot decode AV1" in problem and "robo-loaders transcode" in problem
    assert nvdec_problem(av1, "NVIDIA H100 80GB HBM3") and nvdec_problem(av1, "Tesla T4")
    assert nvdec_problem(av1, "NVIDIA L4") is None and nvdec_problem(av1, "NVIDIA GeForce RTX 4090") is None
    assert nvdec_problem(h264, "NVIDIA A100-SXM4-80GB") is None


@pytest.mark.cuda
def test_nvdec_frames_within_the_stated_psnr_of_cpu_decode(lerobot_datasets):
    """NVDEC decodes H.264 within PSNR >= 40 dB of the CPU decode (torchcodec's CUDA build needed)."""
    nat = native(lerobot_datasets["h264_3cam_multifile"])
    cpu, gpu = video_stream_dataset(nat), video_stream_dataset(nat, decode_device="cuda")
    for i in random_indices(len(nat), 20, seed=2):
        a = cpu[i]["observation.images.cam0"].double()
        b = gpu[i]["observation.images.cam0"].cpu().double()
        mse = float(((a - b) ** 2).mean())
        assert mse == 0 or 10 * np.log10(255 ** 2 / mse) >= 40


def test_lerobot_train_local_with_no_options_and_from_s3(lerobot_datasets, tmp_path):
    from test_lerobot_train_cli import lerobot_train, saved_dataset_config

    root = lerobot_datasets["av1_1cam"]
    out = str(tmp_path / "local")
    rc, log = lerobot_train(root, out, "--dataset.backend=video_stream")
    assert rc == 0, log[-3000:]
    assert "lerobot data backend: video_stream" in log and "batches come from the torchdata pipeline" in log
    with S3Server(root) as s3:
        kwargs = json.dumps({"source": s3.url, "storage_options": s3.storage_options})
        out = str(tmp_path / "s3")
        rc, log = lerobot_train(None, out, "--dataset.backend=video_stream", f"--dataset.backend_kwargs={kwargs}",
                                env_extra={"ROBO_LOADERS_CACHE": str(tmp_path / "cache")})
    assert rc == 0, log[-3000:]
    assert f"tables of {s3.url} copied to" in log and f"streamed from {s3.url}" in log, log[-3000:]
    assert saved_dataset_config(out, 3)["backend"] == "video_stream"
