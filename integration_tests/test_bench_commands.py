"""The benchmark commands run end to end and report what the README table needs (tiny settings: this checks the
plumbing, not speed; speed is measured by benchmarks/, never asserted in tests)."""

import json
import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def run(args, **env_extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", **env_extra)
    p = subprocess.run([os.path.join(BIN, "robo-loaders"), *args], capture_output=True, text=True, env=env, timeout=900)
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
    rc, log = run(
        [
            "bench",
            "robomimic",
            "--dataset",
            tiny_hdf5,
            "--seq-length",
            "5",
            "--batch-size",
            "8",
            "--num-workers",
            "0",
            "--batches",
            "3",
            "--json",
            str(out),
        ]
    )
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
    rc, log = run(
        [
            "bench",
            "robomimic",
            "--dataset",
            tiny_hdf5,
            "--seq-length",
            "5",
            "--batch-size",
            "8",
            "--num-workers",
            "1",
            "--batches",
            "3",
            "--backends",
            "native:low_dim,datapipe",
            "--backend-kwargs",
            'datapipe={"convert_workers": 2, "shuffle_buffer": 2}',
            "--repeats",
            "2",
            "--json",
            str(out),
        ]
    )
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
    rc, log = run(
        [
            "bench",
            "lerobot",
            "--root",
            str(lerobot_datasets["av1_1cam"]),
            "--repo-id",
            "local/sample",
            "--batch-size",
            "8",
            "--num-workers",
            "0",
            "--batches",
            "3",
            "--delta-timestamps",
            "diffusion",
            "--backends",
            "native,compressed_cache,datapipe",
            "--json",
            str(out),
        ]
    )
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
    """LeRobot's own writer, AV1 (its default), read back by LeRobotDataset. Issue 42 item 18: the command printed
    81 encoder lines of its 99 (SVT-AV1's banner and settings per video, a ``datasets`` "Map:" bar per episode,
    FFmpeg's "moving the moov atom" per appended episode); now its own progress and result only, the encoders
    still printing their errors (SVT_LOG=1 is SVT's errors level). Control: a user's own SVT_LOG is kept, and then
    SVT's lines are there."""
    small = ["--min-length", "5", "--max-length", "8", "--image-size", "32x48", "--codec", "av1"]
    rc, log = run(["sample-data", "lerobot", str(tmp_path / "d"), "--episodes", "2", "--cameras", "2", *small])
    assert rc == 0, log
    printed = [x for x in log.replace("\r", "\n").splitlines() if x.strip()]
    assert [x for x in printed if not x.startswith(("sample-data d:", "wrote "))] == [], printed
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/sample", root=tmp_path / "d")
    assert ds.num_episodes == 2 and ds[0]["observation.images.cam1"].shape == (3, 32, 48)
    rc, log = run(["sample-data", "lerobot", str(tmp_path / "d")])
    assert rc != 0 and "exists" in log
    rc, log = run(["sample-data", "lerobot", str(tmp_path / "loud"), "--episodes", "1", *small], SVT_LOG="3")
    assert rc == 0 and "Svt[info]" in log, log


@pytest.mark.parametrize(
    "framework,backends,kwargs,error",
    [
        (
            "robomimic",
            "native:low_dim,compresed_cache",
            [],
            "--backends: unknown data backend 'compresed_cache' (did you mean 'compressed_cache'?); "
            "registered backends: "
            "native, compressed_cache, datapipe, gpu_resampler, video_stream. Run 'robo-loaders list' to see them with "
            "descriptions.",
        ),
        (
            "robomimic",
            "native:low_dim,native:lowdim",
            [],
            "--backends: 'native:lowdim': the cache mode after ':' must be one of low_dim, all, none",
        ),
        (
            "robomimic",
            "native:low_dim,compressed_cache",
            ['compressed_cache={"codex": "zstd"}'],
            "--backend-kwargs compressed_cache: unknown option 'codex' for backend 'compressed_cache' (did you mean "
            "'codec'?); valid options: build_workers, cache_dir, codec, filter, keep, level, loader, max_memory",
        ),
        (
            "robomimic",
            "native:low_dim,compressed_cache",
            ['compresed_cache={"codec": "zstd"}'],
            "--backend-kwargs compresed_cache=...: --backends lists no 'compresed_cache' (it lists native:low_dim, "
            "compressed_cache); give the options to a label or backend it lists",
        ),
        (
            "lerobot",
            "native,streamin",
            [],
            "--backends: unknown data backend 'streamin' (did you mean 'streaming'?); registered backends: native, "
            "compressed_cache, datapipe, gpu_resampler, video_stream, streaming. "
            "Run 'robo-loaders list' to see them with "
            "descriptions.",
        ),
    ],
    ids=["misspelled", "cache_mode", "option", "options_for_no_label", "lerobot_misspelled"],
)
def test_bench_checks_every_backend_and_option_before_running_anything(
    tiny_hdf5, tmp_path, framework, backends, kwargs, error
):
    """Issue 30 item 14: a misspelled backend ran native first, then printed the child's traceback cut mid-word and
    a table cell naming train.data_backend. Every name, cache mode and option is checked first: a usage error, one
    line naming the option and the known names, and nothing run."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    source = ["--dataset", tiny_hdf5] if framework == "robomimic" else ["--root", str(tmp_path)]
    extra = [a for k in kwargs for a in ("--backend-kwargs", k)]
    r = CliRunner().invoke(
        main, ["bench", framework, *source, "--backends", backends, "--batches", "2", "--num-workers", "0", *extra]
    )
    assert r.exit_code == 2 and [ln for ln in r.output.splitlines() if ln.startswith("Error")] == [f"Error: {error}"]
    assert "[bench]" not in r.output and "Traceback" not in r.output and "train.data_backend" not in r.output


def test_bench_labels_that_are_right_pass_the_check():
    """The negative control of the check above: tags, cache modes, options per label or backend, streaming."""
    from robo_loaders_plugin.bench import lerobot_bench, robomimic_bench

    robomimic_bench.check_backends(
        ["native:low_dim", "native:none", "gpu_resampler", "gpu_resampler#third"],
        {"gpu_resampler#third": {"max_memory": "1GB"}, "gpu_resampler": {}},
    )
    lerobot_bench.check_backends(
        ["native", "streaming", "datapipe#b"], {"datapipe": {"shuffle_buffer": 2}, "streaming": {"buffer_size": 10}}
    )


def test_bench_lerobot_on_a_root_holding_no_dataset_is_one_line(tmp_path):
    """A reviewer's reproduction: ``bench lerobot --root`` on a directory with no dataset ran every backend, each
    "FAILED: httpx.ConnectError" (LeRobot went to the Hub for it). Refused before anything runs, naming --root."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    r = CliRunner().invoke(main, ["bench", "lerobot", "--root", str(tmp_path), "--batches", "2"])
    assert r.exit_code == 2 and "holds no LeRobot dataset (no meta/info.json)" in r.output, r.output
    assert "[bench]" not in r.output and "FAILED" not in r.output


def test_bench_lerobot_on_an_unreadable_dataset_is_one_line(lerobot_datasets, tmp_path):
    """A reviewer's reproduction: a ``meta/info.json`` that is no JSON, or a copy without its data files, gave each
    backend's child its own traceback (78 lines each). Refused before anything runs, naming --root, as lerobot-train
    refuses them."""
    import shutil

    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    broken, no_data = tmp_path / "broken", tmp_path / "no_data"
    shutil.copytree(lerobot_datasets["av1_1cam"], broken)
    shutil.copytree(lerobot_datasets["av1_1cam"], no_data)
    (broken / "meta" / "info.json").write_text('{"fps": 20,')
    shutil.rmtree(no_data / "data")
    no_fps = tmp_path / "no_fps" / "meta"
    no_fps.mkdir(parents=True)
    (no_fps / "info.json").write_text('{"total_episodes": 3}')
    cases = [(broken, "info.json is not readable JSON"), (no_data, "no data/*/*.parquet files")]
    for root, said in cases + [(no_fps.parent, "info.json is not a LeRobot v3 dataset's (KeyError")]:
        args = ["bench", "lerobot", "--root", str(root), "--backends", "native", "--batches", "1"]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "Invalid value for --root" in r.output and said in r.output, r.output
        assert "[bench]" not in r.output and "Traceback" not in r.output


def test_outputs_that_cannot_be_written_are_refused_before_anything_runs(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: ``bench --json`` into a read-only location was an OSError traceback after the
    whole benchmark ran, and ``report --out`` one at once. Both are refused first, naming the option."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    r = CliRunner().invoke(main, ["bench", "robomimic", "--dataset", tiny_hdf5, "--json", "/proc/nope/b.json"])
    assert r.exit_code == 2 and "--json" in r.output and "cannot create '/proc/nope'" in r.output, r.output
    assert "[bench]" not in r.output and "Traceback" not in r.output
    result = tmp_path / "r.json"
    result.write_text("{}")
    r = CliRunner().invoke(main, ["report", str(result), "--out", "/proc/nope"])
    assert r.exit_code == 2 and "--out" in r.output and "cannot create '/proc/nope'" in r.output, r.output


def test_bench_robomimic_refuses_a_file_that_is_no_hdf5_and_unknown_obs_keys(tiny_hdf5, tmp_path):
    """A reviewer's reproductions: ``bench robomimic --dataset`` on a file that is no HDF5 printed an h5py
    traceback per backend; ``--obs-keys`` with a misspelled key dropped it, the benchmark running without that
    camera. Both refused before anything runs, naming the option. Control: the keys the file has pass the check."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import _check_bench_obs_keys, main

    text = tmp_path / "notes.txt"
    text.write_text("not hdf5\n")
    r = CliRunner().invoke(main, ["bench", "robomimic", "--dataset", str(text), "--batches", "2"])
    assert r.exit_code == 2 and "not an HDF5 file" in r.output and "--dataset" in r.output, r.output
    assert "[bench]" not in r.output and "Traceback" not in r.output
    args = ["bench", "robomimic", "--dataset", tiny_hdf5, "--obs-keys", "agentview_imag,robot0_eef_pos"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "'agentview_imag' not among" in r.output and "--obs-keys" in r.output, r.output
    assert "agentview_image" in r.output and "[bench]" not in r.output
    _check_bench_obs_keys(tiny_hdf5, "agentview_image,robot0_eef_pos")  # control
