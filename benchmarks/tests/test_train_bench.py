"""The training-time benchmark runs the frameworks' real training loops (robomimic's train script, lerobot-train)
per backend and reports what its JSON promises. Tiny settings: this checks the plumbing (every value is one a
broken run -- nothing timed, wrong log parsed, backend not used -- cannot give), never speed. robomimic's run and
the log parsers here; lerobot-train's run in test_train_bench_lerobot.py (its own module, so the two real runs go
to both xdist workers)."""

import json
import os

import pytest
from click.testing import CliRunner

from benchmarks.harness.cli import main
from benchmarks.harness.train import lerobot_train as lt
from benchmarks.harness.train import robomimic_train as rt
from benchmarks.harness.train.common import LoggedRun
from benchmarks.tests.train_bench_checks import consistent, ratios_to

pytestmark = pytest.mark.usefixtures("passive_threads")


@pytest.fixture(scope="module")
def rm_hdf5(tmp_path_factory):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    # 24x24 frames: large enough (>= 1024 bytes a frame) for compressed_cache to store them as compressed frames
    return write_robomimic_hdf5(
        str(tmp_path_factory.mktemp("train_bench") / "rm.hdf5"),
        demos=6,
        image_size=24,
        cameras=2,
        seed=5,
        min_length=20,
        max_length=30,
        progress=False,
    )


def test_robomimic_train_bench(rm_hdf5, tmp_path):
    out, work = tmp_path / "r.json", tmp_path / "work"
    res = CliRunner().invoke(
        main,
        [
            "train",
            "robomimic",
            "--dataset",
            rm_hdf5,
            "--backends",
            "native:low_dim,compressed_cache",
            "--epochs",
            "2",
            "--steps-per-epoch",
            "2",
            "--batch-size",
            "2",
            "--num-workers",
            "0",
            "--rnn-hidden-dim",
            "16",
            # robomimic's small conv encoder instead of the paper's ResNet18: the test checks plumbing, not a model
            "--config-set",
            "observation.encoder.rgb.core_kwargs.backbone_class=ShallowConv",
            "--work-dir",
            str(work),
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output[-4000:]
    data = json.loads(out.read_text())
    assert data["framework"] == "robomimic" and data["benchmark"] == "training"
    assert data["baseline"] == "native:low_dim" and data["machine"]["cores"] > 0
    assert data["settings"]["epochs"] == 2 and data["settings"]["steps_per_epoch"] == 2
    assert data["settings"]["obs_rgb"] == ["agentview_image", "robot0_eye_in_hand_image"]
    native, cc = data["results"]
    assert native["backend"] == "native:low_dim" and cc["backend"] == "compressed_cache"
    assert native["data_backend"] is None and cc["data_backend"] == "compressed_cache"
    for r in (native, cc):
        consistent(r, 2, 2, 2)
        for e in r["epochs"]:  # robomimic's own parts of Time_Epoch, read from its log
            assert e["train_batch_s"] > 0 and e["process_batch_s"] > 0 and e["other_s"] > -1e-3, e
            assert e["loss"] is not None
    ratios_to(native, [native, cc])
    # the runs really trained with what they claim: robomimic's SequenceDataset vs the plugin's backend
    native_log, cc_log = (work / "native_low_dim.log").read_text(), (work / "compressed_cache.log").read_text()
    assert "[robo-loaders] robomimic data backend" not in native_log and "SequenceDataset" in native_log
    assert "[robo-loaders] robomimic data backend: compressed_cache [all demos]" in cc_log
    cfg = json.loads((work / "compressed_cache.json").read_text())
    assert cfg["algo"]["rnn"]["horizon"] == cfg["train"]["seq_length"] == 10 and cfg["algo"]["rnn"]["hidden_dim"] == 16
    assert cfg["observation"]["encoder"]["rgb"]["core_kwargs"]["backbone_class"] == "ShallowConv"
    assert cfg["experiment"]["epoch_every_n_steps"] == 2 and not cfg["experiment"]["rollout"]["enabled"]
    assert "data stall" in res.output and "vs native:low_dim" in res.output


def fake_run(lines, rc=0):
    return LoggedRun(
        rc=rc, lines=[(0.1 * i, text) for i, text in enumerate(lines)], wall_s=1.0, peak_mem_bytes=1, load_avg=(0, 0)
    )


def robomimic_epoch(n, data_min=0.001, epoch_min=0.01):
    return [
        f"Train Epoch {n}",
        "{",
        '    "Loss": 1.0,',
        f'    "Time_Data_Loading": {data_min},',
        f'    "Time_Epoch": {epoch_min},',
        '    "Time_Log_Info": 0.0,',
        '    "Time_Process_Batch": 0.0,',
        f'    "Time_Train_Batch": {epoch_min - data_min}',
        "}",
    ]


def test_broken_runs_are_failures_not_numbers():
    """What robomimic and lerobot-train print when a run goes wrong gives an error row, never timings."""
    banners = [rt.MODEL_BANNER, rt.DATASET_BANNER, rt.LOOP_START]
    ok = rt.result_from_run("x", fake_run(banners + robomimic_epoch(1) + robomimic_epoch(2)), 2, 3, 4)
    assert ok["steps_per_s"] == pytest.approx(3 / 0.6) and ok["stall_fraction"] == pytest.approx(0.1)
    swallowed = fake_run(banners + robomimic_epoch(1) + ["run failed with error:", "boom in epoch 2"])
    assert "boom in epoch 2" in rt.result_from_run("x", swallowed, 2, 3, 4)["error"]
    assert (
        "expected 3 'Train Epoch' blocks"
        in rt.result_from_run("x", fake_run(banners + robomimic_epoch(1) + robomimic_epoch(2)), 3, 3, 4)["error"]
    )
    # lerobot-train writes step 1000 as "step:1K": steps are counted, not read
    step = "INFO ot_train.py:641 step:{} smpl:4K ep:3 epch:1.00 loss:0.1 grdn:1 lr:1e-05 updt_s:0.300 data_s:0.100"
    lines = ["Creating dataset", "Creating policy", "Start offline training"] + [
        step.format(s) for s in ("998", "999", "1K", "1K")
    ]
    ok = lt.result_from_run("x", fake_run(lines), 2, 2, 4)
    assert [s["step"] for s in ok["steps"]] == [1, 2, 3, 4] and ok["stall_fraction"] == pytest.approx(0.25)
    assert "parsed 4" in lt.result_from_run("x", fake_run(lines), 3, 2, 4)["error"]
    assert "exited with 1" in lt.result_from_run("x", fake_run(lines, rc=1), 2, 2, 4)["error"]


def test_the_training_benchmark_is_the_harness_train_command():
    """``python -m benchmarks.harness train robomimic|lerobot`` (the project's tooling, no longer behind ``--train``
    on the user's ``robo-loaders bench``): its own options, and an epoch count with no measured epoch refused."""
    from robo_loaders_plugin.cli import main as robo_loaders

    runner = CliRunner()
    helped = runner.invoke(main, ["train", "robomimic", "--help"]).output
    assert "--steps-per-epoch" in helped and "--batches" not in helped
    assert "--policy" in runner.invoke(main, ["train", "lerobot", "--help"]).output
    bad = runner.invoke(main, ["train", "robomimic", "--dataset", os.devnull, "--epochs", "1"])
    assert bad.exit_code == 2 and "--epochs" in bad.output
    assert "--train" not in runner.invoke(robo_loaders, ["bench", "robomimic", "--help"]).output
