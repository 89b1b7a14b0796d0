"""The benchmark commands run end to end and report what the README table needs (tiny settings: this checks the
plumbing, not speed; speed is measured by benchmarks/, never asserted in tests)."""
import json
import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def run(args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run([os.path.join(BIN, "robo-loaders"), *args], capture_output=True, text=True, env=env,
                       timeout=900)
    return p.returncode, p.stdout + p.stderr


def consistent(r):
    """What every result row must satisfy if the measurement plumbing works (values that a broken run, e.g. one
    that timed nothing or sampled no memory, cannot give)."""
    assert r["samples_per_s"] > 0 and r["first_batch_s"] > 0 and r["build_s"] > 0, r
    assert 0 < r["batch_latency_ms"]["p50"] <= r["batch_latency_ms"]["p95"] <= r["batch_latency_ms"]["p99"], r
    assert r["wall_s"] > r["build_s"] + r["first_batch_s"], r  # the child's whole life includes both
    assert r["baseline_pss_bytes"] > 100e6, r  # an interpreter with torch imported, measured before the data
    assert r["peak_mem_bytes"] >= r["baseline_pss_bytes"], r  # the tree's peak includes that interpreter
    assert r["data_mem_bytes"] == r["peak_mem_bytes"] - r["baseline_pss_bytes"], r


def test_bench_robomimic(tiny_hdf5, tmp_path):
    out = tmp_path / "r.json"
    rc, log = run(["bench", "robomimic", "--dataset", tiny_hdf5, "--seq-length", "5", "--batch-size", "8",
                   "--num-workers", "0", "--batches", "3", "--json", str(out)])
    assert rc == 0, log[-3000:]
    data = json.loads(out.read_text())
    assert [r["backend"] for r in data["results"]] == ["native:low_dim", "native:all", "compressed_cache"]
    base = data["results"][0]
    for r in data["results"]:
        consistent(r)
        assert r["num_samples"] > 0
        assert r["ratios"]["samples_per_s_vs_native:low_dim"] == round(r["samples_per_s"] / base["samples_per_s"], 3)
    assert "vs native:all" in log
    for r in data["results"]:  # robomimic's shuffle over 12 demos: most samples of a batch of 8 from distinct demos
        assert 0.5 < r["episode_mix"] <= 1, r
    assert data["conversion"] is None and "episode mix" in log


def test_bench_robomimic_datapipe_and_conversion(tiny_hdf5, tmp_path):
    out = tmp_path / "r.json"
    rc, log = run(["bench", "robomimic", "--dataset", tiny_hdf5, "--seq-length", "5", "--batch-size", "8",
                   "--num-workers", "1", "--batches", "3", "--backends", "native:low_dim,datapipe",
                   "--backend-kwargs", 'datapipe={"convert_workers": 2, "shuffle_buffer": 2}', "--repeats", "2",
                   "--json", str(out)])
    assert rc == 0, log[-3000:]
    data = json.loads(out.read_text())
    native, dp = data["results"]
    consistent(dp)
    assert data["settings"]["repeats"] == 2 and "(run 2 of 2)" in log  # rounds; each row its median run
    for r in (native, dp):
        assert len(r["samples_per_s_runs"]) == 2 and r["samples_per_s"] == min(r["samples_per_s_runs"]), r
    assert dp["backend"] == "datapipe"
    assert dp["ratios"]["samples_per_s_vs_native:low_dim"] == round(dp["samples_per_s"] / native["samples_per_s"], 3)
    # a buffer of 2 open demos caps a batch at ~2 demos; the native shuffle mixes far more
    assert 0 < dp["episode_mix"] <= 3 / 8 < native["episode_mix"] <= 1
    assert [c["workers"] for c in data["conversion"]] == [1, 2]
    size = os.path.getsize(tiny_hdf5)
    for c in data["conversion"]:
        assert c["wall_s"] > 0 and c["shards_bytes"] > 0
        assert abs(c["source_mb_per_s"] - size / c["wall_s"] / 1e6) <= 0.01 * c["source_mb_per_s"] + 0.01
    assert "source MB/s" in log and "episode mix" in log


def test_bench_lerobot(lerobot_datasets, tmp_path):
    out = tmp_path / "l.json"
    rc, log = run(["bench", "lerobot", "--root", str(lerobot_datasets["av1_1cam"]), "--repo-id", "local/sample",
                   "--batch-size", "8", "--num-workers", "0", "--batches", "3", "--delta-timestamps", "diffusion",
                   "--backends", "native,compressed_cache,datapipe", "--json", str(out)])
    assert rc == 0, log[-3000:]
    data = json.loads(out.read_text())
    native, cc, dp = data["results"]
    assert native["backend"] == "native" and cc["backend"] == "compressed_cache" and dp["backend"] == "datapipe"
    assert data["settings"]["repeats"] == 1 and "samples_per_s_runs" not in native  # one run each by default
    for r in (native, cc, dp):
        consistent(r)
        assert r["decoded_frames_per_s"] == pytest.approx(r["samples_per_s"] * r["frames_per_sample"])
        assert r["decode_ms_per_sample"] > 0 and r["fetch_ms_per_sample"] > 0
    assert cc["frames_per_sample"] == 2 and cc["cache_bytes"] > 0 and native["cache_bytes"] == 0
    assert cc["ratios"]["samples_per_s_vs_native"] == round(cc["samples_per_s"] / native["samples_per_s"], 3)
    assert dp["ratios"]["samples_per_s_vs_native"] == round(dp["samples_per_s"] / native["samples_per_s"], 3)
    assert 0 < dp["cache_bytes"] < cc["raw_decoded_frames_bytes"]  # the shards' frames, compressed
    for r in data["results"]:
        assert 0 < r["episode_mix"] <= 1, r
    (conv,) = data["conversion"]  # --num-workers 0: converted with 1 worker only
    assert conv["workers"] == 1 and conv["wall_s"] > 0 and conv["source_mb_per_s"] > 0 and conv["shards_bytes"] > 0
    assert "decoded MB/s" in log and "episode mix" in log


def test_sample_data_lerobot_cli(tmp_path):
    rc, log = run(["sample-data", "lerobot", str(tmp_path / "d"), "--episodes", "2", "--min-length", "5",
                   "--max-length", "8", "--image-size", "16x24", "--codec", "h264", "--cameras", "2"])
    assert rc == 0, log
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/sample", root=tmp_path / "d")
    assert ds.num_episodes == 2 and ds[0]["observation.images.cam1"].shape == (3, 16, 24)
    rc, log = run(["sample-data", "lerobot", str(tmp_path / "d")])
    assert rc != 0 and "exists" in log
