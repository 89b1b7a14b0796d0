"""The batches in flight in the footprints (core.in_flight) on real robomimic and LeRobot objects: one sample's
bytes as the footprints count them against what the native loaders serve, and the adapters stating the training
loop (robomimic's config, lerobot-train's config, ``build_dataset``'s arguments) so that every backend's log line
counts them. The plans themselves, with their controls: tests/test_in_flight.py."""

import dataclasses

import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, cfg_for, serve
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.robomimic import dataset_factory

BACKENDS = ("compressed_cache", "datapipe", "gpu_resampler", "video_stream")


def nbytes(sample) -> int:
    """Every array's bytes in a (nested) sample; strings and ``*_is_pad`` masks aside."""
    if isinstance(sample, dict):
        return sum(nbytes(v) for k, v in sample.items() if not str(k).endswith("_is_pad"))
    if isinstance(sample, (np.ndarray, torch.Tensor)):
        return int(sample.nbytes)
    return 0


def robomimic_sample_bytes(cfg) -> int:
    from robo_loaders_plugin.robomimic.sequence import data_size, sample_bytes, sequence_options
    from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5

    opts, path = sequence_options(cfg, obs_keys(cfg), None)
    source = RobomimicHdf5(path)
    with source.open() as f:
        return sample_bytes(data_size(source, f, source.demos(f, None), opts), opts)


@pytest.mark.parametrize(
    "train",
    [
        dict(seq_length=10, frame_stack=1, hdf5_cache_mode="low_dim"),
        dict(seq_length=10, frame_stack=2, hdf5_load_next_obs=True, hdf5_cache_mode="low_dim"),
        dict(seq_length=1, frame_stack=1, hdf5_load_next_obs=False, hdf5_cache_mode=None),
    ],
    ids=["seq10", "stack2-next_obs", "seq1-no-cache"],
)
def test_a_robomimic_sample_weighs_what_the_footprints_count(tiny_hdf5, train):
    """Each shape's own count (windows of 10, 11 and 1 step, next_obs or not, float32 actions under a cache mode):
    a count that ignored any of them fails on another shape."""
    cfg = make_config(tiny_hdf5, **train)
    native = dataset_factory(cfg, obs_keys(cfg))  # no data_backend: robomimic's SequenceDataset
    assert type(native).__name__ == "SequenceDataset"
    expected = robomimic_sample_bytes(cfg)
    assert {nbytes(native[i]) for i in (0, len(native) // 2, len(native) - 1)} == {expected}


def test_every_robomimic_backend_counts_the_batches_of_the_configs_loop(tiny_hdf5, tmp_path):
    """train.batch_size 16 and num_data_workers 2: five batches in flight for each backend (two ahead per thread
    and the one training holds; the pipelines' two prefetched, one per thread and the one training holds)."""
    expected = 5 * 16 * robomimic_sample_bytes(make_config(tiny_hdf5, seq_length=10))
    for backend in BACKENDS:
        cfg = make_config(
            tiny_hdf5,
            backend=backend,
            backend_kwargs={"cache_dir": str(tmp_path / backend)},
            seq_length=10,
            batch_size=16,
            num_data_workers=2,
        )
        summary = dataset_factory(cfg, obs_keys(cfg)).serving.summary
        assert "5 batches in flight (" in summary and f"; {format_bytes(expected)})" in summary, (backend, summary)


@pytest.fixture(scope="module")
def windowed(lerobot_datasets):
    """Three H.264 cameras, one of them over two frames, the action over 16 and the state over 2 (diffusion's
    windows)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = lerobot_datasets["h264_3cam_multifile"]
    fps = LeRobotDataset(REPO, root=root).meta.fps
    deltas = {
        "observation.images.cam0": [-1 / fps, 0.0],
        "observation.state": [-1 / fps, 0.0],
        "action": [i / fps for i in range(16)],
    }
    return LeRobotDataset(REPO, root=root, delta_timestamps=deltas)


def test_a_lerobot_item_weighs_what_the_footprints_count(windowed):
    """Camera frames exactly (float32, each key over its own window: cam0 over two frames, the others one); the
    other columns as an upper bound (all of them over the longest window among them)."""
    from robo_loaders_plugin.lerobot.dataset import native_source, sample_bytes

    source, settings = native_source(windowed)
    size = source.data_size(windowed.episodes)
    assert sorted(size.frame_step_bytes) == [f"observation.images.cam{i}" for i in range(3)]
    for i in (0, len(windowed) // 2, len(windowed) - 1):
        item = windowed[i]
        cameras = sum(int(item[k].nbytes) for k in size.frame_step_bytes)
        assert item["observation.images.cam0"].shape[0] == 2 and item["observation.images.cam1"].ndim == 3
        assert sample_bytes(dataclasses.replace(size, other_step_bytes=0), settings) == cameras
        counted = sample_bytes(size, settings)
        assert nbytes(item) <= counted <= nbytes(item) + 16 * size.other_step_bytes


def test_every_lerobot_backend_counts_the_batches_build_dataset_is_told_of(windowed, tmp_path):
    from robo_loaders_plugin.lerobot.dataset import native_source, sample_bytes
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose

    source, settings = native_source(windowed)
    expected = 5 * 4 * sample_bytes(source.data_size(windowed.episodes), settings)
    for backend in BACKENDS:
        ds = build_dataset(windowed, choose(backend, cache_dir=str(tmp_path / backend)), batch_size=4, num_workers=2)
        summary = ds.serving.summary
        assert "5 batches in flight (" in summary and f"; {format_bytes(expected)})" in summary, (backend, summary)
    # the control: told nothing (a dataset built from Python), the bound names them as not counted
    summary = serve("compressed_cache", windowed, cache_dir=str(tmp_path / "compressed_cache")).serving.summary
    assert "batches in flight (2 ahead per thread or DataLoader worker + 1 held by training; not counted" in summary


def test_lerobot_train_states_its_batch_size_and_workers(lerobot_datasets, tmp_path):
    """lerobot-train's config (draccus-parsed; ACT: an action chunk of 100 steps) through the patched factory: its
    --batch_size 8 and --num_workers 4 make nine batches in flight."""
    import robo_loaders_plugin.lerobot as rl
    from robo_loaders_plugin.lerobot.compat import original
    from robo_loaders_plugin.lerobot.dataset import native_source, sample_bytes

    root = lerobot_datasets["av1_1cam"]
    cfg = cfg_for(root, "compressed_cache", '{"cache_dir": "%s"}' % (tmp_path / "c"))
    assert (cfg.batch_size, cfg.num_workers) == (8, 4)
    native = original("make_dataset")(cfg_for(root))
    source, settings = native_source(native)
    assert len(settings.delta_indices["action"]) == 100
    expected = 9 * 8 * sample_bytes(source.data_size(native.episodes), settings)
    summary = rl.make_dataset(cfg).serving.summary
    assert (
        "9 batches in flight (2 ahead per thread or DataLoader worker (4) + 1 held by training; "
        f"{format_bytes(expected)})" in summary
    ), summary
