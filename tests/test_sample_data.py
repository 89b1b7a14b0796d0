import json
import os
import subprocess
import sys

import h5py
import numpy as np
from click.testing import CliRunner

from robo_loaders_plugin.cli import main
from robo_loaders_plugin.storage.codec import FrameCodec


def test_sample_data_layout(tmp_path):
    out = tmp_path / "d.hdf5"
    r = CliRunner().invoke(
        main,
        ["sample-data", "robomimic", str(out), "--demos", "5", "--image-size", "32", "--cameras", "3", "--seed", "4"],
    )
    assert r.exit_code == 0, r.output
    with h5py.File(out, "r") as f:
        data = f["data"]
        assert sorted(data.keys()) == [f"demo_{i}" for i in range(5)]
        env = json.loads(data.attrs["env_args"])
        assert env["env_name"] and env["type"] == 1 and "env_kwargs" in env
        total = 0
        for name in data:
            g = data[name]
            n = int(g.attrs["num_samples"])
            total += n
            assert g["actions"].shape == (n, 7) and g["actions"].dtype == np.float64
            assert g["rewards"].shape == (n,) and g["dones"].dtype == np.int64 and g["dones"][-1] == 1
            assert g["states"].shape[0] == n
            for prefix in ("obs", "next_obs"):
                cams = [k for k in g[prefix] if k.endswith("_image")]
                assert len(cams) == 3
                for k in cams:
                    assert g[f"{prefix}/{k}"].shape == (n, 32, 32, 3) and g[f"{prefix}/{k}"].dtype == np.uint8
                assert g[f"{prefix}/robot0_eef_pos"].dtype == np.float64
            np.testing.assert_array_equal(g["next_obs/agentview_image"][:-1], g["obs/agentview_image"][1:])
            for k in g["obs"]:  # the final state is another observation than the last (so a backend serving obs there
                # or a goal one step early shows)
                assert not np.array_equal(g[f"next_obs/{k}"][-1], g[f"obs/{k}"][-1]), (name, k)
        assert data.attrs["total"] == total
        train = {x.decode() for x in f["mask/train"][:]}
        valid = {x.decode() for x in f["mask/valid"][:]}
        assert train and valid and not train & valid and train | valid == set(data.keys())


def test_sample_frames_move_smoothly_and_compress(tmp_path):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(str(tmp_path / "d.hdf5"), demos=1, image_size=84, seed=0, progress=False)
    with h5py.File(path, "r") as f:
        img = f["data/demo_0/obs/agentview_image"][()]
    step = np.abs(np.diff(img.astype(np.int16), axis=0)).mean()
    assert 0 < step < 10  # moves, but smoothly
    assert img.std() > 10  # not a flat colour
    c = FrameCodec()
    ratio = img[0].nbytes / len(c.compress(img[0]))
    assert 1.3 < ratio < 50, ratio  # compressible like a render, not noise and not trivially flat


def test_sample_data_is_deterministic(tmp_path):
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    a = write_robomimic_hdf5(str(tmp_path / "a.hdf5"), demos=2, image_size=16, seed=7, progress=False)
    b = write_robomimic_hdf5(str(tmp_path / "b.hdf5"), demos=2, image_size=16, seed=7, progress=False)
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert (fa["data/demo_1/obs/agentview_image"][()] == fb["data/demo_1/obs/agentview_image"][()]).all()


# -- issue 42 item 13: nothing that exists is replaced unless asked, and then only a dataset sample-data writes ---
def sample(*args):
    """``robo-loaders sample-data ARGS``: (exit code, output lines)."""
    r = CliRunner().invoke(main, ["sample-data", *map(str, args)])
    return r.exit_code, r.output.splitlines()


def demos_in(path) -> int:
    with h5py.File(path, "r") as f:
        return len(f["data"])


def test_sample_data_robomimic_refuses_an_existing_output_unless_asked_and_then_only_a_robomimic_file(tmp_path):
    """It wrote over anything: an 8-demo file became a 2-demo one, a LeRobot dataset's ``meta/info.json`` became
    HDF5, a directory raised click's three-line usage error. Now an existing OUT is refused in one line naming it and
    ``--overwrite``; with the flag a robomimic HDF5 file is replaced, anything else is still refused, untouched.
    Negative control: with ``--overwrite`` the same command does replace the robomimic file."""
    out = tmp_path / "d.hdf5"
    assert sample("robomimic", out, "--demos", 3, "--image-size", 8, "--cameras", 1)[0] == 0
    code, lines = sample("robomimic", out, "--demos", 1, "--image-size", 8, "--cameras", 1)
    assert code == 1 and lines == [f"Error: {out} exists: add --overwrite to replace it, or choose another output path"]
    assert demos_in(out) == 3 and not list(tmp_path.glob("*.tmp-*"))
    code, lines = sample("robomimic", out, "--demos", 1, "--image-size", 8, "--cameras", 1, "--overwrite")
    assert code == 0 and demos_in(out) == 1, lines  # the control: replaced when asked
    info = tmp_path / "ds" / "meta" / "info.json"
    info.parent.mkdir(parents=True)
    info.write_text('{"codebase_version": "v3.0"}')
    for target, what in ((info, "is not an HDF5 file"), (info.parent, "is a directory")):
        code, lines = sample("robomimic", target, "--demos", 1, "--image-size", 8, "--overwrite")
        assert code == 1 and len(lines) == 1, lines
        assert lines[0].startswith(f"Error: {target} {what}: --overwrite replaces only a robomimic HDF5 file"), lines
    assert info.read_text() == '{"codebase_version": "v3.0"}' and sorted(p.name for p in info.parent.iterdir()) == [
        "info.json"
    ]


def episodes_in(root) -> int:
    with open(root / "meta" / "info.json") as f:
        return json.load(f)["total_episodes"]


def test_sample_data_lerobot_names_the_flag_replaces_only_a_lerobot_dataset_and_never_leaves_a_partial_one(
    tmp_path, monkeypatch
):
    """The LeRobot variant refused, but said "pass overwrite=True" where the flag is ``--overwrite``; with it, it
    deleted whatever directory OUT was. Now: one line naming OUT and ``--overwrite``; with it, a LeRobot dataset
    (or an empty directory) is replaced and one that holds anything else is refused, kept whole; the new dataset is
    written beside OUT and renamed into place, so a run that fails midway leaves the old dataset (read back by
    LeRobotDataset) and no partial directory. Control: the same command with --overwrite replaces the dataset."""
    from robo_loaders_plugin.sample_data import lerobot_v3

    for quiet in ("SVT_LOG", "HF_DATASETS_DISABLE_PROGRESS_BARS"):  # what the command sets: this process's again after
        monkeypatch.setenv(quiet, os.environ.get(quiet, "1"))
    out = tmp_path / "ds"
    small = ["--min-length", 4, "--max-length", 6, "--image-size", "16x16", "--codec", "h264"]
    assert sample("lerobot", out, "--episodes", 2, *small)[0] == 0
    code, lines = sample("lerobot", out, "--episodes", 1, *small)
    assert code == 1 and lines == [f"Error: {out} exists: add --overwrite to replace it, or choose another output path"]
    assert episodes_in(out) == 2
    code, lines = sample("lerobot", out, "--episodes", 1, *small, "--overwrite")
    assert code == 0 and episodes_in(out) == 1, lines  # the control: replaced when asked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no partial or replaced copy left beside it

    def fails_midway(*args, **kwargs):
        contents = real(*args, **kwargs)
        yield next(contents)
        raise RuntimeError("the writer stopped")

    real = lerobot_v3.episode_contents
    monkeypatch.setattr(lerobot_v3, "episode_contents", fails_midway)
    r = CliRunner().invoke(main, ["sample-data", "lerobot", str(out), "--episodes", 3, *map(str, small), "--overwrite"])
    assert isinstance(r.exception, RuntimeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    assert LeRobotDataset("local/sample", root=out).meta.total_episodes == 1  # the old one, whole
    monkeypatch.setattr(lerobot_v3, "episode_contents", real)

    (out / "notes.txt").write_text("mine")
    code, lines = sample("lerobot", out, "--episodes", 1, *small, "--overwrite")
    assert code == 1 and lines == [
        f"Error: {out} is a LeRobot dataset that also holds notes.txt, which sample-data does not write: --overwrite "
        "replaces only a LeRobot dataset directory sample-data could have written; remove it yourself or choose "
        "another output path"
    ]
    assert (out / "notes.txt").read_text() == "mine" and episodes_in(out) == 1
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    assert sample("lerobot", mine, *small, "--overwrite")[0] == 1 and (mine / "thesis.tex").read_text() == "x"


BLOCK_LEROBOT = """
import sys
sys.modules["lerobot"] = None  # how Python blocks an import: what an environment without LeRobot sees
from robo_loaders_plugin.cli import main
main(["sample-data", "lerobot", sys.argv[1]])
"""


def test_sample_data_lerobot_without_lerobot_is_one_line_naming_the_extra(tmp_path):
    """Without LeRobot it was a 29-line ``ModuleNotFoundError``. Now one line with the pip command, before OUT is
    touched. Control: with LeRobot there, the same command gets past that check (to refusing the existing OUT)."""

    def run(out, block=True):
        code = BLOCK_LEROBOT if block else BLOCK_LEROBOT.replace('sys.modules["lerobot"] = None', "")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        return subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env)

    p = run(tmp_path / "new")
    assert p.returncode == 1 and p.stderr.splitlines() == [
        "Error: sample-data lerobot (LeRobot's own writer) needs lerobot, which is not installed: "
        'pip install "robo-loaders-plugin[lerobot]"'
    ], p.stderr
    assert not (tmp_path / "new").exists()
    (tmp_path / "there").mkdir()
    p = run(tmp_path / "there", block=False)
    assert p.returncode == 1 and "exists: add --overwrite" in p.stderr and "not installed" not in p.stderr


def test_av1_frames_too_small_for_svt_av1_are_refused_in_one_line_before_anything_is_written(tmp_path):
    """SVT-AV1 kills the process with SIGFPE on frames 24 pixels wide or narrower (no Python error, no message: the
    command just died); such a size with ``--codec av1`` (the default) is one line naming ``--image-size`` and what
    to give, nothing written; the writers refuse it too, and a robomimic file's cameras with ``--from-robomimic``.
    Control: the smallest size the check lets through encodes (in a child process: were the bound wrong, the crash
    would take the test process with it)."""
    import pytest

    from robo_loaders_plugin.sample_data.lerobot_v3 import (
        MIN_AV1_HEIGHT,
        MIN_AV1_WIDTH,
        check_cameras,
        write_lerobot_dataset,
    )

    out = tmp_path / "ds"
    code, lines = sample("lerobot", out, "--image-size", "16x16", "--episodes", 1)
    assert code == 2 and len([ln for ln in lines if ln.startswith("Error:")]) == 1, lines
    assert "Invalid value for --image-size: image size 16x16 (height x width): AV1 (SVT-AV1) crashes" in lines[-1]
    assert f"give at least {MIN_AV1_HEIGHT}x{MIN_AV1_WIDTH}, or codec h264" in lines[-1] and not out.exists()
    with pytest.raises(ValueError, match="AV1"):
        write_lerobot_dataset(out, image_size=(84, 24), mode="av1", progress=False)
    assert not out.exists()
    robomimic = tmp_path / "small.hdf5"
    tiny = ["--demos", 1, "--image-size", 16, "--min-length", 3, "--max-length", 3]
    assert sample("robomimic", robomimic, *tiny)[0] == 0
    with pytest.raises(ValueError, match=rf"{robomimic} obs/.*_image: image size 16x16"):
        check_cameras(robomimic, "av1")
    check_cameras(robomimic, "h264")  # another codec takes them
    code = subprocess.run(
        [sys.executable, "-c", "import sys; from robo_loaders_plugin.sample_data.lerobot_v3 import "
         "write_lerobot_dataset as w; w(sys.argv[1], image_size=(int(sys.argv[2]), int(sys.argv[3])), mode='av1', "
         "episode_lengths=(3,), progress=False)", str(tmp_path / "smallest"), str(MIN_AV1_HEIGHT), str(MIN_AV1_WIDTH)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert code.returncode == 0, code.stderr[-2000:]


def test_flags_that_do_not_apply_with_or_without_from_robomimic_are_refused(tmp_path):
    """A reviewer's reproduction: with ``--from-robomimic`` every drawing flag was silently ignored (``--image-size
    64x64`` wrote the file's 16x16 frames, ``--writer fast`` LeRobot's slow writer), combinations it otherwise
    refuses included, and ``--repeat`` without it too. Refused in one usage line naming them, nothing written."""
    hdf5 = str(tmp_path / "demo.hdf5")
    r = CliRunner().invoke(main, ["sample-data", "robomimic", hdf5, "--demos", "1", "--image-size", "16"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "le"
    r = CliRunner().invoke(
        main,
        ["sample-data", "lerobot", str(out), "--from-robomimic", hdf5, "--image-size", "64x64", "--writer", "fast"],
    )
    assert r.exit_code == 2 and "--image-size, --writer do not apply with --from-robomimic" in r.output, r.output
    r = CliRunner().invoke(main, ["sample-data", "lerobot", str(out), "--repeat", "3"])
    assert r.exit_code == 2 and "--repeat does not apply without --from-robomimic" in r.output, r.output
    assert not out.exists()


def test_an_output_that_cannot_be_written_is_one_line_and_nothing_partial_stays(tmp_path, monkeypatch):
    """A reviewer's reproduction: sample-data into a read-only location was an OSError traceback after the data was
    drawn, and a failure mid-write (a full disk, Ctrl-C) left ``OUT.tmp-PID`` behind (77 MB). The location is probed
    first, and the temporary file goes with a failure. Control: a writable location is written."""
    import pytest

    from robo_loaders_plugin.sample_data import robomimic_hdf5

    r = CliRunner().invoke(main, ["sample-data", "robomimic", "/proc/no-such-dir/x.hdf5", "--demos", "1"])
    assert r.exit_code == 1 and "cannot create '/proc/no-such-dir'" in r.output and "Traceback" not in r.output

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(robomimic_hdf5, "_episode", full_disk)
    with pytest.raises(OSError, match="No space left"):
        robomimic_hdf5.write_robomimic_hdf5(str(tmp_path / "x.hdf5"), demos=2, progress=False)
    assert os.listdir(tmp_path) == []


def test_a_from_robomimic_file_that_is_no_robomimic_dataset_and_flags_that_change_nothing_are_one_line(tmp_path):
    """A reviewer's reproductions: ``--from-robomimic`` with a file that is not HDF5, an HDF5 without ``data/`` or
    with no demo printed h5py's traceback; ``--noise`` without ``--content camera`` and ``--stream-encode`` with
    ``--codec png`` were accepted and changed nothing; ``convert lerobot --tolerance-s -1`` was taken (and tied its
    output to it). Each is one line naming the flag now, nothing written. Control: ``--noise`` with
    ``--content camera`` is taken."""
    import h5py

    not_hdf5 = tmp_path / "env.sh"
    not_hdf5.write_text("export X=1\n")
    no_data, no_demo = str(tmp_path / "no_data.h5"), str(tmp_path / "no_demo.h5")
    with h5py.File(no_data, "w") as f:
        f.create_dataset("x", data=[1])
    with h5py.File(no_demo, "w") as f:
        f.create_group("data")
    other_group, empty_demo = str(tmp_path / "other.hdf5"), str(tmp_path / "empty.hdf5")
    for path, damage in ((other_group, "group"), (empty_demo, "empty")):
        r = CliRunner().invoke(main, ["sample-data", "robomimic", path, "--demos", "2", "--image-size", "16"])
        assert r.exit_code == 0, r.output
        with h5py.File(path, "a") as f:  # the writer then failed with a traceback (a reviewer's reproduction)
            if damage == "group":
                f["data"].create_group("zz_info")
            else:
                f["data/demo_1"].attrs["num_samples"] = 0
    out = tmp_path / "le"
    for bad in (str(not_hdf5), no_data, no_demo, other_group, empty_demo):
        r = CliRunner().invoke(main, ["sample-data", "lerobot", str(out), "--from-robomimic", bad])
        assert r.exit_code == 2 and "Invalid value for --from-robomimic" in r.output, r.output
        assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    noisy = ["sample-data", "robomimic", str(tmp_path / "n.hdf5"), "--demos", "1", "--noise", "50"]
    r = CliRunner().invoke(main, noisy)
    assert r.exit_code == 2 and "--noise is the sensor noise of --content camera" in r.output, r.output
    r = CliRunner().invoke(main, ["sample-data", "lerobot", str(out), "--episodes", "1", "--noise", "50"])
    assert r.exit_code == 2 and "--noise is the sensor noise of --content camera" in r.output, r.output
    r = CliRunner().invoke(main, ["sample-data", "lerobot", str(out), "--codec", "png", "--stream-encode"])
    assert r.exit_code == 2 and "--stream-encode encodes video cameras" in r.output, r.output
    negative = ["convert", "lerobot", str(tmp_path / "x"), str(tmp_path / "y"), "--tolerance-s", "-1"]
    r = CliRunner().invoke(main, negative)
    assert r.exit_code == 2 and "--tolerance-s" in r.output, r.output
    assert not out.exists() and not (tmp_path / "n.hdf5").exists() and not (tmp_path / "y").exists()
    r = CliRunner().invoke(
        main,
        ["sample-data", "robomimic", str(tmp_path / "c.hdf5"), "--demos", "1", "--image-size", "16",
         "--content", "camera", "--noise", "5", "--min-length", "4", "--max-length", "4"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output


def test_robomimic_train_refuses_a_config_it_cannot_read_in_one_line(tmp_path):
    """A reviewer's reproduction: ``robo-loaders robomimic-train --config nope.json`` (or a file that is no JSON)
    ended in robomimic's traceback; one usage line naming ``--config`` now, before robomimic is imported."""
    bad_json = tmp_path / "env.sh"
    bad_json.write_text("export X=1\n")
    a_list = tmp_path / "list.json"
    a_list.write_text("[1, 2]")
    for args, said in (
        (["--config", str(tmp_path / "nope.json")], "nope.json: no such file"),
        ([f"--config={bad_json}"], "env.sh: not a JSON file"),
        (["--config", str(a_list)], "holds a JSON list, not a robomimic config"),
        (["--config"], "--config needs a path"),
    ):
        r = CliRunner().invoke(main, ["robomimic-train", *args])
        assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output
