"""Every built-in backend through the public parity checks (``robo_loaders_plugin.testing``), the ones a third
party runs: so the checks are known to hold every kind (sample, indexed, batch; lossless and lossy) to the native
loader, and their negative controls show they fail on wrong data."""
import pytest

from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.testing import (assert_same, assert_same_batches, assert_same_pass, assert_same_samples,
                                         lerobot_case, robomimic_case)

from test_robomimic_video_shards import PSNR_FLOOR


def rm_case(path, **train):
    cfg = make_config(path, seq_length=5, frame_stack=2, **train)
    return robomimic_case(cfg, obs_keys(cfg), filter_by_attribute="train")


@pytest.mark.parametrize("backend, options", [
    ("compressed_cache", {}),
    ("datapipe", {"shuffle_buffer": 3}),
    ("gpu_resampler", {}),
    ("video_stream", {}),
])
def test_robomimic_backends_pass_the_public_checks(tiny_hdf5, tmp_path, backend, options):
    case = rm_case(tiny_hdf5, hdf5_cache_mode="low_dim")
    if backend == "datapipe":
        options = dict(options, cache_dir=str(tmp_path))
    psnr = {"agentview_image": PSNR_FLOOR, "robot0_eye_in_hand_image": PSNR_FLOOR} if backend == "video_stream" \
        else None
    assert_same_samples(case, backend, options, count=80, min_psnr=psnr)
    assert_same_batches(case, backend, options, batch_size=8, batches=2, min_psnr=psnr)
    assert assert_same_pass(case, backend, options, batch_size=16, num_workers=2, min_psnr=psnr) > 3


@pytest.mark.parametrize("backend", ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"])
def test_lerobot_backends_pass_the_public_checks(lerobot_datasets, tmp_path, backend):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset("local/sample", root=lerobot_datasets["av1_1cam"], return_uint8=True,
                            delta_timestamps={"action": [0.0, 0.05, 0.1]}, episodes=[0, 2, 4])
    case = lerobot_case(native)
    options = {"cache_dir": str(tmp_path)} if backend == "datapipe" else {}
    assert_same_samples(case, backend, options, count=60)
    assert assert_same_pass(case, backend, options, batch_size=16) > 3


def test_the_checks_fail_on_a_wrong_window_and_a_missing_sample(tiny_hdf5, tmp_path, monkeypatch):
    """Negative controls: a sample one step off, and a pass that serves one sample twice, are both refused."""
    case = rm_case(tiny_hdf5, hdf5_cache_mode="low_dim")
    native = case.native()
    with pytest.raises(AssertionError, match="values differ"):
        assert_same(native[5], native[6], "off by one")
    ds = case.build("datapipe", {"cache_dir": str(tmp_path), "shuffle_buffer": 3})
    original = ds.collate

    def one_sample_twice(indices):
        indices = list(indices)
        indices[-1] = indices[0]
        return original(indices)

    ds.collate = one_sample_twice  # every batch serves its first window again instead of its last
    import robo_loaders_plugin.testing as testing

    monkeypatch.setattr(testing.RobomimicCase, "build", lambda self, backend, options: ds)
    with pytest.raises(AssertionError, match="not a sample of the native pass, or served more often"):
        assert_same_pass(case, "datapipe", {}, batch_size=16)
