"""compressed_cache vs robomimic's SequenceDataset, sample by sample (>= 500 random indices per combination)."""

import pickle

import numpy as np
import pytest
import torch
from robomimic_helpers import assert_same_sample, make_config, obs_keys

from robo_loaders_plugin.robomimic import dataset_factory
from robo_loaders_plugin.robomimic.dataset import RobomimicSamples

# A covering set: every option takes each of its values, in varied company.
# Two of them (pytest.mark.fast) are the robomimic parity checks of `make test-fast`.
COMBOS = [
    pytest.param(dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=1), marks=pytest.mark.fast),
    dict(hdf5_cache_mode="all", seq_length=10, frame_stack=1),
    dict(hdf5_cache_mode=None, seq_length=10, frame_stack=1),
    dict(hdf5_cache_mode="low_dim", seq_length=1, frame_stack=1),
    dict(hdf5_cache_mode="low_dim", seq_length=1, frame_stack=10),
    dict(hdf5_cache_mode="all", seq_length=5, frame_stack=3, pad_seq_length=False),
    dict(hdf5_cache_mode=None, seq_length=5, frame_stack=3, pad_frame_stack=False),
    dict(hdf5_cache_mode="low_dim", seq_length=8, frame_stack=4, pad_seq_length=False, pad_frame_stack=False),
    pytest.param(
        dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=2, goal_mode="last", hdf5_load_next_obs=True),
        marks=pytest.mark.fast,
    ),
    dict(
        hdf5_cache_mode="all",
        seq_length=3,
        frame_stack=1,
        goal_mode="last",
        hdf5_load_next_obs=True,
        pad_seq_length=False,
    ),
    dict(hdf5_cache_mode=None, seq_length=4, frame_stack=2, hdf5_load_next_obs=True),
    dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=1, hdf5_load_next_obs=False),
    dict(hdf5_cache_mode="low_dim", seq_length=60, frame_stack=1),  # window longer than every demo
    dict(hdf5_cache_mode="all", seq_length=10, frame_stack=1, dataset_keys=("actions", "rewards", "dones", "states")),
    dict(hdf5_cache_mode="low_dim", seq_length=2, frame_stack=1, dataset_keys=("actions", "not_in_file")),
    # dataset keys naming observations: served as stored, as robomimic reads them (a reviewer's reproduction: cast to
    # float32, they replaced the observations of the same field name, a float64 eef_pos, a uint8 camera)
    dict(
        hdf5_cache_mode="low_dim",
        seq_length=3,
        frame_stack=1,
        dataset_keys=("actions", "obs/robot0_eef_pos", "obs/agentview_image"),
    ),
]
FILTERS = [None, "train", "valid"]


def _pair(path, combo, filter_key, backend="compressed_cache"):
    cfg = make_config(path, **combo)
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)
    with cfg.values_unlocked():
        cfg.train.data_backend = backend
    ours = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)
    return native, ours


@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_same_samples_as_sequence_dataset(tiny_hdf5, combo, backend):
    for i, filter_key in enumerate(FILTERS):
        native, ours = _pair(tiny_hdf5, combo, filter_key, backend)
        assert isinstance(ours, RobomimicSamples) and ours.backend_name == backend
        assert type(native).__name__ == "SequenceDataset"
        assert len(ours) == len(native)
        n = 500 if filter_key != "valid" else len(native)  # the valid split is small: check all of it
        rng = np.random.default_rng(len(combo) * 10 + i)
        indices = rng.choice(len(native), size=n, replace=n > len(native))
        for idx in indices:
            assert_same_sample(ours[int(idx)], native[int(idx)], f"[{filter_key}][{idx}]")
        assert ours.get_dataset_sampler() is None
        # whole batches too, as robomimic's DataLoader collates them (what the in-process path serves)
        batch = indices[:32].tolist()
        assert_same_sample(
            ours.collate(batch), torch.utils.data.default_collate([native[j] for j in batch]), f"[{filter_key}] batch"
        )


def test_pad_mask_matches_sequence_dataset(tiny_hdf5):
    """get_pad_mask is not used by dataset_factory, but the dataset class supports it like SequenceDataset."""
    from robomimic.utils.dataset import SequenceDataset

    cfg = make_config(tiny_hdf5, seq_length=6, frame_stack=3, goal_mode="last", hdf5_load_next_obs=True)
    with cfg.values_unlocked():
        cfg.train.data_backend = "compressed_cache"
    ours = dataset_factory(cfg, obs_keys(cfg))
    ours.get_pad_mask = True
    native = SequenceDataset(
        tiny_hdf5,
        obs_keys(cfg),
        cfg.train.dataset_keys,
        frame_stack=3,
        seq_length=6,
        get_pad_mask=True,
        goal_mode="last",
        hdf5_cache_mode="low_dim",
        load_next_obs=True,
    )
    for idx in np.random.default_rng(0).choice(len(native), 500):
        assert_same_sample(ours[int(idx)], native[int(idx)])


def _shared_pair(path, **train):
    """SequenceDataset and compressed_cache on the real renders' training demos, BC-RNN-like windows."""
    cfg = make_config(
        path,
        seq_length=10,
        frame_stack=1,
        hdf5_cache_mode="low_dim",
        low_dim=["robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "object"],
        **train,
    )
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")
    with cfg.values_unlocked():
        cfg.train.data_backend = "compressed_cache"
    return native, dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="train")


def test_shared_renders_parity(shared_hdf5):
    """Real robosuite renders: same bytes as SequenceDataset (BC-RNN-like windows)."""
    native, ours = _shared_pair(shared_hdf5)
    for idx in np.random.default_rng(1).choice(len(native), 500):
        assert_same_sample(ours[int(idx)], native[int(idx)])
    st = ours.frames.inner.store.stats
    assert st["compressed_nbytes"] < st["decoded_frame_nbytes"]


def test_shared_renders_parity_with_next_obs_and_goals(shared_hdf5):
    """Real robosuite renders, whose final ``next_obs`` is a state of its own (the generated files' was the last
    observation repeated until a reviewer's mutations showed it hid a backend serving ``obs`` there): the windows at
    every demo's end, with ``next_obs`` and ``goal_mode="last"``, are SequenceDataset's bytes."""
    native, ours = _shared_pair(shared_hdf5, hdf5_load_next_obs=True, goal_mode="last")
    ends = [int(native._demo_id_to_start_indices[d] + native._demo_id_to_demo_length[d] - 1) for d in native.demos]
    for idx in ends:
        last = native[idx]
        # the control: at a demo's last step, next_obs is not the observation (so serving obs there would show)
        assert not np.array_equal(last["next_obs"]["robot0_eef_pos"][-1], last["obs"]["robot0_eef_pos"][-1])
        assert_same_sample(ours[idx], last)


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_workers_share_one_copy_and_give_native_batches(tiny_hdf5, ctx):
    cfg = make_config(tiny_hdf5, seq_length=10, frame_stack=1, hdf5_cache_mode="low_dim")
    native = dataset_factory(cfg, obs_keys(cfg))
    with cfg.values_unlocked():
        cfg.train.data_backend = "compressed_cache"
    ours = dataset_factory(cfg, obs_keys(cfg))
    # what a spawn worker receives: a path, not the cache
    assert len(pickle.dumps(ours)) < 20_000 < ours.frames.inner.store.file_nbytes

    def batches(ds, **kw):
        g = torch.Generator().manual_seed(7)
        return list(torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, drop_last=True, generator=g, **kw))

    ref = batches(native, num_workers=0)
    got = batches(ours, num_workers=2, multiprocessing_context=ctx)
    assert len(ref) == len(got)
    for a, b in zip(got, ref):
        assert_same_sample(dict(a), b)


@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
def test_a_one_dimensional_observation_and_its_goal_are_served_as_sequence_dataset_serves_them(tmp_path, backend):
    """A low-dim observation stored as (L,), with goals: robomimic's ``goal[k][0]`` of it is a numpy scalar. A
    reviewer's reproduction: ``gpu_resampler``'s ``ds[i]``, cut from a batch of tensors, served a 0-d ndarray (its
    batches were equal). Control: a 0-d ndarray is not what SequenceDataset serves."""
    import h5py

    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = write_robomimic_hdf5(str(tmp_path / "one_dim.hdf5"), demos=3, image_size=16, cameras=1, seed=4,
                                progress=False)  # fmt: skip
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            n = f[f"data/{demo}/actions"].shape[0]
            for group in ("obs", "next_obs"):
                f[f"data/{demo}/{group}/scalar"] = np.random.default_rng(n).random(n).astype(np.float32)
    combo = dict(hdf5_cache_mode="low_dim", seq_length=3, goal_mode="last", hdf5_load_next_obs=True)
    cfg = make_config(path, rgb=["agentview_image"], low_dim=["scalar", "robot0_eef_pos"], **combo)
    native = dataset_factory(cfg, obs_keys(cfg))
    with cfg.values_unlocked():
        cfg.train.data_backend = backend
        cfg.train.data_backend_kwargs = {"cache_dir": str(tmp_path / "cache")}
    ours = dataset_factory(cfg, obs_keys(cfg))
    for i in (0, len(native) // 2, len(native) - 1):
        assert_same_sample(ours[i], native[i], f"[{i}]")
    goal = native[0]["goal_obs"]["scalar"]
    with pytest.raises(AssertionError, match="ndarray is not float32"):
        assert_same_sample(np.asarray(goal), goal)


@pytest.mark.parametrize("backend", ["compressed_cache", "gpu_resampler"])
def test_persistent_workers_epochs_keep_the_dataloaders_order_and_rng(tiny_hdf5, backend):
    """A reviewer's reproduction: robomimic asks for each epoch's batches anew (the patched ``run_epoch``), and a
    DataLoader of persistent workers draws its base seed once for the run; the in-process batches drew it at every
    epoch, so from the second epoch on the order and torch's global RNG (dropout, crops) left native's. Three
    epochs through ``epoch_loader`` serve native's order, the RNG left where native leaves it. Control: the batches
    the in-process path would serve drawing the seed at every epoch differ from native's from the second on."""
    from robo_loaders_plugin.core.iteration import SamplerBatches
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    cfg = make_config(tiny_hdf5, seq_length=3, frame_stack=1, hdf5_cache_mode="low_dim")
    native = dataset_factory(cfg, obs_keys(cfg))
    with cfg.values_unlocked():
        cfg.train.data_backend = backend
    ours = dataset_factory(cfg, obs_keys(cfg))

    def epochs(ds, each=None):
        torch.manual_seed(11)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=8, shuffle=True, drop_last=True, num_workers=2, persistent_workers=True
        )
        iterate = each or (epoch_loader if ds is ours else (lambda dl: dl))
        got = [[a.numpy().tobytes() for b in iterate(loader) for a in b["actions"]] for _ in range(3)]
        return got, torch.rand(1).item()

    (want, want_rng), (got, got_rng) = epochs(native), epochs(ours)
    assert isinstance(
        epoch_loader(torch.utils.data.DataLoader(ours, num_workers=1, persistent_workers=True)), SamplerBatches
    )
    assert got == want and got_rng == want_rng
    redrawn, _ = epochs(ours, lambda dl: SamplerBatches(ours.collate, dl.batch_sampler, dl.generator, 0))
    assert redrawn[0] == want[0] and redrawn[1] != want[1]  # control: a seed drawn at every epoch
