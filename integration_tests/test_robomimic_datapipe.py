"""datapipe backend for robomimic: every window once per pass, each equal to SequenceDataset's sample for that
(demo, start), resumable on the same next batch, and usable from robomimic's training loop."""
import numpy as np
import pytest
import torch

from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.robomimic import dataset_factory

COMBOS = [
    dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=1),
    dict(hdf5_cache_mode=None, seq_length=5, frame_stack=3, pad_frame_stack=False),
    dict(hdf5_cache_mode="all", seq_length=4, frame_stack=2, goal_mode="last", hdf5_load_next_obs=True,
         pad_seq_length=False),
]


def pair(path, tmp_path, combo, filter_key=None, **kw):
    cfg = make_config(path, **combo)
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)
    with cfg.values_unlocked():
        cfg.train.data_backend = "datapipe"
        cfg.train.data_backend_kwargs = dict({"cache_dir": str(tmp_path / "shards"), "shuffle_buffer": 3}, **kw)
    return native, dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)


def same(batch_row, sample, where):
    if isinstance(sample, dict):
        assert list(batch_row) == list(sample), where
        for k in sample:
            same(batch_row[k], sample[k], f"{where}/{k}")
        return
    a, b = np.asarray(batch_row), np.asarray(sample)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where


@pytest.mark.parametrize("combo", COMBOS, ids=["bc_rnn", "framestack_nopad", "goal_all"])
@pytest.mark.parametrize("filter_key", [None, "train"])
def test_each_window_once_and_equal_to_native(tiny_hdf5, tmp_path, combo, filter_key):
    native, ds = pair(tiny_hdf5, tmp_path, combo, filter_key)
    assert len(ds) == len(native)
    epoch = ds.batches(batch_size=32, shuffle=True, drop_last=False, num_workers=2)
    batches = list(epoch)
    assert len(batches) == len(epoch)
    plan = ds.plan._plan
    seen = [ds.window_index(int(e), int(w)) for e, w in plan]
    assert sorted(seen) == list(range(len(native)))  # every window exactly once
    for b, batch in enumerate(batches):
        for r in range(len(batch["actions"])):
            idx = seen[b * 32 + r]
            row = {k: ({kk: vv[r] for kk, vv in v.items()} if isinstance(v, dict) else v[r]) for k, v in batch.items()}
            same(row, native[idx], f"batch {b} row {r} (sample {idx})")
    distinct = np.mean([len(np.unique(plan[i:i + 32, 0])) / len(plan[i:i + 32]) for i in range(0, len(plan), 32)])
    assert distinct > 0.05  # batches mix episodes


def test_resumes_on_the_same_next_batch(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    it = iter(ds.batches(16, True, True, 2))
    for _ in range(3):
        next(it)
    state = ds.state_dict()
    expected = next(it)
    _, fresh = pair(tiny_hdf5, tmp_path, COMBOS[0])
    fresh.loader(16, True, True, 2)
    fresh.load_state_dict(state)
    got = next(iter(fresh.batches(16, True, True, 2)))
    for k in ("actions", "rewards"):
        assert torch.equal(got[k], expected[k])
    assert torch.equal(got["obs"]["agentview_image"], expected["obs"]["agentview_image"])


def test_passes_differ_and_are_reproducible(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    epoch = ds.batches(16, True, True, 1)
    first = [b["actions"] for b in epoch]
    second = [b["actions"] for b in epoch]
    assert not all(torch.equal(a, b) for a, b in zip(first, second))
    _, again = pair(tiny_hdf5, tmp_path, COMBOS[0])
    assert all(torch.equal(a, b["actions"]) for a, b in zip(first, again.batches(16, True, True, 2)))


def test_needs_shards_or_cache_dir(tiny_hdf5):
    from robo_loaders_plugin.spec import BackendOptionError

    cfg = make_config(tiny_hdf5, backend="datapipe")
    with pytest.raises(BackendOptionError, match="'shards'.*'cache_dir'"):
        dataset_factory(cfg, obs_keys(cfg))


def rows(batches, bs):
    for b, batch in enumerate(batches):
        for r in range(len(batch["actions"])):
            yield b * bs + r, {k: ({kk: vv[r] for kk, vv in v.items()} if isinstance(v, dict) else v[r])
                               for k, v in batch.items()}


def test_replacement_repeats_windows_with_native_content(tiny_hdf5, tmp_path):
    native, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    epoch = ds.batches(batch_size=32, shuffle=True, drop_last=False, num_workers=2)
    batches = list(epoch)
    plan = ds.plan._plan
    seen = [ds.window_index(int(e), int(w)) for e, w in plan]
    assert len(seen) == len(native)  # a pass has as many windows as without replacement
    counts = np.bincount(seen, minlength=len(native))
    assert counts.max() > 1 and (counts == 0).any()  # drawn with replacement, so some repeat and some are missed
    for i, row in rows(batches, 32):
        same(row, native[seen[i]], f"row {i} (sample {seen[i]})")
    # still served through the episode buffer: at no point are more than shuffle_buffer (3) episodes open
    eps = np.unique(plan[:, 0])
    first = np.array([np.flatnonzero(plan[:, 0] == e)[0] for e in eps])
    last = np.array([np.flatnonzero(plan[:, 0] == e)[-1] for e in eps])
    open_at = [int(np.sum((first <= i) & (i <= last))) for i in range(len(plan))]
    assert max(open_at) == 3


def test_replacement_reproducible_and_resumable(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    epoch = ds.batches(16, True, True, 2)
    first = [b["actions"] for b in epoch]
    plan0 = ds.plan._plan.copy()
    second = [b["actions"] for b in epoch]
    assert not all(torch.equal(a, b) for a, b in zip(first, second))  # (seed, epoch) changes the draw
    _, again = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    assert all(torch.equal(a, b["actions"]) for a, b in zip(first, again.batches(16, True, True, 2)))
    assert np.array_equal(again.plan._plan, plan0)

    it = iter(again.batches(16, True, True, 2))  # second pass of `again`, stopped after 3 batches
    for _ in range(3):
        next(it)
    state = again.state_dict()
    expected = next(it)
    _, fresh = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    fresh.loader(16, True, True, 2)
    fresh.load_state_dict(state)
    got = next(iter(fresh.batches(16, True, True, 2)))
    assert torch.equal(got["actions"], expected["actions"])
    assert torch.equal(got["obs"]["agentview_image"], expected["obs"]["agentview_image"])


@pytest.mark.parametrize("combo", COMBOS, ids=["bc_rnn", "framestack_nopad", "goal_all"])
def test_reloaded_episodes_equal_native(tiny_hdf5, tmp_path, combo):
    """A cache smaller than the dataset reloads episodes every pass (frames only, the small fields are kept):
    the second pass must still serve native's windows."""
    native, ds = pair(tiny_hdf5, tmp_path, combo, cache_episodes=1)
    epoch = ds.batches(batch_size=16, shuffle=True, drop_last=False, num_workers=2)
    for _ in range(2):
        batches = list(epoch)
        seen = [ds.window_index(int(e), int(w)) for e, w in ds.plan._plan]
        for i, row in rows(batches, 16):
            same(row, native[seen[i]], f"row {i} (sample {seen[i]})")
    assert ds.cache.loads > 2 * ds.n_demos - ds.cache.capacity  # episodes were evicted and read again
