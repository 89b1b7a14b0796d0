"""The pass planner at scale (issue 22): the vectorised planner gives exactly the order of the Python loop it
replaced (kept below as the reference), every item once per pass, resume and the rank split unchanged; and guards
that fail if the planner or an index builder goes back to Python work per item."""

import sys
import time

import numpy as np
import pytest

from robo_loaders_plugin.core.ranks import rank_share
from robo_loaders_plugin.pipeline import plan as planner
from robo_loaders_plugin.pipeline.plan import BatchPlanNode, ItemGroups, plan_windows


# -- the reference: the planner as it was before issue 22 (a Python loop per item), verbatim ----------------------
def reference_plan(
    items_per_episode, seed, epoch, buffer_episodes, shuffle=True, replacement=False, rank=0, world_size=1
):
    counts = np.asarray(items_per_episode, dtype=np.int64)
    n_eps = len(counts)
    if not shuffle:
        eps = np.repeat(np.arange(n_eps), counts)
        ks = np.concatenate([np.arange(c) for c in counts]) if n_eps else np.zeros(0, np.int64)
        share = rank_share(len(eps), rank, world_size) if world_size > 1 else slice(None)
        return np.stack([eps[share], ks[share]], 1).astype(np.int64)
    rng = np.random.default_rng([int(seed), int(epoch)])
    if replacement:
        total = int(counts.sum())
        flat = np.sort(rng.integers(total, size=total)) if total else np.zeros(0, np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        bounds = np.searchsorted(flat, starts)
        drawn = [flat[bounds[e] : bounds[e + 1]] - starts[e] for e in range(n_eps)]
    else:
        drawn = [np.arange(c, dtype=np.int64) for c in counts]
    order = rng.permutation(n_eps)
    ks = [rng.permutation(drawn[e]) for e in order]
    eps = np.repeat(order, [len(k) for k in ks]).astype(np.int64)
    ks = np.concatenate(ks).astype(np.int64) if n_eps else np.zeros(0, np.int64)
    if world_size > 1:
        share = rank_share(len(eps), rank, world_size)
        eps, ks = eps[share], ks[share]
        rng = np.random.default_rng([int(seed), int(epoch), 1 + int(rank)])
    return reference_through_buffer(eps, ks, buffer_episodes, rng)


def reference_through_buffer(eps, ks, buffer_episodes, rng):
    if not len(eps):
        return np.zeros((0, 2), dtype=np.int64)
    by_key = np.argsort(eps, kind="stable")
    uniq, first, n = np.unique(eps, return_index=True, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    pending = {int(e): ks[by_key[s : s + c]][::-1].tolist() for e, s, c in zip(uniq, starts, n)}
    order = uniq[np.argsort(first, kind="stable")].tolist()
    out = np.empty((len(eps), 2), dtype=np.int64)
    buffer = []
    i = pos = 0
    while pos < len(order) or buffer:
        while pos < len(order) and len(buffer) < buffer_episodes:
            ep = order[pos]
            pos += 1
            buffer.append([ep, pending[ep]])
        j = int(rng.integers(len(buffer)))
        ep, remaining = buffer[j]
        out[i] = (ep, remaining.pop())
        i += 1
        if not remaining:
            buffer.pop(j)
    return out


def random_cases(n_cases, seed=0):
    rng = np.random.default_rng(seed)
    for case in range(n_cases):
        n = int(rng.integers(1, 60))
        counts = rng.integers(0, 40, size=n)
        if case % 5 == 0:
            counts = rng.integers(1, 3, size=n)  # many short episodes: an event at almost every draw
        if case % 11 == 0:
            counts = rng.integers(200, 900, size=int(rng.integers(1, 5)))  # few long ones: a buffer never full
        buffer = int(rng.choice([1, 2, 3, 5, 16, 64, 1000]))
        world = int(rng.choice([1, 1, 2, 3, 8]))
        yield dict(
            items_per_episode=counts,
            seed=case,
            epoch=int(rng.integers(5)),
            buffer_episodes=buffer,
            shuffle=bool(rng.integers(5) > 0),
            replacement=bool(rng.integers(3) == 0),
            rank=int(rng.integers(world)),
            world_size=world,
        )


def test_same_order_as_the_loop_it_replaces():
    """Every (episode, k) in the same position as the reference loop's, over counts with empty episodes, buffers
    of 1 to more than the episodes, replacement, ordered passes and rank shares."""
    for case in random_cases(150):
        assert np.array_equal(plan_windows(**case), reference_plan(**case)), case


def test_the_generator_is_left_where_the_loop_leaves_it():
    """The buffer draws consume exactly the loop's random numbers (a later draw from the same generator agrees)."""
    for seed, (counts, buffer) in enumerate([([30, 1, 7, 50, 2] * 9, 4), ([5] * 3, 8), ([100, 200], 1)]):
        eps = np.repeat(np.arange(len(counts)), counts)
        ks = np.concatenate([np.arange(c) for c in counts])
        mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        assert np.array_equal(
            planner._through_buffer(eps, ks, buffer, mine), reference_through_buffer(eps, ks, buffer, theirs)
        )
        assert mine.bit_generator.state == theirs.bit_generator.state


def test_ungrouped_sequences_keep_the_loops_order():
    """A sequence where an episode's items are not in one run (not what a pass makes, but the rule allows it)."""
    rng = np.random.default_rng(3)
    eps = rng.integers(0, 9, size=400)
    ks = np.arange(400)
    assert np.array_equal(
        planner._through_buffer(eps, ks, 3, np.random.default_rng(1)),
        reference_through_buffer(eps, ks, 3, np.random.default_rng(1)),
    )


def test_negative_control_a_changed_draw_is_seen():
    """The comparison can fail: the planner fed one more draw before the buffer gives another order."""
    counts = [20] * 30
    eps = np.repeat(np.arange(30), 20)
    ks = np.tile(np.arange(20), 30)
    shifted = np.random.default_rng(0)
    shifted.integers(16)
    assert not np.array_equal(
        planner._through_buffer(eps, ks, 16, shifted), reference_through_buffer(eps, ks, 16, np.random.default_rng(0))
    )
    assert not np.array_equal(plan_windows(counts, 0, 0, 16), reference_plan(counts, 0, 0, 15))


def test_grouping_by_entry_is_a_stable_argsort_beyond_16_bits():
    """The radix grouping of draws by entry (one 16-bit pass per 16 bits of the largest entry) equals a stable
    argsort for entries past 65,535 (a pass of 70,000 episodes) and past 2**32."""
    rng = np.random.default_rng(0)
    for top in (9, 70_000, 2**33):
        keys = rng.integers(top, size=50_000)
        assert np.array_equal(planner._group_in_order(keys), np.argsort(keys, kind="stable")), top
    keys = rng.integers(70_000, size=50_000)
    # negative control: the low 16 bits alone do not group entries past 65,535
    low_only = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    assert not np.array_equal(low_only, np.argsort(keys, kind="stable"))
    assert len(planner._group_in_order(np.zeros(0, np.int64))) == 0


def test_exactly_once_per_pass_at_size():
    counts = np.random.default_rng(0).integers(1, 300, size=2000)
    plan = plan_windows(counts, seed=7, epoch=3, buffer_episodes=64)
    key = np.sort(plan[:, 0] * 1000 + plan[:, 1])
    expected = np.sort(
        np.repeat(np.arange(len(counts)), counts) * 1000 + np.concatenate([np.arange(c) for c in counts])
    )
    assert np.array_equal(key, expected)


def reference_serve_by_unit(indices, unit_of, buffer_units, rng, reverse_ties=False):
    """``serve_by_unit`` as first written (comparison sorts): the definition the radix sorts must keep exactly, so
    that a checkpoint's pass continues in the same order after an upgrade."""
    units = unit_of[indices]
    by_unit = np.argsort(units, kind="stable")
    uniq, first, drawn = np.unique(units[by_unit], return_index=True, return_counts=True)
    size = np.maximum(1, np.bincount(unit_of, minlength=int(uniq[-1]) + 1)[uniq])
    nth = np.arange(len(indices), dtype=np.int64) - np.repeat(first, drawn)
    visits = -(-drawn // size)
    visit = np.repeat(np.cumsum(visits) - visits, drawn) + nth // np.repeat(size, drawn)
    entry = rng.permutation(int(visits.sum()))[visit].astype(np.float64)
    spread = max(0, int(buffer_units) - 1)
    when = np.empty(len(indices), dtype=np.float64)
    when[by_unit] = entry + (rng.random(len(indices)) * spread if spread else 0.0)
    if reverse_ties:  # the negative control's order: equal times served last drawn first
        return indices[np.lexsort((-np.arange(len(when)), when))]
    return indices[np.argsort(when, kind="stable")]


def test_serve_by_unit_keeps_its_order_with_radix_sorts():
    """``serve_by_unit``'s radix sorts (units grouped in 16-bit passes, times sorted by their float bits) serve the
    order its comparison sorts served: units past 65,535, buffers of 1 (every time a tie, kept in drawn order) to
    64, repeated draws. Negative control: ties broken the other way give another order."""
    rng = np.random.default_rng(5)
    for n, per, buffer in ((5000, 7, 1), (5000, 7, 8), (300_000, 3, 4), (200_000, 50, 64), (2, 1, 2)):
        unit_of = np.arange(n, dtype=np.int64) // per
        indices = rng.integers(0, n, n)
        mine = planner.serve_by_unit(indices, unit_of, buffer, np.random.default_rng(n + buffer))
        assert np.array_equal(
            mine, reference_serve_by_unit(indices, unit_of, buffer, np.random.default_rng(n + buffer))
        )
    unit_of = np.arange(5000, dtype=np.int64) // 7
    indices = rng.integers(0, 5000, 5000)
    reversed_ties = reference_serve_by_unit(indices, unit_of, 1, np.random.default_rng(0), reverse_ties=True)
    assert not np.array_equal(planner.serve_by_unit(indices, unit_of, 1, np.random.default_rng(0)), reversed_ties)


@pytest.mark.parametrize("world_size", [2, 3, 8])
def test_rank_split_unchanged(world_size):
    counts = np.random.default_rng(1).integers(1, 120, size=500)
    shares = [plan_windows(counts, 2, 1, 16, rank=r, world_size=world_size) for r in range(world_size)]
    for r, share in enumerate(shares):
        assert np.array_equal(share, reference_plan(counts, 2, 1, 16, rank=r, world_size=world_size))
    assert len({len(s) for s in shares}) == 1


def test_resume_continues_on_the_same_batch():
    counts = np.random.default_rng(2).integers(1, 80, size=300)
    node = BatchPlanNode(counts, batch_size=32, drop_last=False, seed=5, buffer_episodes=16)
    node.seek(3)
    node.reset()
    whole = [next(node) for _ in range(node.num_batches())]
    resumed = BatchPlanNode(counts, batch_size=32, drop_last=False, seed=5, buffer_episodes=16)
    resumed.reset({"epoch": 3, "batch": 17})
    assert all(np.array_equal(next(resumed), b) for b in whole[17:])
    assert np.array_equal(np.concatenate(whole), reference_plan(counts, 5, 3, 16))


# -- guards: no Python work per item ------------------------------------------------------------------------------
GUARD_ITEMS, GUARD_EPISODES = 1_000_000, 2_000  # 500 items per episode


def python_lines(fn, *args, **kwargs) -> int:
    """Python lines executed by ``fn(*args)`` (a deterministic measure: independent of the machine's load)."""
    lines = 0

    def tracer(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn(*args, **kwargs)
    finally:
        sys.settrace(None)
    return lines


def test_guard_planning_runs_no_python_per_item():
    """Planning a pass of 1M items runs Python per episode only (fewer lines than a tenth of the items), and takes
    well under a second of CPU (the loop took ~1.6 s; this planner ~0.2 s). Negative control: the reference loop
    runs more lines than it plans items (so it would run over a million here)."""
    counts = np.full(GUARD_EPISODES, GUARD_ITEMS // GUARD_EPISODES)
    assert python_lines(plan_windows, counts, 1, 0, 64) < GUARD_ITEMS // 10
    small = counts[:40]  # 20,000 items
    assert python_lines(reference_plan, small, 1, 0, 64) > small.sum()
    start = time.process_time()
    plan_windows(np.full(10_000, 100), 1, 0, 16)  # 10k episodes of 100: the workload
    assert time.process_time() - start < 1.0


def test_guard_index_builders_run_no_python_per_item():
    """The index arrays of both frameworks over 1M items build with Python per episode at most."""
    from robo_loaders_plugin.windows.lerobot import RowMap
    from robo_loaders_plugin.windows.robomimic import SequenceOptions, SequenceWindows

    lengths = np.full(GUARD_EPISODES, GUARD_ITEMS // GUARD_EPISODES)
    opts = SequenceOptions(obs_keys=("a",), dataset_keys=("actions",), seq_length=10, frame_stack=2)
    builders = [
        lambda: SequenceWindows(lengths, opts),
        lambda: RowMap(lengths),
        lambda: ItemGroups(np.arange(GUARD_ITEMS), np.repeat(np.arange(GUARD_EPISODES), lengths), GUARD_EPISODES),
        lambda: BatchPlanNode(lengths, 64, False, 0, 16).reset(),
    ]
    for build in builders:
        assert python_lines(build) < GUARD_ITEMS // 10
    # negative control: an index built with a loop per item is caught
    assert python_lines(lambda: np.array([int(x) for x in range(GUARD_ITEMS // 5)])) > GUARD_ITEMS // 10


def test_delta_windows_of_runs_equal_the_per_row_windows():
    """The per-run windows LeRobotSamples builds (8 bytes per row) locate exactly what the per-row ones do."""
    from robo_loaders_plugin.windows.lerobot import DeltaWindows, RowMap

    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 30, size=40)
    first = np.cumsum(rng.integers(0, 50, size=40)) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rowmap = RowMap(lengths)
    per_row = DeltaWindows(
        np.repeat(first, lengths) + np.arange(lengths.sum()) - np.repeat(rowmap.run_start, lengths),
        np.repeat(first, lengths),
        np.repeat(first + lengths, lengths),
        {"action": [-3, 0, 1, 5], "observation.state": [-0.5, 0.0]},
    )
    per_run = DeltaWindows.of_runs(
        rowmap, first, first, first + lengths, {"action": [-3, 0, 1, 5], "observation.state": [-0.5, 0.0]}
    )
    idx = rng.integers(0, lengths.sum(), size=300)
    (rows_a, pad_a), (rows_b, pad_b) = per_row.locate(idx), per_run.locate(idx)
    assert rows_a.keys() == rows_b.keys() and pad_a.keys() == pad_b.keys()
    assert all(np.array_equal(rows_a[k], rows_b[k]) for k in rows_a)
    assert all(np.array_equal(pad_a[k], pad_b[k]) for k in pad_a)
    # negative control: runs given the wrong first index are seen
    shifted = DeltaWindows.of_runs(rowmap, first + 1, first, first + lengths, {"action": [-3, 0, 1, 5]})
    assert not np.array_equal(shifted.locate(idx)[0]["action"], rows_a["action"])


def test_guard_store_blob_bounds_run_no_python_per_frame(tmp_path):
    """Locating every frame blob of a store (each process opening a compressed_cache) is numpy per frame."""
    from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore, StoreWriter
    from robo_loaders_plugin.storage.codec import FrameCodec

    frames, episodes = 20_000, 40
    writer = StoreWriter(str(tmp_path / "s.store"), FrameCodec("lz4", 1))
    per = frames // episodes
    for e in range(episodes):
        writer.add_episode(f"e{e}", {"img": np.full((per, 4, 4, 3), e, np.uint8)}, compressed={"img"})
    store = EpisodeStore(writer.finish({}))
    starts, _ends = store.blob_bounds("img")
    assert len(starts) == frames and python_lines(store.blob_bounds, "img") < frames // 10


def test_a_verified_cache_is_not_read_again_until_it_changes(tmp_path, monkeypatch, capsys):
    """A persisted compressed_cache is checked (its data CRC, a read of the whole file) once per version of the
    file (the version its build wrote included), not at every start; a file changed since (here: a byte flipped in
    place) is checked again and rebuilt."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from ram_users import open_cached

    from robo_loaders_plugin.backends.compressed_cache import episode_store as store_mod

    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 64)
    checks = []
    verify = store_mod.EpisodeStore.verify
    monkeypatch.setattr(store_mod.EpisodeStore, "verify", lambda self: checks.append(1) or verify(self))

    def opened():
        store, hold, reused = open_cached(src, cache_dir=str(tmp_path / "cache"))
        path = store.path
        store.close()
        hold.release()
        return path, reused

    path, reused = opened()
    entry = os.path.dirname(path)  # the cache entry: a directory holding the store file
    assert not reused and checks == [1]  # checked once as built, before it was renamed into place
    assert opened()[1] and checks == [1]  # built and checked by this process
    os.unlink(os.path.join(os.path.dirname(entry), ".verified", os.path.basename(entry) + ".json"))
    assert opened()[1] and checks == [1, 1]  # a cache of unknown history: checked
    assert opened()[1] and checks == [1, 1]  # unchanged since: not read again
    data = bytearray(open(path, "rb").read())  # negative control: a byte of the data region flipped in place
    data[100] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(data)
    assert not opened()[1] and checks == [1, 1, 1, 1]  # found damaged, then the rebuilt files checked
    assert "ignoring unusable cache" in capsys.readouterr().out


def test_a_rowmap_pickles_without_its_per_row_array():
    """What a spawned DataLoader worker receives stays small at any size (a payload beyond the pipe's buffer starts
    workers one after another): the per-row run array is rebuilt where the map is unpickled, equal to the original;
    negative control: it holds 4 bytes per row, far more than what is pickled."""
    import pickle

    from robo_loaders_plugin.windows.lerobot import RowMap

    lengths = np.random.default_rng(2).integers(0, 120, size=10_000)
    rowmap = RowMap(lengths)
    copy = pickle.loads(pickle.dumps(rowmap))
    assert np.array_equal(copy.run_of_row, rowmap.run_of_row) and copy.run_of_row.dtype == np.int32
    assert np.array_equal(copy.run_start, rowmap.run_start) and len(copy) == len(rowmap)
    assert len(pickle.dumps(rowmap)) < 100_000 < rowmap.run_of_row.nbytes


def test_windows_and_runs_of_10000_episodes_pickle_under_a_pipes_buffer():
    """A LeRobot dataset's index arrays at 10,000 episodes (a million frames) pickle under 64 kB together, packed
    (``core.packed``), and unpickle to the same windows; negative control: the same arrays pickled as they are
    take several times the pipe's buffer."""
    import pickle

    from robo_loaders_plugin.windows.lerobot import DeltaWindows, RowMap

    lengths = np.random.default_rng(4).integers(95, 111, size=10_000)
    rowmap = RowMap(lengths)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]]) + 7
    windows = DeltaWindows.of_runs(rowmap, first, first, first + lengths, {"action": list(range(100))})
    payload = pickle.dumps((rowmap, windows))
    assert len(payload) < 64_000
    rowmap2, copy = pickle.loads(payload)
    assert copy._rowmap is rowmap2  # shared as before
    idx = np.random.default_rng(5).integers(len(rowmap), size=4_000)
    for mine, theirs in zip(copy.locate(idx), windows.locate(idx)):
        for key in theirs:
            assert np.array_equal(mine[key], theirs[key])
    plain = pickle.dumps((rowmap.run_start, windows._first, windows._from, windows._to))
    assert len(plain) > 3 * 64_000


def test_packed_integer_arrays_come_back_exactly():
    from robo_loaders_plugin.core.packed import pack_ints, unpack_ints

    rng = np.random.default_rng(6)
    cases = [
        np.cumsum(rng.integers(0, 200, size=10_000)),
        rng.integers(-(2**40), 2**40, size=500),
        np.zeros(0, np.int64),
        np.arange(12, dtype=np.int32).reshape(3, 4),
        rng.integers(0, 2, 99).astype(bool),
        np.array([2**62, -(2**62)], np.int64),
    ]
    for a in cases:
        b = unpack_ints(pack_ints(a))
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    dtype, shape, small, blob = pack_ints(cases[0])
    assert small == np.dtype(np.int16).str  # differences up to 199 (int8 would not hold them)
    # negative control: one changed difference changes every value after it
    import zlib

    d = bytearray(zlib.decompress(blob))
    d[10] ^= 1
    assert not np.array_equal(unpack_ints((dtype, shape, small, zlib.compress(bytes(d)))), cases[0])
    with pytest.raises(TypeError, match="integer"):
        pack_ints(np.ones(3))
