"""datapipe backend for robomimic: every window once per pass, each equal to SequenceDataset's sample for that
(demo, start), resumable on the same next batch, and usable from robomimic's training loop."""

import os

import numpy as np
import pytest
import torch
from robomimic_helpers import interleaved, make_config, obs_keys, windows_served

from robo_loaders_plugin.extend import SamplingPlan
from robo_loaders_plugin.robomimic import dataset_factory

COMBOS = [
    dict(hdf5_cache_mode="low_dim", seq_length=10, frame_stack=1),
    dict(hdf5_cache_mode=None, seq_length=5, frame_stack=3, pad_frame_stack=False),
    dict(
        hdf5_cache_mode="all",
        seq_length=4,
        frame_stack=2,
        goal_mode="last",
        hdf5_load_next_obs=True,
        pad_seq_length=False,
    ),
]


def pair(path, tmp_path, combo, filter_key=None, **kw):
    cfg = make_config(path, **combo)
    native = dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)
    with cfg.values_unlocked():
        cfg.train.data_backend = "datapipe"
        cfg.train.data_backend_kwargs = dict({"cache_dir": str(tmp_path / "shards"), "shuffle_buffer": 3}, **kw)
    return native, dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)


def passes(ds, batch_size, shuffle, drop_last, num_workers):
    """The BatchSource robomimic's run_epoch patch iterates, for a DataLoader with these settings."""
    return ds.batch_source(
        SamplingPlan(batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers)
    )


def same(batch_row, sample, where):
    if isinstance(sample, dict):
        assert list(batch_row) == list(sample), where
        for k in sample:
            same(batch_row[k], sample[k], f"{where}/{k}")
        return
    a, b = np.asarray(batch_row), np.asarray(sample)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), where


@pytest.mark.fast  # one of the quick parity checks of `make test-fast`
@pytest.mark.parametrize("combo", COMBOS, ids=["bc_rnn", "framestack_nopad", "goal_all"])
@pytest.mark.parametrize("filter_key", [None, "train"])
def test_each_window_once_and_equal_to_native(tiny_hdf5, tmp_path, combo, filter_key):
    native, ds = pair(tiny_hdf5, tmp_path, combo, filter_key)
    assert len(ds) == len(native)
    epoch = passes(ds, batch_size=32, shuffle=True, drop_last=False, num_workers=2)
    batches = list(epoch)
    assert len(batches) == len(epoch)
    plan = epoch.plan_of(0)
    seen = ds.windows.index(plan[:, 0], plan[:, 1]).tolist()
    assert sorted(seen) == list(range(len(native)))  # every window exactly once
    for b, batch in enumerate(batches):
        for r in range(len(batch["actions"])):
            idx = seen[b * 32 + r]
            row = {k: ({kk: vv[r] for kk, vv in v.items()} if isinstance(v, dict) else v[r]) for k, v in batch.items()}
            same(row, native[idx], f"batch {b} row {r} (sample {idx})")
    # batches mix the episodes the buffer holds: 3 open at a time, so about 3 demos per batch or more where one
    # closes and the next opens (a plan without the buffer's mixing would give about 1)
    distinct = [len(np.unique(plan[i : i + 32, 0])) for i in range(0, len(plan), 32)]
    assert np.mean(distinct) >= 2.5, distinct
    assert max_open(plan) == 3


def test_resumes_on_the_same_next_batch(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    source = passes(ds, 16, True, True, 2)
    it = iter(source)
    for _ in range(3):
        next(it)
    state = source.state_dict()
    expected = next(it)
    _, fresh = pair(tiny_hdf5, tmp_path, COMBOS[0])
    fresh_source = passes(fresh, 16, True, True, 2)
    fresh_source.load_state_dict(state)
    got = next(iter(fresh_source))
    for k in ("actions", "rewards"):
        assert torch.equal(got[k], expected[k])
    assert torch.equal(got["obs"]["agentview_image"], expected["obs"]["agentview_image"])


def test_passes_differ_and_are_reproducible(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    epoch = passes(ds, 16, True, True, 1)
    first = [b["actions"] for b in epoch]
    second = [b["actions"] for b in epoch]
    assert not all(torch.equal(a, b) for a, b in zip(first, second))
    _, again = pair(tiny_hdf5, tmp_path, COMBOS[0])
    assert all(torch.equal(a, b["actions"]) for a, b in zip(first, passes(again, 16, True, True, 2)))


def test_a_distributed_sampler_shuffles_and_a_sampler_the_backend_cannot_follow_is_refused(tiny_hdf5, tmp_path):
    """A custom loop's DataLoader with a DistributedSampler (``examples/robomimic_ddp.py`` gives one for native):
    the backend plans each pass itself, and took any sampler but a RandomSampler for "in order": every pass the
    same unshuffled order, the same tail windows dropped at every epoch (a reviewer's reproduction under torchrun).
    Now a shuffling DistributedSampler shuffles, one that does not keeps the order, and a sampler whose choice of
    windows the backend would drop (weighted) is refused in one line. Control: shuffle=False serves in order."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    native, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    every = list(range(len(native)))

    def served(**loader_kw):
        loader = torch.utils.data.DataLoader(ds, batch_size=16, **loader_kw)
        source = epoch_loader(loader)
        return [windows_served(list(iter(source)), native) for _ in range(2)]

    sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=1, rank=0, seed=1)
    first, second = served(sampler=sampler)
    assert sorted(first) == every and sorted(second) == every
    assert first != every and first != second  # shuffled, another order each pass
    in_order = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=1, rank=0, shuffle=False)
    assert served(sampler=in_order) == [every, every] == served(shuffle=False)  # control: in order
    weighted = torch.utils.data.WeightedRandomSampler([1.0] * len(ds), len(ds))
    with pytest.raises(RoboLoadersError, match="sampler is a WeightedRandomSampler, whose order the backend"):
        served(sampler=weighted)


def test_two_interleaved_iterators_each_serve_every_window_once(tiny_hdf5, tmp_path, capsys):
    """Two passes at once over robomimic's DataLoader (a second iter() before the first is exhausted): each serves
    every SequenceDataset window once, counted by content; the running pass keeps its position. Controls: the same
    count on two passes driving the one pipeline, as every iter() did, misses windows; one after the other both
    were whole; an iterator abandoned part-way and dropped (robomimic's epoch_every_n_steps) leaves the next pass
    to the pipeline."""
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    native, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], "train")
    every = list(range(len(native)))
    loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2)  # as robomimic's train()
    source = epoch_loader(loader)  # what robomimic's run_epoch iterates, the same source every epoch
    abandoned = iter(source)
    next(abandoned)
    del abandoned  # collected at once: the pass is over
    first, second = interleaved(iter(source), iter(source))
    assert sorted(windows_served(first, native)) == every
    assert sorted(windows_served(second, native)) == every
    said = [line for line in capsys.readouterr().out.splitlines() if "apart from" in line]
    assert len(said) == 1 and "pass 1 is still being served" in said[0], said
    # pass 1 ended; the next is past pass 2, the one served apart (it repeated its order before)
    assert source.state_dict().items() >= {"epoch": 3, "batch": 0}.items()
    # the next pass is the pipeline's again (the interleaved ones are over), whole
    assert sorted(windows_served(list(iter(source)), native)) == every
    assert not [line for line in capsys.readouterr().out.splitlines() if "apart from" in line]
    # control: two passes driving the one pipeline at once (each iter() did) serve each other's batches
    first, second = interleaved(source.batches(5), source.batches(6))
    shared = [windows_served(first, native), windows_served(second, native)]
    assert any(sorted(w) != every for w in shared), "the count did not see the shared pipeline's passes"


def test_works_with_no_options_in_the_user_cache_directory(tiny_hdf5, tmp_path, monkeypatch, capsys):
    """No 'shards' nor 'cache_dir': converted on first use into $ROBO_LOADERS_CACHE, reused by the next run."""
    import os

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "home"))
    cfg = make_config(tiny_hdf5, backend="datapipe", seq_length=5)
    first = dataset_factory(cfg, obs_keys(cfg))
    assert "convert tiny.hdf5" in capsys.readouterr().err  # the conversion's progress bar
    entries = [n for n in os.listdir(tmp_path / "home") if not n.startswith(".")]
    assert len(entries) == 1 and entries[0].startswith("robomimic-shards-"), entries
    second = dataset_factory(cfg, obs_keys(cfg))
    assert "convert tiny.hdf5" not in capsys.readouterr().err  # reused, not converted again
    assert first.location == second.location
    native = make_config(tiny_hdf5, seq_length=5)
    native = dataset_factory(native, obs_keys(native))
    for i in range(0, len(native), 37):
        same(second[i], native[i], f"sample {i}")


def max_open(plan):
    """Most episodes open at once while the plan is served (an episode is open from its first item to its last)."""
    eps = np.unique(plan[:, 0])
    first = np.array([np.flatnonzero(plan[:, 0] == e)[0] for e in eps])
    last = np.array([np.flatnonzero(plan[:, 0] == e)[-1] for e in eps])
    return max(int(np.sum((first <= i) & (i <= last))) for i in range(len(plan)))


def rows(batches, bs):
    for b, batch in enumerate(batches):
        for r in range(len(batch["actions"])):
            yield (
                b * bs + r,
                {k: ({kk: vv[r] for kk, vv in v.items()} if isinstance(v, dict) else v[r]) for k, v in batch.items()},
            )


def test_replacement_repeats_windows_with_native_content(tiny_hdf5, tmp_path):
    native, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    epoch = passes(ds, batch_size=32, shuffle=True, drop_last=False, num_workers=2)
    batches = list(epoch)
    plan = epoch.plan_of(0)
    seen = ds.windows.index(plan[:, 0], plan[:, 1]).tolist()
    assert len(seen) == len(native)  # a pass has as many windows as without replacement
    counts = np.bincount(seen, minlength=len(native))
    assert counts.max() > 1 and (counts == 0).any()  # drawn with replacement, so some repeat and some are missed
    for i, row in rows(batches, 32):
        same(row, native[seen[i]], f"row {i} (sample {seen[i]})")
    # still served through the episode buffer: at no point are more than shuffle_buffer (3) episodes open
    assert max_open(plan) == 3


def test_replacement_reproducible_and_resumable(tiny_hdf5, tmp_path):
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    epoch = passes(ds, 16, True, True, 2)
    first = [b["actions"] for b in epoch]
    plan0 = epoch.plan_of(0)
    second = [b["actions"] for b in epoch]
    assert not all(torch.equal(a, b) for a, b in zip(first, second))  # (seed, epoch) changes the draw
    _, again = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    again_source = passes(again, 16, True, True, 2)
    assert all(torch.equal(a, b["actions"]) for a, b in zip(first, again_source))
    assert np.array_equal(again_source.plan_of(0), plan0)

    it = iter(again_source)  # second pass of `again`, stopped after 3 batches
    for _ in range(3):
        next(it)
    state = again_source.state_dict()
    assert state.items() >= {"epoch": 1, "batch": 3}.items()  # the position (and the pass it is of)
    expected = next(it)
    _, fresh = pair(tiny_hdf5, tmp_path, COMBOS[0], replacement=True)
    fresh_source = passes(fresh, 16, True, True, 2)
    fresh_source.load_state_dict(state)
    got = next(iter(fresh_source))
    assert torch.equal(got["actions"], expected["actions"])
    assert torch.equal(got["obs"]["agentview_image"], expected["obs"]["agentview_image"])


def test_a_state_is_resumed_only_by_a_run_of_the_same_pass(tiny_hdf5, tmp_path):
    """A reviewer's reproduction, through the documented custom-loop path (``epoch_loader`` over robomimic's
    DataLoader): a state saved 5 batches into a pass of batch size 16 and loaded by a run of batch size 32, or of
    another ``seed``, was accepted, and that run's pass served 80 of 546 windows never (66 twice with another seed).
    Refused in one line naming what differs; control: the same run resumes with the uninterrupted run's batch."""
    from robo_loaders_plugin import RoboLoadersError
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    def loader(batch_size=16, **kw):
        _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], **kw)
        return epoch_loader(torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True))

    saved = loader()
    it = iter(saved)
    for _ in range(5):
        next(it)
    state, expected = saved.state_dict(), next(it)
    resumed = loader()
    resumed.load_state_dict(state)
    assert torch.equal(next(iter(resumed))["actions"], expected["actions"])
    with pytest.raises(RoboLoadersError, match="whose pass had batch_size 16, this run's has 32"):
        loader(batch_size=32).load_state_dict(state)
    with pytest.raises(RoboLoadersError, match="whose pass had seed 1, this run's has 5"):
        loader(seed=5).load_state_dict(state)
    # a custom loop's one checkpoint, saved by rank 0, resumes every rank (each serves the same (epoch, batch) of
    # its share: the rank was in the key, and rank 1 refused rank 0's state, a review's find); the world size is
    _, ds = pair(tiny_hdf5, tmp_path, COMBOS[0])
    ranks = [ds.batch_source(SamplingPlan(batch_size=4, rank=r, world_size=2)) for r in (0, 1, 0)]
    it = iter(ranks[0])
    next(it), next(it)
    ranks[1].load_state_dict(ranks[0].state_dict())
    assert ranks[1].state_dict()["batch"] == 2
    with pytest.raises(RoboLoadersError, match="whose pass had world_size 2, this run's has 1"):
        ds.batch_source(SamplingPlan(batch_size=4)).load_state_dict(ranks[0].state_dict())


@pytest.mark.parametrize("combo", COMBOS, ids=["bc_rnn", "framestack_nopad", "goal_all"])
def test_reloaded_episodes_equal_native(tiny_hdf5, tmp_path, combo):
    """A cache smaller than the dataset reloads episodes every pass (frames only, the small fields are kept):
    the second pass must still serve native's windows."""
    native, ds = pair(tiny_hdf5, tmp_path, combo, cache_episodes=1)
    epoch = passes(ds, batch_size=16, shuffle=True, drop_last=False, num_workers=2)
    for p in range(2):
        batches = list(epoch)
        plan = epoch.plan_of(p)
        seen = ds.windows.index(plan[:, 0], plan[:, 1]).tolist()
        for i, row in rows(batches, 16):
            same(row, native[seen[i]], f"row {i} (sample {seen[i]})")
    cache = ds.frames.cache
    assert cache.loads > 2 * ds.n_demos - cache.capacity  # episodes were evicted and read again


def _restore_mtime_after(path, edit):
    st = os.stat(path)
    edit()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_shards_of_another_or_edited_file_are_refused(tiny_hdf5, tmp_path):
    """'shards' made from another HDF5, or from this one before an in-place edit (same size, mtime restored), are
    refused naming both files; check_source: false serves them anyway; a moved file still matches."""
    import shutil

    import h5py

    from robo_loaders_plugin import StaleSourceError
    from robo_loaders_plugin.robomimic.convert import convert_robomimic
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    other = write_robomimic_hdf5(
        str(tmp_path / "other.hdf5"),
        demos=12,
        image_size=16,
        cameras=2,
        seed=4,
        min_length=40,
        max_length=50,
        valid_fraction=0.25,
        progress=False,
    )
    shards = str(tmp_path / "shards")
    convert_robomimic(other, shards, progress=False)

    def build(path, **kw):
        cfg = make_config(path, backend="datapipe", backend_kwargs=dict({"shards": shards}, **kw), seq_length=5)
        return dataset_factory(cfg, obs_keys(cfg))

    with pytest.raises(
        StaleSourceError,
        match=r"shards .*shards was made from .*other\.hdf5, which does not match "
        r".*tiny\.hdf5",
    ):
        build(tiny_hdf5)
    moved = str(tmp_path / "moved.hdf5")
    shutil.move(other, moved)
    assert len(build(moved)) > 0  # same content, mtime kept: still the same source

    with h5py.File(moved, "r") as f:
        converted_value = float(f["data/demo_0/actions"][0, 0])

    def edit():
        with h5py.File(moved, "r+") as f:
            f["data/demo_0/actions"][0, 0] += 1.0  # same size

    _restore_mtime_after(moved, edit)
    with pytest.raises(StaleSourceError, match="content digest differs"):
        build(moved)
    stale = build(moved, check_source=False)  # the user's explicit opt-out: the shards are served as converted
    assert stale[0]["actions"][0, 0] == np.float32(converted_value)


def test_missing_obs_key_is_reported_when_the_dataset_is_built(tiny_hdf5, tmp_path):
    from robo_loaders_plugin import SourceError

    cfg = make_config(
        tiny_hdf5,
        backend="datapipe",
        backend_kwargs={"cache_dir": str(tmp_path)},
        low_dim=["robot0_eef_pos", "no_such_key"],
    )
    with pytest.raises(SourceError, match=r"demo_0/obs/no_such_key is missing .*robot0_eef_pos"):
        dataset_factory(cfg, obs_keys(cfg))


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_a_dataset_key_missing_from_the_file_names_the_hdf5_not_the_shards(tiny_hdf5, tmp_path, backend):
    """A reviewer's reproduction: a ``train.dataset_keys`` entry the file lacks (``hdf5_cache_mode`` None, where
    robomimic itself would crash) was named under the backends' own conversion in the cache
    (``.../robomimic-shards-...: demo_0/not_in_file is missing; ... add it to the file``), a directory the user never
    named: the HDF5 the user edits is named, as compressed_cache and gpu_resampler name it."""
    from robo_loaders_plugin import SourceError

    cfg = make_config(
        tiny_hdf5,
        backend=backend,
        backend_kwargs={"cache_dir": str(tmp_path)},
        hdf5_cache_mode=None,
        dataset_keys=["actions", "not_in_file"],
    )
    with pytest.raises(SourceError) as e:
        dataset_factory(cfg, obs_keys(cfg))
    msg = str(e.value)
    assert msg.startswith(f"{tiny_hdf5}: demo_0/not_in_file is missing"), msg
    assert str(tmp_path) not in msg


def test_cache_dir_converts_again_after_an_in_place_edit(tiny_hdf5, tmp_path):
    """A demo's value changed in place (same size, mtime restored): converted again, the new value served, the
    shards of the old content removed."""
    import shutil

    import h5py

    copy = str(tmp_path / "copy.hdf5")
    shutil.copy2(tiny_hdf5, copy)
    cfg = make_config(copy, backend="datapipe", backend_kwargs={"cache_dir": str(tmp_path / "cache")}, seq_length=5)
    first = dataset_factory(cfg, obs_keys(cfg)).location

    def edit():
        with h5py.File(copy, "r+") as f:
            f["data/demo_0/actions"][0, 0] = 42.0

    _restore_mtime_after(copy, edit)
    again = dataset_factory(cfg, obs_keys(cfg))
    assert again.location != first and not os.path.exists(first)
    assert again[0]["actions"][0, 0] == np.float32(42.0)


def test_a_filter_key_that_selects_no_demos_is_one_clear_error(tiny_hdf5, tmp_path):
    """An empty mask: robomimic itself would build an empty dataset; every backend says so, naming the filter key
    (datapipe raised IndexError from the episode reader)."""
    import shutil

    import h5py

    from robo_loaders_plugin import SourceError

    path = str(tmp_path / "empty_mask.hdf5")
    shutil.copy(tiny_hdf5, path)
    with h5py.File(path, "a") as f:
        f.create_dataset("mask/nothing", data=np.array([], dtype="S8"))
    for backend in ("datapipe", "compressed_cache", "gpu_resampler"):
        cfg = make_config(
            path,
            backend=backend,
            backend_kwargs={"cache_dir": str(tmp_path / "c")} if backend != "gpu_resampler" else {},
            seq_length=5,
        )
        with pytest.raises(SourceError, match="no demos selected \\(filter key 'nothing' is empty\\)"):
            dataset_factory(cfg, obs_keys(cfg), filter_by_attribute="nothing")


def test_a_cache_dir_inside_the_cache_root_survives_cache_prune_while_in_use(tiny_hdf5, tmp_path, monkeypatch):
    """Issue 30 item 9: a run's ``cache_dir`` inside the default cache root was removed by ``robo-loaders cache
    prune`` as one unused entry, shards and all, while the run read them (the run died). Pruned from another
    process, as a user would: the shards the run holds are kept and a whole pass still equals SequenceDataset.
    Control: the root's own unused entry is removed by the same command."""
    import gc
    import subprocess
    import sys

    home = tmp_path / "home"
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(home))
    unused = make_config(tiny_hdf5, backend="datapipe", seq_length=5)  # an entry of the root itself, then unused
    other = dataset_factory(unused, obs_keys(unused)).location
    gc.collect()  # its hold released
    native, ds = pair(tiny_hdf5, home, COMBOS[0])  # cache_dir: home/shards, inside the root
    assert ds.location.startswith(str(home / "shards") + "/")
    p = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "robo-loaders"), "cache", "prune", "--max-size", "1"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert p.returncode == 0 and p.stdout == f"removed {other}\n", p.stdout + p.stderr
    assert not os.path.exists(other) and os.path.isdir(ds.location)
    epoch = passes(ds, batch_size=32, shuffle=True, drop_last=False, num_workers=0)
    batches = list(epoch)
    plan = epoch.plan_of(0)
    seen = ds.windows.index(plan[:, 0], plan[:, 1]).tolist()
    assert sorted(seen) == list(range(len(native)))
    for i, row in rows(batches, 32):
        same(row, native[seen[i]], f"row {i} (sample {seen[i]})")


def test_a_shard_deleted_under_a_running_pass_is_the_one_shard_error_line(tiny_hdf5, tmp_path):
    """Issue 30 item 10a: a shard deleted while a pass reads it ended in torchdata's "Caught ShardError in
    _populate_queue. Original Traceback ..." around the clear message. The assembling thread's error is raised as
    itself where the batches leave the pipeline: one line naming the shard. The batches served before it equal
    SequenceDataset's (a 2-demo buffer: the pass reads the shard as it goes)."""
    import glob

    from robo_loaders_plugin.storage.shards.format import ShardError

    native, ds = pair(tiny_hdf5, tmp_path, COMBOS[0], cache_episodes=2)
    epoch = passes(ds, batch_size=16, shuffle=True, drop_last=False, num_workers=2)
    it = iter(epoch)
    first = next(it)
    seen = ds.windows.index(epoch.plan_of(0)[:16, 0], epoch.plan_of(0)[:16, 1]).tolist()
    for i, row in rows([first], 16):
        same(row, native[seen[i]], f"row {i} (sample {seen[i]})")
    (shard,) = glob.glob(os.path.join(ds.location, "shards", "*.tar"))
    os.unlink(shard)
    with pytest.raises(ShardError) as exc:
        for _ in it:
            pass
    assert str(exc.value) == f"{shard}: missing (deleted after the dataset was opened); convert the dataset again"


def test_a_pass_suspended_at_interpreter_exit_ends_without_a_traceback(tiny_hdf5, tmp_path):
    """A reviewer's reproduction: a pass kept suspended to the end of a script (its iterator in a module global)
    printed torchdata's ``Exception ignored in: ... _ParallelMapperIter.__del__ ... AttributeError`` after a
    successful run: its iterators were collected during finalisation, the modules' globals cleared. They are
    dropped at exit now. Control: the script served its batch (the first line it prints)."""
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "suspended.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "import torch\n"
        "from robomimic_helpers import make_config, obs_keys\n"
        "from robo_loaders_plugin.robomimic import dataset_factory\n"
        "from robo_loaders_plugin.robomimic.integration import epoch_loader\n"
        f"c = make_config({tiny_hdf5!r}, backend='datapipe', seq_length=3,"
        f" backend_kwargs={{'cache_dir': {str(tmp_path / 'cache')!r}}})\n"
        "loader = torch.utils.data.DataLoader(dataset_factory(c, obs_keys(c)), batch_size=8, shuffle=True,"
        " num_workers=2)\n"
        "it = iter(epoch_loader(loader))\n"
        "print('served', tuple(next(it)['actions'].shape))\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "\nserved (8, 3, " in p.stdout, p.stdout + p.stderr
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_full_disk_while_converting_on_first_use_names_the_cache_option(tiny_hdf5, tmp_path, monkeypatch):
    """A reviewer's reproduction: a full disk during a training run's own conversion told the user to "choose
    another output directory, then run the same command again", the CLI's words, where the run has neither; it
    names the backend's cache_dir now. Then, with room, the next build converts and serves the native windows."""
    import builtins
    import errno
    import io

    import robo_loaders_plugin.storage.shards.writer as writer_module
    from robo_loaders_plugin.storage.shards.format import DiskFullError

    class FullDisk(io.FileIO):
        def write(self, data):
            if self.tell() + len(data) > 20_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    def full_open(path, mode="r", *args, **kwargs):
        return io.BufferedWriter(FullDisk(path, "wb")) if mode == "wb" else builtins.open(path, mode, *args, **kwargs)

    combo = COMBOS[0]
    with monkeypatch.context() as patched:
        patched.setattr(writer_module, "open", full_open, raising=False)
        with pytest.raises(
            DiskFullError, match=r"No space left on device while .*train\.data_backend_kwargs\.cache_dir"
        ) as e:
            pair(tiny_hdf5, tmp_path, combo)
        assert "output directory" not in str(e.value) and "same command" not in str(e.value)
    native, ds = pair(tiny_hdf5, tmp_path, combo)  # the control: with room, it converts and serves
    assert sorted(windows_served(list(passes(ds, 16, True, False, 0).batches(0)), native)) == list(range(len(native)))
