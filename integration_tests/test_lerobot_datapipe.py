"""LeRobot datapipe: converter, items vs LeRobotDataset[i], the training pipeline vs EpisodeAwareSampler's frames."""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

from lerobot_helpers import REPO, random_indices, same_item

from robo_loaders_plugin.lerobot.convert import convert_lerobot, verify_lerobot
from robo_loaders_plugin.lerobot.datapipe import ShardLeRobotDataset, datapipe_dataset
from robo_loaders_plugin.lerobot.presets import delta_timestamps
from robo_loaders_plugin.spec import BackendOptionError, RoboLoadersError

BIN = os.path.dirname(sys.executable)
NAMES = ["av1_1cam", "h264_3cam_multifile", "png_1cam"]


def native(root, preset="none", return_uint8=True, **kw):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(REPO, root=root)
    return LeRobotDataset(REPO, root=root, delta_timestamps=delta_timestamps(preset, meta),
                          return_uint8=return_uint8, **kw)


@pytest.fixture(scope="module")
def shards(lerobot_datasets, tmp_path_factory):
    base = tmp_path_factory.mktemp("lerobot_shards")
    out = {}
    for name in NAMES:  # small shards so that the multi-file dataset spans several
        out[name] = str(base / name)
        convert_lerobot(lerobot_datasets[name], out[name], repo_id=REPO, shard_bytes=200_000, progress=False)
    return out


def sampler_for(nat, drop_n_last=0, seed=3):
    from lerobot.datasets import EpisodeAwareSampler

    return EpisodeAwareSampler(nat.meta.episodes["dataset_from_index"], nat.meta.episodes["dataset_to_index"],
                               episode_indices_to_use=nat.episodes, drop_n_last_frames=drop_n_last, shuffle=True,
                               seed=seed, absolute_to_relative_idx=nat.absolute_to_relative_idx)


def one_pass(ds, dataloader):
    loader = ds.training_loader(dataloader)
    return list(loader)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("preset,return_uint8", [("act", True), ("diffusion", False), ("none", True)])
def test_items_equal_lerobot_dataset(lerobot_datasets, shards, name, preset, return_uint8):
    nat = native(lerobot_datasets[name], preset, return_uint8)
    ours = datapipe_dataset(nat, shards=shards[name])
    assert isinstance(ours, ShardLeRobotDataset) and len(ours) == len(nat) and ours.num_episodes == nat.num_episodes
    for i in random_indices(len(nat), 300, seed=zlib.crc32(f"{name}{preset}".encode())):
        same_item(ours[i], nat[i], f"{name}/{preset}[{i}]")


def test_converted_dataset_verifies_against_its_source(lerobot_datasets, shards):
    from robo_loaders_plugin.backends.shards import ShardReader

    reader = ShardReader(shards["h264_3cam_multifile"])
    assert len(reader.shards) > 1 and len(reader.episodes) == 5
    meta = reader.dataset["metadata"]
    assert meta["framework"] == "lerobot" and meta["info"]["fps"] and meta["tasks"] and meta["stats"]
    assert verify_lerobot(shards["h264_3cam_multifile"], lerobot_datasets["h264_3cam_multifile"], REPO) == []


@pytest.mark.parametrize("drop_n_last,batch_size,workers", [(0, 16, 0), (7, 10, 2)])
def test_training_pass_serves_the_samplers_frames_once_each_equal_to_native(lerobot_datasets, shards, drop_n_last,
                                                                           batch_size, workers):
    """Every frame EpisodeAwareSampler would serve (drop_n_last_frames, episode filter) appears exactly once per
    pass, and each item of each pipeline batch equals LeRobotDataset's item for that frame."""
    nat = native(lerobot_datasets["h264_3cam_multifile"], "diffusion", episodes=[0, 2, 3, 4])
    ds = datapipe_dataset(nat, shards=shards["h264_3cam_multifile"], shuffle_buffer=2)
    sampler = sampler_for(nat, drop_n_last)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers)
    batches = one_pass(ds, dl)
    a2r = nat.absolute_to_relative_idx  # the sampler yields rows of the filtered dataset; items carry `index`
    seen = [a2r[int(i)] for b in batches for i in b["index"]]
    assert len(seen) == len(sampler) and sorted(seen) == sorted(sampler.indices)
    assert len(batches) == -(-len(sampler) // batch_size)
    rng = np.random.default_rng(drop_n_last)
    for b in rng.choice(len(batches), 4, replace=False):
        rows = [a2r[int(i)] for i in batches[b]["index"]]
        expected = torch.utils.data.default_collate([nat[r] for r in rows])
        same_item(batches[b], expected, f"batch {b}")
    # the episode buffer keeps locality: far fewer shard reads than frames
    assert ds.cache.loads <= 2 * len(nat.episodes)


def test_passes_differ_are_seeded_and_resume_at_the_samplers_offset(lerobot_datasets, shards):
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = datapipe_dataset(nat, shards=shards["av1_1cam"])

    def first_batches(state=None, seed=3, n=3):
        sampler = sampler_for(nat, seed=seed)
        if state:
            sampler.load_state_dict(state)
        it = ds.cycle(torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler))
        return [next(it)["index"].tolist() for _ in range(n)]

    a, b = first_batches(), first_batches()
    assert a == b and first_batches(seed=4) != a
    per_pass = -(-len(nat) // 8)
    sampler = sampler_for(nat)
    it = ds.cycle(torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler))
    stream = [next(it)["index"].tolist() for _ in range(per_pass + 5)]
    assert sorted(sum(stream[:per_pass], [])) == list(range(len(nat)))
    assert stream[per_pass:per_pass + 3] != stream[:3]  # the next pass is shuffled differently
    # lerobot-train's --resume: compute_sampler_state(step) -> load_state_dict -> cycle
    assert first_batches({"epoch": 1, "start_index": 2 * 8}) == stream[per_pass + 2:per_pass + 5]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pinned memory)")
def test_pinned_batches_on_cuda(lerobot_datasets, shards):
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = datapipe_dataset(nat, shards=shards["av1_1cam"])
    dl = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler_for(nat), pin_memory=True)
    batch = next(ds.cycle(dl))
    assert batch["action"].is_pinned() and batch["observation.images.cam0"].is_pinned()


def test_sampling_with_replacement(lerobot_datasets, shards):
    """A pass has as many frames as the sampler's, drawn with replacement (repeats), every item still LeRobot's."""
    nat = native(lerobot_datasets["av1_1cam"], "act")
    ds = datapipe_dataset(nat, shards=shards["av1_1cam"], replacement=True)
    sampler = sampler_for(nat)
    batches = one_pass(ds, torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler))
    seen = np.concatenate([b["index"].numpy() for b in batches])
    assert len(seen) == len(sampler) and len(set(seen.tolist())) < 0.8 * len(seen)  # ~63% distinct expected
    assert one_pass(ds, torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler_for(nat)))[0]["index"].tolist() \
        == batches[0]["index"].tolist()
    same_item(batches[1], torch.utils.data.default_collate([nat[int(i)] for i in batches[1]["index"]]), "batch 1")


def test_cli_parallel_convert_verify_and_damage(lerobot_datasets, tmp_path):
    root, out = lerobot_datasets["h264_3cam_multifile"], str(tmp_path / "cli")
    cli = os.path.join(BIN, "robo-loaders")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run([cli, "convert", "lerobot", root, out, "--repo-id", REPO, "--num-workers", "2",
                        "--shard-size", "100KB"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run([cli, "verify", out, "--source", root, "--repo-id", REPO], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-2000:]
    shard = sorted(os.listdir(os.path.join(out, "shards")))[1]
    path = os.path.join(out, "shards", shard)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = subprocess.run([cli, "verify", out], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 1 and f"{shard}: SHA-256 mismatch" in p.stderr, p.stderr[-2000:]


def test_stale_or_mismatched_shards_are_refused(lerobot_datasets, shards, tmp_path):
    import shutil

    nat = native(lerobot_datasets["av1_1cam"])
    with pytest.raises(RoboLoadersError, match="converted from a dataset whose files differ"):
        datapipe_dataset(nat, shards=shards["png_1cam"])
    copy = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["av1_1cam"], copy)
    assert datapipe_dataset(native(copy), shards=shards["av1_1cam"]) is not None  # a copy still matches
    (copy / "meta" / "extra.txt").write_text("changed")
    with pytest.raises(RoboLoadersError, match="files differ"):
        datapipe_dataset(native(copy), shards=shards["av1_1cam"])
    with pytest.raises(RoboLoadersError, match="tolerance_s"):
        datapipe_dataset(native(lerobot_datasets["av1_1cam"], tolerance_s=1e-5), shards=shards["av1_1cam"])
    with pytest.raises(BackendOptionError, match="'shards'.*'cache_dir'"):
        datapipe_dataset(nat)


def test_real_renders(shared_lerobot, tmp_path):
    """The simulator-rendered Lift dataset in ../shared (AV1, 2 cameras 84x84), converted on first use."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    repo = "local/robosuite_lift"
    meta = LeRobotDatasetMetadata(repo, root=shared_lerobot)
    nat = LeRobotDataset(repo, root=shared_lerobot, delta_timestamps=delta_timestamps("diffusion", meta))
    ours = datapipe_dataset(nat, cache_dir=str(tmp_path))
    for i in random_indices(len(nat), 300, seed=6):
        same_item(ours[i], nat[i], f"shared[{i}]")


def test_conversion_resumes_after_a_killed_worker(lerobot_datasets, tmp_path, monkeypatch):
    """A converter that leased a unit and died: the next run takes the dead lease over and finishes."""
    import json

    from robo_loaders_plugin.backends.shards import convert as units

    root, out = lerobot_datasets["av1_1cam"], str(tmp_path / "shards")
    with monkeypatch.context() as m:  # plan only: nothing converted, so nothing may be published
        m.setattr(units, "work", lambda *a, **k: 0)
        with pytest.raises(units.ShardError, match="not done yet"):
            convert_lerobot(root, out, repo_id=REPO, shard_bytes=50_000, progress=False)
    assert not os.path.exists(os.path.join(out, "index.json"))
    code = "import os, sys; from robo_loaders_plugin.backends.shards import convert as u; u.lease(sys.argv[1]); os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code, out]).returncode == 9
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert [u["state"] for u in manifest["units"]].count("leased") == 1 and len(manifest["units"]) > 1
    convert_lerobot(root, out, repo_id=REPO, shard_bytes=50_000, progress=False)
    assert verify_lerobot(out, root, REPO) == []


EXIT_MID_PASS = """
import sys, torch
from lerobot.datasets import EpisodeAwareSampler
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from robo_loaders_plugin.lerobot.datapipe import datapipe_dataset
nat = LeRobotDataset("local/sample", root=sys.argv[1], delta_timestamps={"action": [i / 20 for i in range(10)]},
                     return_uint8=True)
ds = datapipe_dataset(nat, shards=sys.argv[2])
sampler = EpisodeAwareSampler(nat.meta.episodes["dataset_from_index"], nat.meta.episodes["dataset_to_index"],
                              shuffle=True, seed=1)
batches = ds.cycle(torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2))
for _ in range(3):
    next(batches)
"""


def test_a_run_that_ends_mid_pass_exits_cleanly(lerobot_datasets, shards):
    """Training ends while the pipeline's threads are still prefetching; without an orderly shutdown at exit the
    interpreter finalizes under them and the process aborts (exit 134) more often than not on this machine."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for attempt in range(4):
        p = subprocess.run([sys.executable, "-c", EXIT_MID_PASS, lerobot_datasets["av1_1cam"], shards["av1_1cam"]],
                           capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, (attempt, p.returncode, p.stderr[-2000:])
