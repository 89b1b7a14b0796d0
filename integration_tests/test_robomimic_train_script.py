"""robomimic's unmodified training script in a subprocess, with the plugin selected from the JSON config.

robomimic's train() swallows exceptions and exits 0, so these tests assert on the log and the checkpoints."""

import glob
import json
import os
import subprocess
import sys

import pytest
from readme import linked_files, section
from robomimic_helpers import RGB

BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def e2e_hdf5(tmp_path_factory):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    return write_robomimic_hdf5(
        str(tmp_path_factory.mktemp("e2e") / "e2e.hdf5"),
        demos=8,
        image_size=32,
        cameras=2,
        seed=11,
        min_length=20,
        max_length=30,
        valid_fraction=0.25,
        progress=False,
    )


def write_config(tmp_path, data, backend, name, backend_kwargs=None, workers=1):
    from robomimic.config import config_factory

    cfg = json.loads(config_factory("bc").dump())
    cfg["experiment"].update(
        name=name,
        validate=True,
        epoch_every_n_steps=3,
        validation_epoch_every_n_steps=2,
        render_video=False,
        keep_all_videos=False,
    )
    cfg["experiment"]["rollout"]["enabled"] = False
    cfg["experiment"]["save"].update(enabled=True, every_n_epochs=1)
    cfg["experiment"]["logging"].update(terminal_output_to_txt=False, log_tb=False)
    cfg["train"].update(
        data=data,
        output_dir=str(tmp_path / "out"),
        num_epochs=2,
        batch_size=4,
        seq_length=5,
        num_data_workers=workers,
        hdf5_filter_key="train",
        hdf5_validation_filter_key="valid",
        cuda=False,
        data_backend=backend,
        data_backend_kwargs=backend_kwargs or {},
    )
    cfg["algo"]["rnn"].update(enabled=True, horizon=5, hidden_dim=32)
    cfg["observation"]["modalities"]["obs"].update(low_dim=["robot0_eef_pos", "object"], rgb=RGB)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg, indent=2))
    return str(path)


def run(args, env_extra=None, timeout=600):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ROBO_LOADERS_DISABLE", None)
    env.update(env_extra or {})
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def assert_trained(out, tmp_path, name, backend_line):
    assert "run failed with error" not in out, out[-3000:]
    assert backend_line in out, out[-3000:]
    assert "Train Epoch 2" in out and "Validation Epoch 2" in out, out[-3000:]
    assert glob.glob(str(tmp_path / "out" / name / "*" / "models" / "model_epoch_2.pth")), out[-2000:]


@pytest.mark.parametrize("workers", [0, 2])
def test_unmodified_train_script_uses_backend(e2e_hdf5, tmp_path, workers):
    cfg = write_config(tmp_path, e2e_hdf5, "compressed_cache", f"cc{workers}", workers=workers)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert rc == 0, out[-3000:]
    assert_trained(out, tmp_path, f"cc{workers}", "[robo-loaders] robomimic data backend: compressed_cache [train]")
    assert "robomimic data backend: compressed_cache [valid]" in out
    for key in ("L1_Loss", "L2_Loss", "Cosine_Loss"):
        assert f'"{key}"' in out


def test_the_complete_config_the_readme_links_trains(e2e_hdf5, tmp_path):
    """Issue 42 item 15: the robomimic quickstart showed a ``train`` fragment and never linked a complete config.
    The config it links (examples/) is read by robomimic's unmodified script through ``robo-loaders
    robomimic-train`` and trains and validates on the backend it names, given only its data, an output folder and
    one step of each (its BC-RNN takes seconds a batch on a CPU; the README says to set ``train.data``). A link to
    a file that is not there fails tests/test_readme.py."""
    (linked,) = linked_files(section("Quickstart: robomimic"), r"examples/[\w.-]+\.json")
    with open(linked) as f:
        cfg = json.load(f)
    backend = cfg["train"]["data_backend"]
    cfg["train"].update(data=e2e_hdf5, output_dir=str(tmp_path / "out"), batch_size=2, num_epochs=1)
    cfg["experiment"].update(epoch_every_n_steps=1, validation_epoch_every_n_steps=1)
    path = tmp_path / "linked.json"
    path.write_text(json.dumps(cfg))
    rc, out = run([os.path.join(BIN, "robo-loaders"), "robomimic-train", "--config", str(path)])
    assert rc == 0 and "finished run successfully" in out, out[-3000:]
    for line in (f"robomimic data backend: {backend} [train]", f"robomimic data backend: {backend} [valid]"):
        assert line in out, out[-3000:]
    assert "Train Epoch 1" in out and "Validation Epoch 1" in out, out[-3000:]


def test_robomimic_train_command_with_hook_disabled(e2e_hdf5, tmp_path):
    cfg = write_config(tmp_path, e2e_hdf5, "compressed_cache", "cli")
    rc, out = run(
        [os.path.join(BIN, "robo-loaders"), "robomimic-train", "--config", cfg], env_extra={"ROBO_LOADERS_DISABLE": "1"}
    )
    assert rc == 0, out[-3000:]
    assert_trained(out, tmp_path, "cli", "[robo-loaders] robomimic data backend: compressed_cache [train]")


def test_robomimic_train_command_exit_status_and_retry_without_a_terminal(e2e_hdf5, tmp_path):
    """robomimic's script exits 0 after a failed run; the wrapper exits 1 (a failure that is not the plugin's: the
    HDF5 file is not there, robomimic's own loader, its handler's traceback kept). A failed run leaves its folder,
    and the retry, without a terminal, is not stopped by robomimic's overwrite prompt (EOFError): the old folder is
    kept and the run goes beside it. The plugin's own refusal (an unwritable cache_dir, item 12) is one line."""
    missing = str(tmp_path / "not_there.hdf5")
    bad = write_config(tmp_path, missing, None, "retry")
    cmd = [os.path.join(BIN, "robo-loaders"), "robomimic-train", "--config", bad]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600)
    assert first.returncode == 1 and "run failed with error" in first.stdout, (first.stdout + first.stderr)[-3000:]
    assert "exit status 1" in first.stderr and "Traceback" in first.stdout  # not the plugin's: robomimic's words
    unwritable = write_config(
        tmp_path, e2e_hdf5, "compressed_cache", "retry", backend_kwargs={"cache_dir": "/proc/nope"}
    )
    again = subprocess.run(
        cmd[:-1] + [unwritable], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600
    )
    out = again.stdout + again.stderr
    assert again.returncode == 1 and "EOFError" not in out and "keeping the existing runs" in out, out[-3000:]
    assert (
        "error: train.data_backend_kwargs.cache_dir must be a directory you can write to: cannot create '/proc/nope'"
        in again.stderr
        and "Traceback" not in out
    ), out[-3000:]
    good = write_config(tmp_path, e2e_hdf5, "compressed_cache", "retry")
    ok = subprocess.run(
        cmd[:-1] + [good], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=600
    )
    assert ok.returncode == 0, (ok.stdout + ok.stderr)[-3000:]
    assert len(glob.glob(str(tmp_path / "out" / "retry" / "*"))) == 3  # every attempt kept, in its own folder


@pytest.mark.parametrize("how", ["script", "robomimic-train"])
def test_a_late_refusal_is_one_line_and_a_failed_exit_status(e2e_hdf5, tmp_path, how):
    """Issue 30 item 6: a refusal once the run started (the dataset is read: target_fps beyond what the file's rate
    allows) printed robomimic's ~35-line traceback and exited 0. Now one line, exit status 1, through robomimic's
    own script too (SystemExit passes its handler) and through robo-loaders robomimic-train."""
    cfg = write_config(tmp_path, e2e_hdf5, "gpu_resampler", "late", backend_kwargs={"target_fps": 5000})
    cmd = (
        [sys.executable, "-m", "robomimic.scripts.train"]
        if how == "script"
        else [os.path.join(BIN, "robo-loaders"), "robomimic-train"]
    )
    rc, out = run(cmd + ["--config", cfg])
    assert rc == 1, out[-3000:]
    lines = [ln for ln in out.splitlines() if "recorded at" in ln]
    assert lines == [
        "error: train.data_backend_kwargs.target_fps=5000 is more than 100x the rate "
        f"{e2e_hdf5} was recorded at (20 Hz); choose a target_fps <= 2000"
    ], out[-3000:]
    assert "Traceback" not in out and "run failed with error" not in out, out[-3000:]


@pytest.mark.parametrize("bad", ["obs key", "filter key", "validation filter key"])
def test_a_missing_key_through_the_script_is_one_line_naming_it(e2e_hdf5, tmp_path, bad):
    """A reviewer's reproduction: through robomimic's script, an observation key or filter key the file lacks was
    h5py's bare ``KeyError`` and robomimic's traceback (exit status 0 with ``-m``), read by robomimic before the
    plugin's factory names it. With a backend chosen, one line naming the file, the key and what the file has, exit
    status 1. Control: the same config with the key fixed trains (the test above and the e2e runs)."""
    cfg_path = write_config(tmp_path, e2e_hdf5, "compressed_cache", "missing")
    cfg = json.loads(open(cfg_path).read())
    if bad == "obs key":
        cfg["observation"]["modalities"]["obs"]["low_dim"].append("no_such_key")
        want = "data/demo_0/obs/no_such_key is missing (available under /data/demo_0/obs:"
    elif bad == "filter key":
        cfg["train"]["hdf5_filter_key"] = "nope"
        want = "filter key 'nope' not found under mask/ (available: ['train', 'valid'])"
    else:
        cfg["train"]["hdf5_validation_filter_key"] = "nope"
        want = "filter key 'nope' not found under mask/ (available: ['train', 'valid'])"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg_path])
    lines = [ln for ln in out.splitlines() if want in ln]
    assert rc == 1 and len(lines) == 1 and lines[0].startswith(f"error: {e2e_hdf5}: "), out[-3000:]
    assert "Traceback" not in out and "KeyError" not in out, out[-3000:]


@pytest.mark.parametrize("where", ["experiment", "top level"])
def test_a_plugin_key_outside_train_is_one_line_naming_it(e2e_hdf5, tmp_path, where):
    """A reviewer's finding: ``data_backend`` put under ``experiment`` (or at the top level) gave robomimic's
    "key-locked" traceback, word for word what the plugin not installed gives. Now one line naming the key and the
    section it belongs in, exit status 1. Control: the same key under ``train`` trains (the tests above)."""
    cfg_path = write_config(tmp_path, e2e_hdf5, None, "misplaced")
    cfg = json.loads(open(cfg_path).read())
    del cfg["train"]["data_backend"]
    (cfg["experiment"] if where == "experiment" else cfg)["data_backend"] = "compressed_cache"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg_path])
    want = 'error: the config gives "data_backend" outside its "train" section; robo-loaders reads it as train.data'
    assert rc == 1 and want in out and "Traceback" not in out, out[-3000:]


def test_a_bug_keeps_its_traceback_in_robomimics_script(e2e_hdf5, tmp_path):
    """Negative control of item 6: an error that is not the plugin's (robomimic's own, the file is not there) is
    left to robomimic's handler: its traceback, and its exit status 0."""
    cfg = write_config(tmp_path, str(tmp_path / "not_there.hdf5"), "compressed_cache", "bug")
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert rc == 0 and "run failed with error" in out and "Traceback" in out, out[-3000:]


def test_hook_disabled_means_robomimic_untouched(e2e_hdf5, tmp_path):
    """Without the hook, stock robomimic rejects the plugin keys: proof that the hook is what makes them work."""
    cfg = write_config(tmp_path, e2e_hdf5, "compressed_cache", "off")
    rc, out = run(
        [sys.executable, "-m", "robomimic.scripts.train", "--config", cfg], env_extra={"ROBO_LOADERS_DISABLE": "1"}
    )
    assert rc != 0 and "key-locked" in out and "data_backend" in out, out[-2000:]


def test_null_backend_is_stock_robomimic(e2e_hdf5, tmp_path):
    cfg = write_config(tmp_path, e2e_hdf5, None, "null")
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert rc == 0, out[-3000:]
    assert "[robo-loaders]" not in out
    assert "SequenceDataset" in out and "Train Epoch 2" in out
    assert glob.glob(str(tmp_path / "out" / "null" / "*" / "models" / "model_epoch_2.pth"))


def test_unknown_backend_fails_before_training(e2e_hdf5, tmp_path):
    cfg = write_config(tmp_path, e2e_hdf5, "compresed_cache", "typo")
    # no exit status to check: robomimic's train script prints "run failed with error" and exits 0
    _rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert "unknown data backend 'compresed_cache'" in out and "compressed_cache" in out and "native" in out
    assert "Train Epoch 1" not in out


def test_third_party_backend_from_entry_point(e2e_hdf5, tmp_path):
    """A distribution declaring the robo_loaders entry point is listed and selectable from a robomimic config."""
    site = tmp_path / "site"
    dist = site / "toy_batches_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-batches-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[robo_loaders]\ntoy = toy_batches_plugin\n")
    src = os.path.join(os.path.dirname(__file__), "thirdparty", "toy_batches_plugin.py")
    (site / "toy_batches_plugin.py").write_text(open(src).read())
    env = {"PYTHONPATH": str(site)}

    rc, out = run([os.path.join(BIN, "robo-loaders"), "list", "--json"], env_extra=env)
    assert rc == 0, out
    listed = {b["name"]: b for b in json.loads(out)}
    assert listed["toy_batches"]["kind"] == {"robomimic": "batch"} and listed["toy_batches"]["plugin"] == "toy"
    rc, out = run([os.path.join(BIN, "robo-loaders"), "list"])
    assert "toy_batches" not in out  # not installed there

    cfg = write_config(tmp_path, e2e_hdf5, "toy_batches", "toy", backend_kwargs={"tag": "hello"})
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg], env_extra=env)
    assert rc == 0, out[-3000:]
    assert_trained(
        out, tmp_path, "toy", "robomimic data backend: toy_batches [train] toy batches over SequenceDataset, tag=hello"
    )
    assert "[toy_batches] batch 3" in out  # the epoch loop pulled batches from the backend itself


def test_unmodified_train_script_with_datapipe(e2e_hdf5, tmp_path):
    """A batch-level backend: robomimic's epoch loop pulls the pipeline's batches (converted on first use)."""
    cfg = write_config(
        tmp_path, e2e_hdf5, "datapipe", "dp", backend_kwargs={"cache_dir": str(tmp_path / "shards")}, workers=2
    )
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert rc == 0, out[-3000:]
    assert_trained(out, tmp_path, "dp", "[robo-loaders] robomimic data backend: datapipe [train]")
    assert "robomimic data backend: datapipe [valid]" in out


def test_unmodified_train_script_with_gpu_resampler(e2e_hdf5, tmp_path):
    """An indexed backend: robomimic's epoch loop gets batches built in-process over its DataLoader's sampler, at
    half the recorded rate."""
    cfg = write_config(tmp_path, e2e_hdf5, "gpu_resampler", "gr", backend_kwargs={"target_fps": 10}, workers=1)
    rc, out = run([sys.executable, "-m", "robomimic.scripts.train", "--config", cfg])
    assert rc == 0, out[-3000:]
    assert_trained(out, tmp_path, "gr", "[robo-loaders] robomimic data backend: gpu_resampler [train]")
    assert "resampled 20 -> 10 Hz" in out and "gpu_resampler [valid]" in out
