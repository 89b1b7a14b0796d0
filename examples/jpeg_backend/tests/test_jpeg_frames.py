"""The example backend against the real native loaders, through robo_loaders_plugin.testing only: samples, batches
and a training pass equal the native ones, camera frames within the PSNR the backend promises."""

import os
import subprocess
import sys

import pytest

from robo_loaders_plugin import get_backend
from robo_loaders_plugin.testing import (
    assert_same_batches,
    assert_same_pass,
    assert_same_samples,
    lerobot_case,
    robomimic_case,
)

CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")
# what quality 90 gives on these frames (measured 36.0 dB at worst, 38.4 median, on 48x48 sample renders)
MIN_PSNR_Q90 = 34.0


def robomimic_config(path, **train):
    import robomimic.algo  # noqa: F401  (registers the observation encoders SequenceDataset needs)
    import robomimic.utils.obs_utils as ObsUtils
    from robomimic.config import config_factory

    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = path
        config.observation.modalities.obs.rgb = list(CAMERAS)
        config.observation.modalities.obs.low_dim = ["robot0_eef_pos", "object"]
        config.train.seq_length = 5
        for k, v in train.items():
            config.train[k] = v
    ObsUtils.initialize_obs_utils_with_config(config)
    return config, ["robot0_eef_pos", "object"] + list(CAMERAS)


def test_registered_through_its_entry_point_and_declared_lossy():
    spec = get_backend("jpeg_frames")
    assert spec.plugin == "jpeg_frames" and spec.lossless_for("robomimic") == "lossy frames"
    assert spec.kind_for("robomimic") == "indexed" and spec.kind_for("lerobot") == "sample"


@pytest.mark.parametrize("cache_mode", ["low_dim", None])
def test_robomimic_parity(robomimic_hdf5, tmp_path, cache_mode):
    case = robomimic_case(*robomimic_config(robomimic_hdf5, hdf5_cache_mode=cache_mode, frame_stack=2))
    options = {"quality": 90, "cache_dir": str(tmp_path)}
    psnr = {f"obs/{c}": MIN_PSNR_Q90 for c in CAMERAS}
    ds = assert_same_samples(case, "jpeg_frames", options, count=60, min_psnr=psnr)
    assert "JPEG q90" in ds.serving.summary
    assert_same_batches(case, "jpeg_frames", options, batch_size=8, batches=3, min_psnr=psnr)
    assert assert_same_pass(case, "jpeg_frames", options, batch_size=16, num_workers=2, min_psnr=psnr) > 3


def test_lerobot_parity(lerobot_root, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(
        "local/sample", root=lerobot_root, delta_timestamps={"action": [0.0, 0.05, 0.1]}, return_uint8=True
    )
    case = lerobot_case(native)
    options = {"quality": 90, "cache_dir": str(tmp_path)}
    psnr = {"observation.images.cam0": MIN_PSNR_Q90}
    assert_same_samples(case, "jpeg_frames", options, count=40, min_psnr=psnr)
    assert_same_pass(case, "jpeg_frames", options, batch_size=8, min_psnr=psnr)


def test_the_checks_fail_on_wrong_data(robomimic_hdf5, tmp_path):
    """Negative controls: quality 5 misses the stated PSNR; a changed action is caught byte for byte."""
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    psnr = {f"obs/{c}": MIN_PSNR_Q90 for c in CAMERAS}
    with pytest.raises(AssertionError, match=r"PSNR .* below the stated 34 dB"):
        assert_same_samples(case, "jpeg_frames", {"quality": 5, "cache_dir": str(tmp_path)}, count=5, min_psnr=psnr)
    ds = assert_same_samples(case, "jpeg_frames", {"cache_dir": str(tmp_path)}, count=5, min_psnr=psnr)
    ds.frames.inner._raw["actions"][3] += 1e-3  # what a backend serving a stale action would do
    from robo_loaders_plugin.testing import assert_same

    native = case.native()
    with pytest.raises(AssertionError, match="actions: values differ"):
        for i in range(len(ds)):
            assert_same(ds[i], native[i], f"[{i}]", psnr)


def test_a_damaged_store_is_rebuilt_not_served(robomimic_hdf5, tmp_path, capsys):
    case = robomimic_case(*robomimic_config(robomimic_hdf5))
    options = {"cache_dir": str(tmp_path)}
    psnr = {f"obs/{c}": MIN_PSNR_Q90 for c in CAMERAS}
    first = case.build("jpeg_frames", options)
    blob = os.path.join(first.location, "frames.bin")
    with open(blob, "r+b") as f:  # one bit flipped inside a JPEG: it may still decode, to other pixels
        f.seek(os.path.getsize(blob) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    del first
    again = assert_same_samples(case, "jpeg_frames", options, count=30, min_psnr=psnr)
    assert "(it failed its integrity check); rebuilding" in capsys.readouterr().out
    assert "reused" not in again.serving.summary


PUBLIC = {"robo_loaders_plugin", "robo_loaders_plugin.extend", "robo_loaders_plugin.testing"}
AUDIT = r"""
import builtins, importlib, sys
public = set(sys.argv[1].split(","))
exported = None
seen = []
real_import = builtins.__import__

def audit(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if importer.startswith("robo_loaders_jpeg") and name.startswith("robo_loaders_plugin"):
        seen.append((importer, name, tuple(fromlist or ())))
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = audit
import robo_loaders_plugin
from robo_loaders_plugin import get_backend
spec = get_backend("jpeg_frames")  # through the entry point
for module in ("robo_loaders_jpeg.plugin", "robo_loaders_jpeg.store"):
    importlib.import_module(module)
exported = set(robo_loaders_plugin.__all__) | {"extend", "testing"}
bad = [s for s in seen if s[1] not in public or (s[1] == "robo_loaders_plugin" and not set(s[2]) <= exported)]
print("IMPORTS", seen)
sys.exit(3 if bad else 0)
"""


def test_uses_public_names_only(installed):
    """A fresh interpreter imports the example through its entry point and every module of it; any import of a
    robo_loaders_plugin module other than the public three (or of a name the package does not export) fails."""
    env = dict(os.environ)
    p = subprocess.run(
        [sys.executable, "-c", AUDIT, ",".join(sorted(PUBLIC))], capture_output=True, text=True, env=env, timeout=300
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "robo_loaders_plugin.extend" in p.stdout  # the audit saw the example's imports (not a vacuous pass)
    # negative control: with extend treated as private, the same audit fails
    strict = subprocess.run(
        [sys.executable, "-c", AUDIT, "robo_loaders_plugin,robo_loaders_plugin.testing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert strict.returncode == 3, strict.stdout[-2000:] + strict.stderr[-2000:]
