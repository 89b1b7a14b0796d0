"""video_stream: LeRobot items decoded straight from the videos, local or remote (a real HTTP server with byte
ranges and moto's S3 API on 127.0.0.1): equal to LeRobotDataset's items, every frame once per pass, seeded
passes, resume at the sampler's offset, about the videos' size read per pass; lerobot-train end to end."""

import glob
import json
import os
import pickle

import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, drop_a_frame, random_indices, same_item, serve
from remote_servers import HttpServer, S3Server

from robo_loaders_plugin import BackendOptionError, SourceError
from robo_loaders_plugin.backends.video_stream.lerobot import LeRobotStreamSamples
from robo_loaders_plugin.lerobot.integration import cycle, sampling_plan
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3
from robo_loaders_plugin.sources.nvdec import nvdec_problem
from robo_loaders_plugin.testing import episode_aware_sampler

NAMES = ["av1_1cam", "h264_3cam_multifile", "png_1cam"]


def native(root, preset="none", return_uint8=True, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(REPO, root=root)
    return LeRobotDataset(
        REPO, root=root, delta_timestamps=delta_timestamps(preset, meta), return_uint8=return_uint8, **kw
    )


def sampler_for(nat, seed=3):
    """lerobot-train's sampler for ``nat`` (seed 3 unless given)."""
    return episode_aware_sampler(nat, seed=seed)


def video_bytes(root) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "videos", "**", "*.mp4"), recursive=True))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "preset,return_uint8,buffer",
    [  # fast: a quick parity check of `make test-fast`
        ("act", True, "raw"),
        pytest.param("diffusion", False, "lz4", marks=pytest.mark.fast),
        ("none", True, "raw"),
    ],
)
def test_items_equal_lerobot_dataset(lerobot_datasets, name, preset, return_uint8, buffer):
    nat = native(lerobot_datasets[name], preset, return_uint8)
    ours = serve("video_stream", nat, buffer=buffer)
    assert isinstance(ours, LeRobotStreamSamples) and len(ours) == len(nat)
    for i in random_indices(len(nat), 120, seed=len(name) + len(preset)):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")


@pytest.mark.parametrize("buffer", ["raw", "lz4"])
def test_sparse_windows_clamped_at_episode_edges_equal_lerobot_dataset(lerobot_datasets, buffer):
    """A reviewer's reproduction: offsets that do not follow one another ((-4, -1, 0, 2, 6) frames), clamped at an
    episode's last step, read steps 7, 10, 11, 11, 11, whose span is T - 1 like a run's: the raw buffer copied the
    slice 7..11, other frames than LeRobot's with the same ``_is_pad``. Every item at the episodes' edges is
    LeRobot's. Control: some of them are clamped (a padded step)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    root = lerobot_datasets["h264_3cam_multifile"]
    meta = LeRobotDatasetMetadata(REPO, root=root)
    deltas = {k: [d / meta.fps for d in (-4, -1, 0, 2, 6)] for k in meta.camera_keys}
    deltas["action"] = [d / meta.fps for d in (0, 5, 10)]
    nat = LeRobotDataset(REPO, root=root, delta_timestamps=deltas, return_uint8=True)
    ours = serve("video_stream", nat, buffer=buffer)
    starts = nat.meta.episodes["dataset_from_index"]
    ends = nat.meta.episodes["dataset_to_index"]
    edges = sorted({i for a, z in zip(starts, ends) for i in (*range(a, a + 3), *range(z - 7, z)) if a <= i < z})
    padded = 0
    for i in edges:
        theirs = nat[i]
        padded += int(theirs[f"{meta.camera_keys[0]}_is_pad"].any())
        same_item(ours[i], theirs, f"sparse/{buffer}[{i}]")
    assert padded >= 4  # control


def _edge_timestamp(start: float, ts: float, pts: float, tol: float, lerobot_serves: bool) -> float | None:
    """A float32 timestamp near ``ts`` whose frame LeRobot serves (or refuses) while float64 arithmetic would say
    the opposite: LeRobot compares ``|start + ts - pts|`` as float32 tensors with the tolerance as a float32."""
    for way in (np.inf, -np.inf):
        t = np.float32(ts)
        for _ in range(20_000):
            t = np.nextafter(t, np.float32(way))
            d64 = abs(start + float(t) - pts)
            d32 = abs(np.float32(start + float(t)) - np.float32(pts))
            if bool(d32 < np.float32(tol)) == lerobot_serves and (d64 < tol) != lerobot_serves:
                return float(t)
    return None


@pytest.mark.parametrize("lerobot_serves", [True, False])
def test_the_timestamp_tolerance_at_its_edge_decides_as_lerobot(lerobot_datasets, tmp_path, lerobot_serves):
    """A reviewer's reproduction: LeRobot compares a frame's time with its query in float32, the plugin compared in
    float64, so a timestamp at the tolerance's edge (an episode deep in a shared video file) was refused where
    LeRobot served it, or served where LeRobot raises ``FrameTimestampError``. One row's timestamp is moved to such
    an edge; ``video_stream`` decides as LeRobot. Control: float64 arithmetic decides the other way for it."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from torchcodec.decoders import VideoDecoder

    root = tmp_path / "edge"
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    meta = LeRobotDatasetMetadata(REPO, root=root)
    key, tol = meta.camera_keys[0], 1e-4
    episodes = meta.episodes
    edge = None
    for ep in range(len(episodes)):  # a row whose float32 rounding decides the other way: deep in a shared file
        start = float(episodes[f"videos/{key}/from_timestamp"][ep])
        video = root / meta.video_path.format(
            video_key=key,
            chunk_index=episodes[f"videos/{key}/chunk_index"][ep],
            file_index=episodes[f"videos/{key}/file_index"][ep],
        )
        decoder = VideoDecoder(str(video))
        for step in range(3, 40):
            ts = step / meta.fps
            pts = float(decoder.get_frames_at([round((start + ts) * decoder.metadata.average_fps)]).pts_seconds[0])
            edge = _edge_timestamp(start, ts, pts, tol, lerobot_serves)
            if edge is not None:
                break
        if edge is not None:
            break
    assert edge is not None
    row = int(episodes["dataset_from_index"][ep]) + step
    assert (abs(start + edge - pts) < tol) != lerobot_serves  # control: float64 decides the other way
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        index = table.column("index").to_numpy()
        if row in index:
            stamps = table.column("timestamp").to_numpy().copy()
            stamps[int(np.flatnonzero(index == row)[0])] = np.float32(edge)
            i = table.schema.get_field_index("timestamp")
            pq.write_table(table.set_column(i, "timestamp", pa.array(stamps, pa.float32())), path)
    nat = LeRobotDataset(REPO, root=root, return_uint8=True, tolerance_s=tol)
    if lerobot_serves:
        ours = serve("video_stream", nat)
        same_item(ours[row], nat[row], f"edge[{row}]")
    else:
        with pytest.raises(Exception, match="tolerance"):
            nat[row]
        with pytest.raises(SourceError, match=r"violate the timestamp tolerance .* s apart\)"):  # the gap said
            serve("video_stream", nat)[row]


@pytest.mark.parametrize("buffer", ["raw", "lz4"])
def test_the_dataset_pickles_for_a_dataloader_with_workers(lerobot_datasets, buffer):
    """LeRobot's evaluation loader (``--dataset.eval_split``) serves the dataset from worker processes: it must
    pickle (it failed: a closure decoded the units) and serve the same items once unpickled."""
    import pickle

    nat = native(lerobot_datasets["h264_3cam_multifile"], "act")
    ours = serve("video_stream", nat, buffer=buffer)
    again = pickle.loads(pickle.dumps(ours))
    for i in (0, len(nat) // 2, len(nat) - 1):
        same_item(again[i], nat[i], f"unpickled[{i}]")


def test_a_pass_serves_every_frame_once_in_a_seeded_order_and_resumes(lerobot_datasets):
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", episodes=[0, 2, 3, 4])
    ds = serve("video_stream", nat, shuffle_buffer=2, cache_episodes=2, decode_threads=1)
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


def test_batches_held_are_never_overwritten_and_dropped_ones_are_recycled(lerobot_datasets):
    """Batch arrays come from a pool (fresh ones cost a page fault per 4 KiB): a batch the training loop still
    holds must keep its values while the threads assemble the next ones; a dropped one is written again."""
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion")
    ds = serve("video_stream", nat, shuffle_buffer=2, decode_threads=1)
    cam = nat.meta.video_keys[0]
    held = one_pass(ds, nat)  # every batch of a pass alive at once
    copies = [{k: v.clone() for k, v in b.items() if isinstance(v, torch.Tensor)} for b in held]
    assert len(one_pass(ds, nat)) == len(held)  # a second pass assembled while the first is still held
    for n, (batch, copy) in enumerate(zip(held, copies)):
        for k, v in copy.items():
            assert torch.equal(batch[k], v), f"batch {n} {k} was overwritten"
    same_item(held[3], torch.utils.data.default_collate([nat[int(i)] for i in held[3]["index"]]), "held batch 3")
    del held, copies, batch
    dl = torch.utils.data.DataLoader(ds, batch_size=16, sampler=sampler_for(nat), num_workers=2)
    ptrs = [batch[cam].data_ptr() for batch in ds.batch_source(sampling_plan(dl))]  # each dropped at once
    pooled = {buf.ctypes.data for bufs in ds.buffer_pool._free.values() for buf in bufs}
    assert set(ptrs) <= pooled and len(set(ptrs)) <= 3 * 8 < len(ptrs), "dropped batches' arrays are not recycled"


def test_over_http_only_the_videos_bytes_are_read_once_per_pass(lerobot_datasets):
    root = lerobot_datasets["h264_3cam_multifile"]
    nat = native(root, "act")
    with HttpServer(root) as server:
        ours = serve("video_stream", nat, source=server.url)
        for i in random_indices(len(nat), 40, seed=1):
            same_item(ours[i], nat[i], f"http[{i}]")
        # having served items (its remote blocks held, with locks), it still pickles for a spawned worker, which
        # reads its own blocks (a reviewer's reproduction: "cannot pickle '_thread.lock' object")
        assert ours.source._blocks is not None  # control: it holds them here
        copy = pickle.loads(pickle.dumps(ours))
        same_item(copy[3], nat[3], "http, unpickled")
        fresh = serve("video_stream", nat, source=server.url)
        before = sum(v for k, v in server.served.items() if k.endswith(".mp4"))
        batches = one_pass(fresh, nat)
        served = sum(v for k, v in server.served.items() if k.endswith(".mp4")) - before
    assert sum(len(b["index"]) for b in batches) == len(nat)
    assert served <= 1.2 * video_bytes(root), (served, video_bytes(root))
    assert fresh.frames.cache.loads >= len(nat.meta.episodes)  # ...decoding every episode of the pass


def test_the_mirror_of_a_remote_datasets_tables_is_held_while_used(lerobot_datasets, tmp_path):
    """A reviewer's reproduction: the local mirror of a remote dataset's tables took no use lock, so ``robo-loaders
    cache clear`` (or another run's prune) removed it under the run reading it. It is held for the process's life.
    Control: a mirror no process holds is removed."""
    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.single import remote_tables
    from robo_loaders_plugin.storage import cache

    root = lerobot_datasets["av1_1cam"]
    with HttpServer(root) as server:
        choice = choose("video_stream", source=server.url, cache_dir=str(tmp_path / "cache"))
        local = remote_tables(server.url, choice)
    entry = cache.Entry(os.path.dirname(local), os.path.basename(local))
    assert os.path.isdir(os.path.join(local, "meta")) and entry.in_use()
    assert not entry.remove() and os.path.isdir(local)
    stale = cache.Entry(os.path.dirname(local), "remote-tables-0123456789abcdef")
    os.makedirs(stale.path)
    assert stale.remove() and not os.path.exists(stale.path)  # control


def test_from_s3_items_equal_and_remote_mismatch_refused(lerobot_datasets):
    root = lerobot_datasets["av1_1cam"]
    nat = native(root, "diffusion")
    with S3Server(root) as s3:
        ours = serve("video_stream", nat, source=s3.url, storage_options=s3.storage_options)
        batches = one_pass(ours, nat)
        for b in batches[:3]:
            same_item(b, torch.utils.data.default_collate([nat[int(i)] for i in b["index"]]), "s3 batch")
        source = LeRobotV3(nat.root, s3.storage_options, videos_from=s3.url)
        assert source.remote_bytes_read == 0
        other = native(lerobot_datasets["h264_3cam_multifile"])
        with pytest.raises(SourceError, match="is not the dataset at"):
            serve("video_stream", other, source=s3.url, storage_options=s3.storage_options)


def test_bad_options_and_nvdec_codec_check(lerobot_datasets):
    nat = native(lerobot_datasets["av1_1cam"])
    with pytest.raises(BackendOptionError, match="buffer must be one of 'raw', 'lz4', got 'zip'"):
        serve("video_stream", nat, buffer="zip")
    with pytest.raises(BackendOptionError, match="decode_device must be"):
        serve("video_stream", nat, decode_device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(BackendOptionError, match="decode_device='cuda' but torch sees no CUDA GPU"):
            serve("video_stream", nat, decode_device="cuda")
        assert serve("video_stream", nat, decode_device="auto").serving.summary.count("(cpu decode") == 1
    av1, h264 = LeRobotV3(lerobot_datasets["av1_1cam"]), LeRobotV3(lerobot_datasets["h264_3cam_multifile"])
    problem = nvdec_problem(av1, "NVIDIA A100-SXM4-80GB")
    assert "cannot decode AV1" in problem and "decode_device: cpu" in problem and "H.264" in problem
    assert f"robo-loaders transcode {av1.root} <OUT> --codec h264" in problem
    assert nvdec_problem(av1, "NVIDIA H100 80GB HBM3") and nvdec_problem(av1, "Tesla T4")
    assert nvdec_problem(av1, "NVIDIA L4") is None and nvdec_problem(av1, "NVIDIA GeForce RTX 4090") is None
    assert nvdec_problem(h264, "NVIDIA A100-SXM4-80GB") is None


def test_a_torchcodec_without_cuda_is_refused_before_training_not_mid_run(lerobot_datasets, monkeypatch, capsys):
    """On a GPU machine with the CPU-only torchcodec wheel (what `pip install lerobot` gives), decode_device='cuda'
    fails at start-up naming the build to install (it failed at the first decode as a "corrupt file"), and 'auto'
    decodes on the CPU and says why. The GPU is simulated (torch.cuda's answers); the refusal is torchcodec's own."""
    import torchcodec

    if "+cpu" not in torchcodec.__version__:
        pytest.skip(f"torchcodec {torchcodec.__version__} is a CUDA build")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    for name in ("h264_3cam_multifile", "av1_1cam"):  # on an A100 the build is reported first, then AV1
        nat = native(lerobot_datasets[name])
        with pytest.raises(
            BackendOptionError,
            match=r"decode_device='cuda': NVDEC cannot be used here: the "
            r"installed torchcodec is a CPU-only build .*--index-url",
        ):
            serve("video_stream", nat, decode_device="cuda")
        capsys.readouterr()
        ds = serve("video_stream", nat, decode_device="auto")
        assert "(cpu decode" in ds.serving.summary
        assert (
            "video_stream: decoding on the CPU: NVDEC cannot be used here: the installed torchcodec is a "
            "CPU-only build" in capsys.readouterr().out
        )


@pytest.mark.cuda
def test_nvdec_frames_within_the_stated_psnr_of_cpu_decode(lerobot_datasets):
    """NVDEC decodes H.264 within PSNR >= 40 dB of the CPU decode (torchcodec's CUDA build needed)."""
    nat = native(lerobot_datasets["h264_3cam_multifile"])
    cpu, gpu = serve("video_stream", nat), serve("video_stream", nat, decode_device="cuda")
    for i in random_indices(len(nat), 20, seed=2):
        a = cpu[i]["observation.images.cam0"].double()
        b = gpu[i]["observation.images.cam0"].cpu().double()
        mse = float(((a - b) ** 2).mean())
        assert mse == 0 or 10 * np.log10(255**2 / mse) >= 40


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
        rc, log = lerobot_train(
            None,
            out,
            "--dataset.backend=video_stream",
            f"--dataset.backend_kwargs={kwargs}",
            env_extra={"ROBO_LOADERS_CACHE": str(tmp_path / "cache")},
        )
    assert rc == 0, log[-3000:]
    assert f"tables of {s3.url} copied to" in log and f"streamed from {s3.url}" in log, log[-3000:]
    assert saved_dataset_config(out, 3)["backend"] == "video_stream"


# -- local_cache_dir: whole copies of remote videos, checked against the remote file and their own SHA-256 --------
CACHE_LENGTHS = (30, 41, 26)


@pytest.fixture(scope="module")
def twin_datasets(tmp_path_factory):
    """Two small AV1 datasets with the same episodes and file layout but other pixels (seeds): replacing one's
    video with the other's is a remote file that changed."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    base = tmp_path_factory.mktemp("twins")
    return [
        write_lerobot_dataset(
            base / name,
            episode_lengths=CACHE_LENGTHS,
            cameras=1,
            image_size=(24, 32),
            mode="av1",
            seed=seed,
            progress=False,
        )
        for name, seed in (("a", 11), ("b", 12))
    ]


def cached_copies(cache_dir) -> dict:
    paths = glob.glob(os.path.join(str(cache_dir), "**", "*.mp4"), recursive=True)
    return {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in paths}


def test_local_cache_dir_from_s3_items_equal_and_a_second_run_reads_no_video_bytes(lerobot_datasets, tmp_path):
    root = lerobot_datasets["h264_3cam_multifile"]
    nat = native(root, "diffusion")
    cache = tmp_path / "cache"
    with S3Server(root) as s3:
        first = serve(
            "video_stream", nat, source=s3.url, storage_options=s3.storage_options, local_cache_dir=str(cache)
        )
        assert "videos copied whole into" in first.serving.summary
        batches = one_pass(first, nat)
        assert sum(len(b["index"]) for b in batches) == len(nat)
        for b in batches[:2] + batches[-1:]:
            same_item(b, torch.utils.data.default_collate([nat[int(i)] for i in b["index"]]), "cached s3 batch")
        n_files = len(first.source.video_files())
        assert first.source.file_cache.downloads == n_files and len(cached_copies(cache)) == n_files
        assert first.source.remote_bytes_read == video_bytes(root)  # each file whole, once
        copies = cached_copies(cache)
        second = serve(
            "video_stream", nat, source=s3.url, storage_options=s3.storage_options, local_cache_dir=str(cache)
        )
        batches = one_pass(second, nat)
        for i in random_indices(len(nat), 30, seed=4):
            same_item(second[i], nat[i], f"second run [{i}]")
    assert sum(len(b["index"]) for b in batches) == len(nat)
    assert second.source.remote_bytes_read == 0 and second.source.file_cache.downloads == 0
    assert cached_copies(cache) == copies  # the same files, not rewritten


def test_local_cache_dir_over_http_second_run_served_zero_video_bytes(lerobot_datasets, tmp_path):
    """Counted by the server: the first run fetches each video once, whole; the second only asks for headers."""
    root = lerobot_datasets["av1_1cam"]
    nat = native(root)
    with HttpServer(root) as server:
        one_pass(serve("video_stream", nat, source=server.url, local_cache_dir=str(tmp_path)), nat)
        first = sum(v for k, v in server.served.items() if k.endswith(".mp4"))
        again = serve("video_stream", nat, source=server.url, local_cache_dir=str(tmp_path))
        for i in random_indices(len(nat), 20, seed=5):
            same_item(again[i], nat[i], f"http cached [{i}]")
        one_pass(again, nat)
        second = sum(v for k, v in server.served.items() if k.endswith(".mp4")) - first
    # (the server's count includes its response headers)
    assert video_bytes(root) <= first <= video_bytes(root) + 2048 and second == 0, (first, second)


def test_a_server_ignoring_range_requests_is_served_from_whole_copies(lerobot_datasets, tmp_path):
    """``python -m http.server`` ignores Range requests: the remote episode table was read by ranges and failed
    with a traceback through pyarrow, even with ``local_cache_dir``, whose whole copies need no Range (a
    reviewer's reproduction, on a table larger than fsspec's block: here the block is made smaller than the
    table). The table is now fetched whole, and every item equals LeRobot's (control: a server answering ranges)."""
    root = lerobot_datasets["av1_1cam"]
    nat = native(root)
    small_blocks = {"block_size": 512}
    for ranges in (False, True):
        with HttpServer(root, ranges=ranges) as server:
            copies = serve(
                "video_stream",
                nat,
                source=server.url,
                storage_options=small_blocks,
                local_cache_dir=str(tmp_path / str(ranges)),
            )
            for i in random_indices(len(nat), 10, seed=6):
                same_item(copies[i], nat[i], f"whole copies, ranges {ranges} [{i}]")


def test_a_server_ignoring_range_requests_without_local_copies_is_said_so(lerobot_datasets, monkeypatch):
    """A reviewer's reproduction: streamed by blocks (no ``local_cache_dir``) from a server ignoring Range, a video
    larger than a block was refused with "the connection broke ... check the network, the endpoint and the
    credentials", which does not apply; the line says what does (a server answering ranges, or local_cache_dir).
    Control: the same server with ranges serves LeRobot's items."""
    from robo_loaders_plugin.sources import remote_blocks

    small = remote_blocks.BlockCache.__init__
    monkeypatch.setattr(  # the videos span several blocks
        remote_blocks.BlockCache, "__init__", lambda self, fs, block=1024, **kw: small(self, fs, block, **kw)
    )
    nat = native(lerobot_datasets["av1_1cam"])
    with HttpServer(lerobot_datasets["av1_1cam"], ranges=False) as server:
        ours = serve("video_stream", nat, source=server.url)
        with pytest.raises(SourceError, match=r"ignores HTTP Range requests.*or set local_cache_dir") as err:
            ours[0]
        assert "check the network" not in str(err.value)
    with HttpServer(lerobot_datasets["av1_1cam"]) as server:
        same_item(serve("video_stream", nat, source=server.url)[0], nat[0], "ranges answered")


def test_local_cache_dir_refreshes_a_replaced_remote_file_and_damaged_copies(twin_datasets, tmp_path, capsys):
    import s3fs

    a, b = twin_datasets
    nat_a, nat_b = native(a), native(b)
    cache = str(tmp_path / "cache")
    cam = "observation.images.cam0"
    rows = [0, 35, len(nat_a) - 1]  # one per episode: every episode reads the (single) video file

    def open_cached():
        ds = serve("video_stream", nat_a, source=s3.url, storage_options=s3.storage_options, local_cache_dir=cache)
        return ds, {i: ds[i][cam] for i in rows}

    with S3Server(a) as s3:
        ds, frames = open_cached()
        for i in rows:
            assert torch.equal(frames[i], nat_a[i][cam])
            assert not torch.equal(nat_a[i][cam], nat_b[i][cam])  # negative control: the twins differ
        (copy,) = cached_copies(cache)
        rel = os.path.relpath(ds.source.video_files()[0], ds.source.video_root)
        assert "downloading it again" not in capsys.readouterr().out  # the first copy is no news

        fs = s3fs.S3FileSystem(**s3.storage_options)  # the remote file is replaced by other content
        fs.put_file(os.path.join(b, rel), f"{s3.bucket}/{s3.prefix}/{rel}")
        ds, frames = open_cached()
        assert "the remote file changed since it was copied" in capsys.readouterr().out
        assert ds.source.file_cache.downloads == 1
        for i in rows:
            assert torch.equal(frames[i], nat_b[i][cam]), f"row {i}: the stale copy was served"

        size = os.path.getsize(copy)  # truncated copy
        with open(copy, "r+b") as f:
            f.truncate(size // 2)
        ds, frames = open_cached()
        assert "the local copy is truncated" in capsys.readouterr().out and ds.source.file_cache.downloads == 1
        assert os.path.getsize(copy) == size and all(torch.equal(frames[i], nat_b[i][cam]) for i in rows)

        with open(copy, "r+b") as f:  # one flipped bit, same size
            f.seek(size // 2)
            byte = f.read(1)[0]
            f.seek(size // 2)
            f.write(bytes([byte ^ 0x10]))
        ds, frames = open_cached()
        assert "SHA-256 differs" in capsys.readouterr().out and ds.source.file_cache.downloads == 1
        assert all(torch.equal(frames[i], nat_b[i][cam]) for i in rows)

        ds, frames = open_cached()  # intact and unchanged: served without a download or a word
        assert ds.source.file_cache.downloads == 0 and "downloading it again" not in capsys.readouterr().out


def flip_a_bit_that_changes_a_value(path, column="action"):
    """Flip one bit of a parquet file (same size) inside ``column``'s data so that the file still reads and a value
    of the column differs: the damage a disk or a copy does silently. Returns (offset, values before, after)."""
    import pyarrow.parquet as pq

    before = pq.read_table(path).column(column).to_pylist()
    meta = pq.ParquetFile(path).metadata
    chunk = next(
        meta.row_group(0).column(i)
        for i in range(meta.num_columns)
        if meta.row_group(0).column(i).path_in_schema.split(".")[0] == column
    )
    data = bytearray(open(path, "rb").read())
    start = chunk.dictionary_page_offset or chunk.data_page_offset  # dictionary-encoded: the values are there
    for offset in range(start + 32, start + chunk.total_compressed_size):
        for bit in (0x01, 0x10):
            data[offset] ^= bit
            with open(path, "wb") as f:
                f.write(data)
            try:
                after = pq.read_table(path).column(column).to_pylist()
                if after != before:
                    return offset, before, after
            except Exception:  # noqa: BLE001 - this flip broke the file: try another one
                pass
            data[offset] ^= bit
    raise AssertionError(f"no single bit flip in {path} changes {column} and keeps the file readable")


def test_mirrored_tables_are_checked_by_their_own_sha256_and_downloaded_again(twin_datasets, tmp_path):
    """Issue 23 A1: the local mirror of a remote dataset's tables was trusted by size and ETag alone, so one flipped
    bit in a mirrored parquet file (same size) was reused and a wrong action served. Each copy's SHA-256, recorded
    when it was downloaded, is now checked on every mirror_tables (the local_cache_dir code): a damaged copy is
    downloaded again, with a log line, and the remote values are served."""
    import pyarrow.parquet as pq

    from robo_loaders_plugin.sources.lerobot_v3 import mirror_tables

    root = twin_datasets[0]
    local, logs = str(tmp_path / "mirror"), []
    with S3Server(root) as s3:

        def mirrored():
            return mirror_tables(s3.url, local, s3.storage_options, log=logs.append)

        assert mirrored() == local and not logs  # a first copy is no news
        rel = os.path.relpath(sorted(glob.glob(os.path.join(root, "data", "*", "*.parquet")))[0], root)
        copy, original = os.path.join(local, rel), os.path.join(root, rel)
        stat = os.stat(copy)
        mirrored()  # negative control: intact copies are verified, neither rewritten nor reported
        assert not logs and os.stat(copy).st_ino == stat.st_ino and os.stat(copy).st_mtime_ns == stat.st_mtime_ns
        assert not os.path.exists(os.path.join(local, "data", "chunk-000", "file-000.parquet.lock"))  # records apart

        _offset, good, bad = flip_a_bit_that_changes_a_value(copy)
        assert os.path.getsize(copy) == os.path.getsize(original) and good != bad  # the attack: readable, wrong
        mirrored()
        assert (
            len(logs) == 1
            and f"{s3.url}/{rel}: the local copy's SHA-256 differs from the one recorded" in logs[0]
            and "downloading it again" in logs[0]
        ), logs
        assert open(copy, "rb").read() == open(original, "rb").read()
        assert pq.read_table(copy).column("action").to_pylist() == good
        from robo_loaders_plugin.lerobot.compat import tables_only

        with tables_only():  # as lerobot-train builds it (single._streamed_source): videos are remote
            nat = native(local)
        truth = native(root)  # LeRobot on the mirror, and the streamed items, are the source's
        ours = serve("video_stream", nat, source=s3.url, storage_options=s3.storage_options)
        for i in (0, 35, len(truth) - 1):
            same_item(ours[i], truth[i], f"after the repair [{i}]")
            assert torch.equal(nat.hf_dataset[i]["action"], truth[i]["action"])  # (its videos are not local)

        os.unlink(os.path.join(local, "meta", "info.json"))  # a missing copy: downloaded again, said
        logs.clear()
        mirrored()
        assert len(logs) == 1 and "meta/info.json: the local copy is missing" in logs[0], logs

        gone = os.path.join(local, "data", "chunk-009", "file-009.parquet")  # a mirror an earlier version wrote
        os.makedirs(os.path.dirname(gone))
        open(gone, "wb").close()
        with open(os.path.join(local, ".robo-loaders-mirror.json"), "w") as f:
            json.dump({"data/chunk-009/file-009.parquet": [0, ""], rel: [1, "x"]}, f)
        logs.clear()
        mirrored()
        assert len(logs) == 1 and "mirrored by an earlier robo-loaders" in logs[0], logs
        assert not os.path.exists(gone) and not os.path.exists(os.path.join(local, ".robo-loaders-mirror.json"))
        assert open(copy, "rb").read() == open(original, "rb").read()


def test_a_dropped_s3_connection_is_named_with_the_url_not_called_a_corrupt_file(tmp_path, monkeypatch):
    """Issue 23 B10: the S3 server stopped mid-run ended in "the file is truncated or corrupt". A read the store
    fails is now reported as such, with the store's exception and the file's URL: when the decoder is first
    opened, mid-decode (blocks no longer cached), and when local_cache_dir copies the file; a file that really is
    corrupt still says so (negative control)."""
    import s3fs

    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset
    from robo_loaders_plugin.sources.remote_blocks import BlockCache

    root = write_lerobot_dataset(
        tmp_path / "ds",
        episode_lengths=(150, 150, 150),
        cameras=1,
        image_size=(96, 128),
        mode="h264",
        seed=4,
        progress=False,
    )  # a 100 KB video: more than one read of it
    nat = native(root)
    rel = os.path.relpath(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4"))[0], root)
    connection = (
        r"reading s3://{}/{} from the remote store failed \(EndpointConnectionError: Could not connect to "
        r"the endpoint URL.*\); the connection broke, the file is not known to be damaged"
    )
    with S3Server(root) as s3:
        options = dict(s3.storage_options, config_kwargs={"retries": {"max_attempts": 1}})  # fail fast
        url = f"s3://{s3.bucket}/{s3.prefix}/{rel}"
        streaming = serve("video_stream", nat, source=s3.url, storage_options=options)
        # a block cache of two 4 KiB blocks: the blocks a later episode needs are read again, as in a long pass
        streaming.source._blocks = BlockCache(streaming.source.video_fs, block=4096, max_bytes=8192)
        same_item(streaming[0], nat[0], "before the connection drops")
        unopened = serve("video_stream", nat, source=s3.url, storage_options=options)
        copying = serve(
            "video_stream", nat, source=s3.url, storage_options=options, local_cache_dir=str(tmp_path / "copies")
        )

        def dropped(*args, **kwargs):  # the connection drops while local_cache_dir downloads the file
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url=s3.storage_options["client_kwargs"]["endpoint_url"])

        monkeypatch.setattr(copying.source.file_cache.fs, "get_file", dropped)
        with pytest.raises(
            SourceError,
            match=rf"local_cache_dir: copying {url} into .* failed "
            r"\(EndpointConnectionError: Could not connect",
        ):
            copying[0]
        monkeypatch.undo()
        s3.server.stop()
        with pytest.raises(
            SourceError,
            match=r"decoding .* \(episode 2, observation.images.cam0, frames 300..449\) "
            r"failed: " + connection.format(s3.bucket, f"{s3.prefix}/{rel}"),
        ):
            streaming[len(nat) - 1]
        with pytest.raises(
            SourceError,
            match=rf"video {url} \(episode 0, observation.images.cam0\): asking the "
            r"remote store for it failed \(EndpointConnectionError",
        ):
            unopened[0]
        s3.server.start()
        fs = s3fs.S3FileSystem(**s3.storage_options)  # negative control: a corrupt remote file is called corrupt
        fs.pipe_file(f"{s3.bucket}/{s3.prefix}/{rel}", b"\x00garbage" * 2000)
        with pytest.raises(SourceError, match=r"cannot open video .*: .*; the file is truncated or corrupt") as err:
            serve("video_stream", nat, source=s3.url, storage_options=options)[0]
        assert "remote store" not in str(err.value)


def test_bench_lerobot_streaming_baseline_entry(lerobot_datasets, tmp_path):
    """``robo-loaders bench lerobot --backends streaming,...`` times LeRobot's StreamingLeRobotDataset (its own child
    process, offline on the local root) and reports every backend's ratio to it."""
    from robo_loaders_plugin.bench.lerobot_bench import bench_lerobot

    out = tmp_path / "bench.json"
    payload = bench_lerobot(
        str(lerobot_datasets["av1_1cam"]),
        REPO,
        ["streaming", "video_stream"],
        batch_size=8,
        num_workers=0,
        batches=2,
        preset="diffusion",
        kwargs={"streaming": {"buffer_size": 32}},
        json_out=str(out),
        echo=lambda *_: None,
    )
    by = {r["backend"]: r for r in payload["results"]}
    assert not any(r.get("error") for r in by.values()), [r.get("error") for r in by.values()]
    assert by["streaming"]["samples_per_s"] > 0 and "StreamingLeRobotDataset(" in by["streaming"]["summary"]
    assert by["streaming"]["frames_per_sample"] == 2  # diffusion: 2 observation frames of the one camera
    assert by["video_stream"]["ratios"]["samples_per_s_vs_streaming"] > 0
    assert json.loads(out.read_text())["results"][0]["backend"] == "streaming"


def test_decoders_are_shared_by_the_reading_threads_and_bounded(lerobot_datasets, monkeypatch):
    """``EpisodeVideoDecoder``'s decoders are taken and given back by the threads that read (one thread at a time
    per decoder): one file's episodes read by four threads in turn open it once; four threads reading every
    (episode, camera) concurrently in a shuffled order get the frames one thread gets, and at most ``max_idle``
    decoders stay open; a decoder whose decode failed is not given back. Negative control: with no decoder kept
    (``max_idle`` 0) every read opens its file again, so the count checked can fail."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from robo_loaders_plugin.sources.lerobot_v3 import EpisodeVideoDecoder, LeRobotEpisodes

    episodes = LeRobotEpisodes(LeRobotV3(lerobot_datasets["h264_3cam_multifile"]), 1e-4)
    source = episodes.source
    stamps = {ep: episodes.arrays["timestamp"][s:e] for ep, s, e in episodes.runs}
    keys = list(source.video_keys)
    pairs = [(ep, key) for ep in stamps for key in keys]
    files = {}
    for ep, key in pairs:
        files.setdefault(source.video_path(ep, key), []).append((ep, key))
    shared = max(files.values(), key=len)  # the episodes one file holds
    assert len(files) > 3 and len(shared) >= 2
    opened = []
    real_open = EpisodeVideoDecoder._open

    def counted(self, p):
        opened.append(p)
        return real_open(self, p)

    monkeypatch.setattr(EpisodeVideoDecoder, "_open", counted)

    def in_turn(videos):
        opened.clear()
        for _ in range(4):
            t = threading.Thread(target=lambda: [videos.episode(ep, k, stamps[ep]) for ep, k in shared])
            t.start()
            t.join()
        return len(opened)

    assert in_turn(EpisodeVideoDecoder(source, 1e-4)) == 1
    control = EpisodeVideoDecoder(source, 1e-4)
    control.max_idle = 0
    assert in_turn(control) == 4 * len(shared)

    videos = EpisodeVideoDecoder(source, 1e-4)
    want = {(ep, k): EpisodeVideoDecoder(source, 1e-4).episode(ep, k, stamps[ep]) for ep, k in pairs}
    order = [pairs[i] for i in np.random.default_rng(0).permutation(len(pairs))] * 3
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda pk: videos.episode(pk[0], pk[1], stamps[pk[0]]), order))
    assert all(np.array_equal(g, want[pk]) for g, pk in zip(got, order))
    assert 0 < videos.idle <= videos.max_idle < len(files)

    broken = EpisodeVideoDecoder(source, 1e-4)

    def failing(self, p):
        dec = real_open(self, p)

        def fail(indices):
            raise RuntimeError("decode failed")

        dec.get_frames_at = fail
        return dec

    monkeypatch.setattr(EpisodeVideoDecoder, "_open", failing)
    ep, key = pairs[0]
    with pytest.raises(SourceError, match="failed"):
        broken.episode(ep, key, stamps[ep])
    assert broken.idle == 0


def _forked_reads(videos, pairs, stamps, want, keep_parents, out):
    """In a forked child: how many decoders it holds before reading (``keep_parents``: its pool not renewed, the
    control), then whether every (episode, camera) it reads equals ``want``."""
    import os

    if keep_parents:  # the control only counts: reading through the parent's decoders could fail or hang
        videos._pid = os.getpid()
        out.send((videos.idle, None))
        return
    held = videos.idle
    out.send((held, all(np.array_equal(videos.episode(ep, k, stamps[ep]), want[ep, k]) for ep, k in pairs)))


def test_a_forked_process_opens_its_own_decoders(lerobot_datasets):
    """A process forked after decoders were opened (a DataLoader worker started by ``fork``) does not read through
    its parent's: their descriptors share the file offset with the parent, whose reads would move it under the
    child's (wrong bytes decoded). The child starts with none idle and reads the right frames while the parent keeps
    reading; the parent's stay its own. Negative control: a child that keeps its parent's pool holds its decoders."""
    import multiprocessing as mp

    from robo_loaders_plugin.sources.lerobot_v3 import EpisodeVideoDecoder, LeRobotEpisodes

    episodes = LeRobotEpisodes(LeRobotV3(lerobot_datasets["h264_3cam_multifile"]), 1e-4)
    stamps = {ep: episodes.arrays["timestamp"][s:e] for ep, s, e in episodes.runs}
    pairs = [(ep, key) for ep in stamps for key in episodes.source.video_keys]
    want = {(ep, k): EpisodeVideoDecoder(episodes.source, 1e-4).episode(ep, k, stamps[ep]) for ep, k in pairs}
    videos = EpisodeVideoDecoder(episodes.source, 1e-4)
    for ep, k in pairs:
        videos.episode(ep, k, stamps[ep])
    opened = videos.idle
    assert opened > 0
    ctx = mp.get_context("fork")
    for keep in (False, True):
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_forked_reads, args=(videos, pairs, stamps, want, keep, theirs))
        child.start()
        theirs.close()
        same_here = all(np.array_equal(videos.episode(ep, k, stamps[ep]), want[ep, k]) for ep, k in pairs * 2)
        assert mine.poll(120), "the forked reader did not answer"
        held, same_there = mine.recv()
        child.join(30)
        assert same_here and videos.idle == opened and same_there is (None if keep else True)
        assert held == (opened if keep else 0), keep  # the control holds its parent's


def test_gpu_decoders_stay_with_the_thread_that_opened_them(lerobot_datasets, monkeypatch):
    """With ``device="cuda"`` (NVDEC) a thread's decoders are its own, as when measured on a GPU (a CUDA decoder used
    from another thread has not been run on one here), each thread keeping at most ``max_idle`` (let go with the
    thread); the frames are the CPU path's. Run here with CPU decoders standing for NVDEC's (``_open`` replaced).
    Control: on the CPU a second thread takes the first one's decoder."""
    import threading

    from robo_loaders_plugin.sources.lerobot_v3 import EpisodeVideoDecoder, LeRobotEpisodes
    from robo_loaders_plugin.sources.nvdec import open_decoder

    episodes = LeRobotEpisodes(LeRobotV3(lerobot_datasets["h264_3cam_multifile"]), 1e-4)
    source = episodes.source
    stamps = {ep: episodes.arrays["timestamp"][s:e] for ep, s, e in episodes.runs}
    pairs = [(ep, key) for ep in stamps for key in source.video_keys]
    opened = []

    def on_cpu(self, p):
        opened.append((p, threading.current_thread()))
        return open_decoder(self.source.open_video(p), "cpu")

    monkeypatch.setattr(EpisodeVideoDecoder, "_open", on_cpu)
    want = {pk: EpisodeVideoDecoder(source, 1e-4).episode(pk[0], pk[1], stamps[pk[0]]) for pk in pairs}

    def two_threads(device):
        videos = EpisodeVideoDecoder(source, 1e-4, device)
        opened.clear()
        got = []
        for _ in range(2):
            t = threading.Thread(
                target=lambda: got.extend(videos.episode(ep, k, stamps[ep]) for ep, k in pairs[:1] * 2)
            )
            t.start()
            t.join()
        assert all(np.array_equal(np.asarray(g), want[pairs[0]]) for g in got)
        threads = len({t for _, t in opened})  # the threads that opened the file both read
        for ep, k in pairs:  # this thread: its own decoders, at most max_idle kept
            assert np.array_equal(np.asarray(videos.episode(ep, k, stamps[ep])), want[ep, k])
        return videos, threads

    videos, threads = two_threads("cuda")
    assert threads == 2 and 0 < videos.idle <= videos.max_idle  # this thread's own
    assert not videos._idle  # none shared
    assert two_threads("cpu")[1] == 1  # control: shared on the CPU


def test_an_unreachable_remote_store_is_said_so_not_called_a_root_without_meta(tmp_path):
    """fsspec's ``exists`` answers False for any failure, and its HTTP ``open`` raises FileNotFoundError for a
    server that does not answer: an unreachable server was "meta/info.json not found; not a LeRobot v3 dataset
    root" (noticed in a review). Control: a server that answers 404 is still a root without meta/info.json."""
    from remote_servers import free_port

    url = f"http://127.0.0.1:{free_port()}/ds"  # nothing listens there
    with pytest.raises(SourceError, match=r"/ds: could not read meta/info.json from the remote store \(Client.*"
                       r"check the URL, the network and storage_options"):  # fmt: skip
        LeRobotV3(url)
    with HttpServer(tmp_path) as server, pytest.raises(SourceError, match=r"meta/info\.json not found; not a"):
        LeRobotV3(server.url + "/ds")
    # the mirror of the tables lerobot-train makes first: a traceback for the same server (a reviewer's reproduction)
    from robo_loaders_plugin.sources.lerobot_v3 import mirror_tables

    with pytest.raises(SourceError, match=r"/ds: could not list the dataset's tables \(Client.*check the URL"):
        mirror_tables(url, str(tmp_path / "mirror"))


def test_a_camera_encoded_at_another_rate_than_the_dataset_is_refused(tmp_path):
    """A reviewer's reproduction: a camera re-encoded at 15 fps in a 30 fps dataset, with a tolerance_s LeRobot
    accepts: LeRobot picks a window's frames by nearest time among those its queries load, a frame decoded per row
    is another frame, and 15 of 35 items' windows differed silently (video_stream and compressed_cache, which decode
    alike). Refused in one line naming the file and both rates. Control: the dataset as LeRobot wrote it serves."""
    import av
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    root = write_lerobot_dataset(
        tmp_path / "half", mode="h264", cameras=2, image_size=(32, 48), episode_lengths=(12, 9), fps=30, progress=False
    )
    deltas = {"observation.images.cam0": [-1 / 30, 0.0], "observation.images.cam1": [-1 / 30, 0.0]}

    def native():
        return LeRobotDataset(REPO, root=root, delta_timestamps=deltas, return_uint8=True, tolerance_s=0.04)

    nat = native()
    same_item(serve("video_stream", nat)[3], nat[3], "control")
    for p in sorted(glob.glob(f"{root}/videos/observation.images.cam1/*/*.mp4")):  # cam1 re-encoded at 15 fps
        with av.open(p) as c:
            frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)][::2]
        with av.open(p, "w", format="mp4") as out:
            s = out.add_stream("libx264", rate=15)
            s.width, s.height, s.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv444p"
            for i, fr in enumerate(frames):
                vf = av.VideoFrame.from_ndarray(fr, format="rgb24")
                vf.pts = i
                out.mux(s.encode(vf))
            out.mux(s.encode(None))
    with pytest.raises(SourceError, match=r"observation.images.cam1 is encoded at 15 fps, the dataset at 30 fps"):
        ds = serve("video_stream", native())
        for i in range(len(ds)):
            ds[i]


def test_a_remote_server_that_fails_is_not_called_a_missing_video(lerobot_datasets, tmp_path):
    """A reviewer's reproduction: fsspec's HTTP ``info`` turns every failure of its requests (a 500, a server that is
    down) into ``FileNotFoundError``, so an outage was reported as "video file ... is missing". Only a 404 (or 410)
    is a missing file; anything else is reported as the failed remote read it is. Control: a video removed from the
    served copy is still called missing."""
    import shutil

    root = str(tmp_path / "copy")
    shutil.copytree(lerobot_datasets["av1_1cam"], root)
    nat = native(root)
    server = HttpServer(root).__enter__()
    try:
        ours = serve("video_stream", nat, decode_threads=0, source=server.url)
        video = sorted(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4")))[0]
        os.rename(video, video + ".gone")
        with pytest.raises(SourceError, match=r"video file .* \(episode 0, .*\) is missing"):
            ours[0]  # control: a 404
        os.rename(video + ".gone", video)
    finally:
        server.__exit__(None, None, None)
    with pytest.raises(SourceError, match=r"asking the remote store for it failed \(Client\w*Error"):
        ours[0]


def test_a_video_missing_a_frame_under_a_raised_tolerance_is_refused_not_served_as_other_frames(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A reviewer's reproduction: a camera's video missing one frame (the later frames keep their times, so the
    video has a gap) under a ``tolerance_s`` raised past a frame: LeRobot picks each of a window's frames as the
    nearest among the frames the window's queries load, the plugin decoded one frame per row, and the windows around
    the gap differed from LeRobot's, silently. A frame half a frame or more from its row is refused now: every item
    equals LeRobot's or raises naming the gap. Control: with the check off, the windows around the gap differ."""
    import shutil

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = str(tmp_path / "gap")
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    probe = LeRobotDataset(REPO, root=root)
    fps, cam = probe.fps, probe.meta.video_keys[0]
    drop_a_frame(
        os.path.join(root, "videos", cam, "chunk-000", "file-000.mp4"), fps
    )  # the later frames keep their times
    windows = {c: [k / fps for k in (-2, -1, 0, 1, 2)] for c in probe.meta.camera_keys}
    nat = LeRobotDataset(REPO, root=root, delta_timestamps=windows, tolerance_s=1.6 / fps, return_uint8=True)

    def compare(ours, rows):
        found = {"same": 0, "differ": 0, "refused": 0}
        for i in rows:
            try:
                want = nat[i]
            except Exception:  # noqa: BLE001 - LeRobot's own FrameTimestampError: nothing to compare
                continue
            try:
                got = ours[i]
            except SourceError as exc:
                assert "half a window step or more from their rows" in str(exc), str(exc)
                found["refused"] += 1
                continue
            try:
                same_item(got, want)
                found["same"] += 1
            except AssertionError:
                found["differ"] += 1
        return found

    rows = range(30)
    found = compare(serve("video_stream", nat, decode_threads=0), rows)
    assert found["differ"] == 0 and found["refused"] > 0, found
    # without windows LeRobot loads one frame per query, as the reader does: served as LeRobot serves it, not
    # refused (a reviewer's reproduction of the first version of this check, which refused valid datasets)
    plain = nat
    nat = LeRobotDataset(REPO, root=root, tolerance_s=1.6 / fps, return_uint8=True)
    found = compare(serve("video_stream", nat, decode_threads=0), rows)
    assert found == {"same": len(rows), "differ": 0, "refused": 0}, found
    nat = plain
    import robo_loaders_plugin.sources.lerobot_v3 as v3

    monkeypatch.setattr(v3, "ROW_FRAME_SLACK", 1e9)  # control: the check off, the windows around the gap differ
    found = compare(serve("video_stream", nat, decode_threads=0), rows)
    assert found["differ"] > 0 and found["refused"] == 0, found


def test_a_remote_source_of_the_same_layout_but_other_data_is_refused(twin_datasets):
    """A reviewer's reproduction: local tables and a remote ``source`` of another recording with the same
    ``meta/info.json`` and episode rows (lengths, timestamps, files) were taken as one dataset: items mixed the
    local actions with the remote frames. The statistics (and the tasks) are compared too now, and it is refused.
    Control: the remote copy of the same dataset serves LeRobot's items."""
    a, b = twin_datasets
    nat = native(a)
    refused = r"is not the dataset at .* \(meta/stats.json differs\)"
    with HttpServer(b) as other, pytest.raises(SourceError, match=refused):
        serve("video_stream", nat, source=other.url)
    with HttpServer(a) as same:
        ours = serve("video_stream", nat, source=same.url)
        for i in (0, len(nat) - 1):
            same_item(ours[i], nat[i], f"remote copy[{i}]")


@pytest.mark.parametrize("kind", ["video", "image"])
def test_a_camera_declared_channels_first_is_served_as_lerobot_serves_it(tmp_path, kind):
    """A reviewer's reproduction: LeRobot's writer accepts a camera declared channels-first (``shape (3, H, W)``,
    ``names ["channels", "height", "width"]``) and ``LeRobotDataset`` serves it as (C, H, W); video_stream read every
    declared shape as (H, W, C), laid out its buffer (W, C, H) and failed at the first item with numpy's broadcast
    error. Every backend serves LeRobot's items now; control: a frame changed in the served copy is seen."""
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / "chw"
    feats = {
        "action": {"dtype": "float32", "shape": (2,), "names": None},
        "observation.images.cam": {"dtype": kind, "shape": (3, 16, 24), "names": ["channels", "height", "width"]},
    }
    rgb = RGBEncoderConfig(vcodec="h264") if kind == "video" else None
    written = LeRobotDataset.create("local/chw", 10, feats, root=root, use_videos=kind == "video", rgb_encoder=rgb)
    for i in range(6):
        frame = np.full((3, 16, 24), 30 * i, np.uint8)
        written.add_frame({"action": np.full(2, i, np.float32), "task": "t", "observation.images.cam": frame})
    written.save_episode()
    written.finalize()
    native = LeRobotDataset("local/chw", root=root)
    assert tuple(native[0]["observation.images.cam"].shape) == (3, 16, 24)
    for backend, options in (("video_stream", {}), ("compressed_cache", {}), ("datapipe", {}),
                             ("gpu_resampler", {"device": "cpu"})):  # fmt: skip
        ours = serve(backend, native, cache_dir=str(tmp_path / "cache"), **options)
        for i in range(len(native)):
            same_item(ours[i], native[i], f"{backend}[{i}]")
    item = dict(ours[2])
    item["observation.images.cam"] = item["observation.images.cam"].flip(-1).contiguous() + 1e-3
    with pytest.raises(AssertionError):
        same_item(item, native[2], "control")


@pytest.mark.parametrize("mode", ["h264", "png"])
def test_frames_of_another_size_than_info_json_states_are_refused_naming_the_camera(tmp_path, mode):
    """A reviewer's reproduction: ``meta/info.json`` stating a camera's shape other than its frames' (videos
    re-encoded or resized without it) made video_stream, whose buffer is sized from it before anything is decoded,
    fail with a bare numpy broadcast error on every item and batch. Refused in one line naming the camera, the
    stated and the decoded shapes. Control: the dataset as written serves LeRobot's items."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    root = write_lerobot_dataset(
        tmp_path / "ds", mode=mode, cameras=1, image_size=(32, 48), episode_lengths=(6, 5), progress=False
    )
    nat = LeRobotDataset(REPO, root=root)
    ours = serve("video_stream", nat)
    for i in range(len(nat)):
        same_item(ours[i], nat[i], f"control[{i}]")
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"]["observation.images.cam0"]["shape"] = [48, 32, 3]  # the frames are 32x48
    info_path.write_text(json.dumps(info, indent=4))
    nat = LeRobotDataset(REPO, root=root)
    assert tuple(nat[0]["observation.images.cam0"].shape) == (3, 32, 48)  # LeRobot serves the frames as they are
    with pytest.raises(SourceError) as e:
        serve("video_stream", nat)[0]
    msg = str(e.value)
    assert "'observation.images.cam0'" in msg and "(3, 32, 48)" in msg and "(3, 48, 32)" in msg, msg
    assert "meta/info.json" in msg and "\n" not in msg
    loader = torch.utils.data.DataLoader(serve("video_stream", nat), batch_size=4, sampler=sampler_for(nat))
    with pytest.raises(SourceError, match=r"meta/info\.json's features"):  # the training batches too
        next(cycle(loader))


@pytest.mark.parametrize("status", [403, 500])
def test_a_remote_store_failing_a_metadata_file_or_a_copy_is_one_line_naming_the_file(lerobot_datasets, status):
    """A reviewer's reproduction: a remote store refusing ``meta/stats.json``, ``meta/tasks.parquet`` or an episodes
    table (a transient 403, a 500) escaped as aiohttp's traceback (its errors are not ``OSError``; only
    ``meta/info.json``'s failure was one line), and a copy into ``local_cache_dir`` or the tables' mirror called a
    403 or a 500 ``FileNotFoundError`` (fsspec HTTP's ``info`` says every failure so). Each is one line naming the
    file and the server's answer. Control: a file the server does not have (404) is still read as absent."""
    import tempfile

    from robo_loaders_plugin.sources.file_cache import FileCache

    root = lerobot_datasets["av1_1cam"]
    with HttpServer(root) as server:
        source = LeRobotV3(server.url)
        for rel, read in (
            ("meta/stats.json", lambda s: s.stats()),
            ("meta/tasks.parquet", lambda s: s.tasks),
            ("meta/episodes/chunk-000/file-000.parquet", lambda s: s.episode_table),
        ):
            server.refuse[rel] = status
            with pytest.raises(SourceError) as e:
                read(LeRobotV3(server.url))
            msg = str(e.value)
            assert rel in msg and str(status) in msg and "ClientResponseError" in msg and "\n" not in msg, msg
            del server.refuse[rel]
        assert source.stats() is not None
        server.refuse["meta/stats.json"] = 404  # control: absent, as a dataset without statistics
        assert LeRobotV3(server.url).stats() is None
        video = sorted(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4")))[0]
        rel = os.path.relpath(video, root)
        server.refuse[rel] = status
        with tempfile.TemporaryDirectory() as copies:
            cache = FileCache(source.video_fs, copies)
            with pytest.raises(SourceError) as e:
                cache.get(source.video_fs._strip_protocol(f"{server.url}/{rel}"))
        msg = str(e.value)
        assert "ClientResponseError" in msg and str(status) in msg and "FileNotFoundError" not in msg, msg
