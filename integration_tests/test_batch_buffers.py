"""Recycled batch arrays (``storage.buffers.BufferPool``), through every backend that assembles batches, in both
frameworks: a loop that keeps every batch of a pass sees every batch intact (the public pass check keeps them all,
then compares them with the native pass), the pool without its reference check would corrupt them (negative
control), and in a loop that drops its batches, as robomimic's and LeRobot's training steps do, the passes after
the first allocate (almost) no batch array (negative control: a pool that never recycles).

Why a test through the backends and not only the pool's unit test: a backend that copied a pooled array into a
longer-lived structure, or kept a view of it (a shuffle buffer, a prefetch queue, a mixture's joined batch), would
hand the training loop a batch the pool then reuses."""

import numpy as np
import pytest
import torch
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.core.iteration import built_by
from robo_loaders_plugin.storage import buffers
from robo_loaders_plugin.testing import assert_same_pass, lerobot_case, robomimic_case

BACKENDS = ["compressed_cache", "datapipe", "gpu_resampler", "video_stream"]
PSNR = 25.0  # video_stream re-encodes robomimic's frames (its own floor: test_robomimic_video_shards)


def _robomimic(tiny_hdf5):
    cfg = make_config(tiny_hdf5, seq_length=5, hdf5_cache_mode="low_dim", hdf5_load_next_obs=True)
    return robomimic_case(cfg, obs_keys(cfg), filter_by_attribute="train")


def _lerobot(lerobot_datasets):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    native = LeRobotDataset(
        "local/sample",
        root=lerobot_datasets["av1_1cam"],
        return_uint8=True,
        delta_timestamps={"action": [0.0, 0.05, 0.1], "observation.images.cam0": [-0.05, 0.0]},
        episodes=[0, 2, 4],
    )
    return lerobot_case(native)


def _psnr(case, backend):
    if backend != "video_stream" or case.framework != "robomimic":
        return None
    return {"agentview_image": PSNR, "robot0_eye_in_hand_image": PSNR}


def _options(backend, tmp_path):
    return {"cache_dir": str(tmp_path)} if backend in ("datapipe", "video_stream") else {}


def _loader(case, ds):
    """The DataLoader the framework's training script builds (LeRobot's: its EpisodeAwareSampler)."""
    if case.framework == "robomimic":
        return torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2)
    from lerobot.datasets import EpisodeAwareSampler

    native = case.native()
    sampler = EpisodeAwareSampler(
        native.meta.episodes["dataset_from_index"],
        native.meta.episodes["dataset_to_index"],
        episode_indices_to_use=native.episodes,
        shuffle=True,
        absolute_to_relative_idx=native.absolute_to_relative_idx,
    )
    return torch.utils.data.DataLoader(ds, batch_size=16, sampler=sampler, num_workers=2)


def _passes(case):
    """What the framework's training loop iterates for a DataLoader (the adapters' own function)."""
    if case.framework == "robomimic":
        from robo_loaders_plugin.robomimic.integration import epoch_loader

        return epoch_loader
    from robo_loaders_plugin.core.iteration import pass_batches
    from robo_loaders_plugin.lerobot.integration import sampling_plan

    return lambda dl: pass_batches(dl, sampling_plan)


def _careless_empty(self, shape, dtype):
    """The pool without its reference check: a ring of 8 buffers per shape, handed out in turn whether in use or
    not (a batch's arrays of one shape stay distinct; a batch kept longer than the ring is overwritten)."""
    key = (tuple(shape), np.dtype(dtype).str)
    with self._lock:
        bufs = self._free.setdefault(key, [])
        if len(bufs) < 8:
            bufs.append(np.empty(shape, dtype=dtype))
            return bufs[-1]
        bufs.append(bufs.pop(0))
        return bufs[-1]


def _case(request, framework):
    if framework == "robomimic":
        return _robomimic(request.getfixturevalue("tiny_hdf5"))
    return _lerobot(request.getfixturevalue("lerobot_datasets"))


# LeRobot's compressed_cache is a sample dataset: lerobot-train's DataLoader workers collate its items
ASSEMBLING = [("robomimic", b) for b in BACKENDS] + [("lerobot", b) for b in BACKENDS if b != "compressed_cache"]


@pytest.mark.parametrize("framework, backend", ASSEMBLING)
def test_a_loop_keeping_every_batch_sees_them_intact_and_later_passes_recycle(request, framework, backend, tmp_path):
    case = _case(request, framework)
    options = _options(backend, tmp_path)
    # the public check keeps every batch of the pass, then compares each with the native pass's
    assert assert_same_pass(case, backend, options, batch_size=16, num_workers=2, min_psnr=_psnr(case, backend)) > 3

    ds = case.build(backend, options)
    loader, passes = _loader(case, ds), _passes(case)
    _, first_pass, later = _allocations_over_passes(ds, loader, passes)
    assert built_by(ds) is not None and first_pass > 0, f"{backend}: no batch array came from the pool"
    # a pass has more than 3 batches of several arrays each: without recycling every one is a new allocation, the
    # later passes make 3x the first's; with it they reuse the first's (a few more when threads happen to hold
    # more batches at once than in the first pass, up to a steady state)
    assert later <= first_pass, f"{backend}: {later} arrays allocated in passes 2-4, {first_pass} in pass 1"


def _allocations_over_passes(ds, loader, passes):
    """Four passes dropping their batches: (batches per pass, arrays allocated in pass 1, in passes 2 to 4)."""
    pool = ds.buffer_pool
    counts = []
    for _ in range(4):
        batches = 0
        for batch in passes(loader):
            batches += 1
            del batch  # dropped, as the training step drops it once converted
        counts.append(pool.allocations)
    return batches, counts[0], counts[3] - counts[0]


@pytest.mark.parametrize("framework, backend", [("robomimic", "compressed_cache"), ("lerobot", "gpu_resampler")])
def test_the_pool_without_its_reference_check_corrupts_kept_batches(request, framework, backend, tmp_path, monkeypatch):
    """Negative controls: the same kept pass, with buffers handed out again while the loop still holds them, fails
    the pass check; a pool that never recycles fails the allocation count.

    The corruption surfaces as a batch that differs (``AssertionError``) or, when a recycled buffer held a batch's
    row positions, as a row out of range (``IndexError``, seen once under ``-n 2``): either way the pass fails."""
    case = _case(request, framework)
    with monkeypatch.context() as m:
        m.setattr(buffers.BufferPool, "empty", _careless_empty)
        with pytest.raises((AssertionError, IndexError)):
            assert_same_pass(case, backend, _options(backend, tmp_path), batch_size=16, num_workers=2)

    def never_recycled(self, shape, dtype):
        self.allocations += 1
        return np.empty(shape, dtype=dtype)

    monkeypatch.setattr(buffers.BufferPool, "empty", never_recycled)
    ds = case.build(backend, _options(backend, tmp_path))
    _, first_pass, later = _allocations_over_passes(ds, _loader(case, ds), _passes(case))
    assert later > first_pass
