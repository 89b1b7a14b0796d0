"""The window planner, the in-process batcher, decoding ahead and the BatchSource position: unit tests (the episode
cache itself: tests/test_lru.py)."""

import collections
import itertools

import numpy as np
import pytest
import torch

from robo_loaders_plugin.core.iteration import BatchSource, SamplerBatches
from robo_loaders_plugin.core.lru import LoadOnceLRU
from robo_loaders_plugin.pipeline.plan import BatchPlanNode, ItemGroups, plan_windows

COUNTS = [7, 0, 12, 3, 9, 1, 15]


def open_episodes(plan):
    """Most episodes open at once while the plan is served (first to last item of each)."""
    eps = np.unique(plan[:, 0])
    first = {e: np.flatnonzero(plan[:, 0] == e)[0] for e in eps}
    last = {e: np.flatnonzero(plan[:, 0] == e)[-1] for e in eps}
    return max(sum(first[e] <= i <= last[e] for e in eps) for i in range(len(plan)))


@pytest.mark.parametrize("buffer", [1, 2, 3, 100])
def test_every_item_once_per_pass_within_the_buffer(buffer):
    plan = plan_windows(COUNTS, seed=5, epoch=2, buffer_episodes=buffer)
    assert sorted(map(tuple, plan.tolist())) == [(e, k) for e, c in enumerate(COUNTS) for k in range(c)]
    assert min(buffer, 2) <= open_episodes(plan) <= min(buffer, sum(c > 0 for c in COUNTS))
    assert np.array_equal(plan, plan_windows(COUNTS, seed=5, epoch=2, buffer_episodes=buffer))  # (seed, pass)
    assert not np.array_equal(plan, plan_windows(COUNTS, seed=5, epoch=3, buffer_episodes=buffer))
    assert not np.array_equal(plan, plan_windows(COUNTS, seed=6, epoch=2, buffer_episodes=buffer))


def test_unshuffled_plan_is_dataset_order_and_replacement_draws_with_repeats():
    plan = plan_windows(COUNTS, 0, 0, 3, shuffle=False)
    assert plan.tolist() == [[e, k] for e, c in enumerate(COUNTS) for k in range(c)]
    drawn = plan_windows(COUNTS, 1, 0, 3, replacement=True)
    assert len(drawn) == sum(COUNTS) and open_episodes(drawn) <= 3
    pairs = [tuple(p) for p in drawn.tolist()]
    assert len(set(pairs)) < len(pairs) and all(k < COUNTS[e] for e, k in pairs)


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("shuffle,replacement", [(True, False), (False, False), (True, True)])
def test_ranks_split_a_pass_disjointly_with_equal_batch_counts(world_size, shuffle, replacement):
    """Every rank serves ceil(N / world) items: together the one-process pass, plus fewer than world_size repeats
    (accelerate's even_batches rule); each rank opens only its own run of episodes."""
    whole = plan_windows(COUNTS, 4, 1, 2, shuffle, replacement)
    shares = [
        plan_windows(COUNTS, 4, 1, 2, shuffle, replacement, rank=r, world_size=world_size) for r in range(world_size)
    ]
    per_rank = -(-sum(COUNTS) // world_size)
    assert [len(s) for s in shares] == [per_rank] * world_size
    served = collections.Counter(map(tuple, np.concatenate(shares).tolist()))
    expected = collections.Counter(map(tuple, whole.tolist()))
    assert not expected - served  # nothing of the pass is lost
    assert sum((served - expected).values()) == world_size * per_rank - sum(COUNTS)
    if not replacement:  # disjoint up to the completing repeats
        firsts = [set(map(tuple, s.tolist())) for s in shares]
        overlap = sum(len(a & b) for i, a in enumerate(firsts) for b in firsts[i + 1 :])
        assert overlap <= world_size * per_rank - sum(COUNTS)
    again = plan_windows(COUNTS, 4, 1, 2, shuffle, replacement, rank=1, world_size=world_size)
    assert np.array_equal(again, shares[1])  # a function of (seed, pass, rank): ranks agree without talking
    nodes = [BatchPlanNode(COUNTS, 4, False, 4, 2, shuffle, replacement, r, world_size) for r in range(world_size)]
    assert len({n.num_batches() for n in nodes}) == 1
    batches = -(-sum(COUNTS) // 4)
    assert nodes[0].num_batches() == -(-batches // world_size)  # LeRobot's compute_sampler_state


def test_plan_node_batches_seek_and_state():
    node = BatchPlanNode(COUNTS, batch_size=10, drop_last=True, seed=3, buffer_episodes=2)
    assert node.num_batches() == sum(COUNTS) // 10
    node.reset()
    first = [next(node) for _ in range(node.num_batches())]
    with pytest.raises(StopIteration):
        next(node)
    assert np.array_equal(np.concatenate(first), node.plan_of(0)[: len(first) * 10])
    node.seek(4, 2)
    node.reset()
    assert node.get_state() == {"epoch": 4, "batch": 2}
    assert np.array_equal(next(node), node.plan_of(4)[20:30])
    node.reset()  # no seek: the next pass
    assert node.get_state() == {"epoch": 5, "batch": 0}


def test_item_groups_map_pairs_back_to_items():
    episode_of = np.array([0, 0, 1, 2, 2, 2, 1])
    groups = ItemGroups(np.array([6, 2, 3, 5, 0]), episode_of, 3)
    assert groups.counts.tolist() == [1, 2, 2]
    served = groups.indices(np.array([[e, k] for e in range(3) for k in range(groups.counts[e])]))
    assert sorted(served.tolist()) == [0, 2, 3, 5, 6] and all(episode_of[served[0:1]] == 0)


def test_decode_ahead_opens_the_next_pass_before_it_starts():
    """At the end of a pass its spare room loads the next pass's first episodes, so a pass does not begin with the
    whole shuffle buffer to decode; the next pass then does not load them again."""
    from robo_loaders_plugin.pipeline.batches import DecodeAhead, _entry_order

    counts, buffer, ahead = [5] * 12, 2, 3
    loads = []
    # room for a batch's episodes (the buffer's, and those entering within the batch) and those loaded ahead
    cache = LoadOnceLRU(lambda ep: loads.append(ep) or {"ep": ep}, capacity=buffer + 2 + ahead)
    node = BatchPlanNode(counts, batch_size=4, drop_last=False, seed=1, buffer_episodes=buffer)
    decode = DecodeAhead(cache.load_ahead, threads=1, ahead=ahead)

    def serve(epoch, upcoming):
        node.seek(epoch)
        node.reset()
        decode.start_pass(node.plan, upcoming=upcoming)
        start = len(loads)
        for _ in range(node.num_batches()):
            pairs = next(node)
            decode.reached(pairs[:, 0])
            decode.pool.submit(lambda: None).result()  # one decode thread: what it was given has run
            for e in np.unique(pairs[:, 0]):
                cache.get(int(e))
        return loads[start:]

    try:
        first = serve(0, upcoming=lambda: node.plan_of(1))
        opening = _entry_order(node.plan_of(1))[:ahead].tolist()
        assert sorted(first[:12]) == list(range(12)) and len(first) <= 12 + ahead  # each once, then the next's
        assert all(e in cache._items for e in opening)  # loaded before pass 1 starts
        second = serve(1, upcoming=None)
    finally:
        decode.shutdown()
    assert sorted(second + opening) == list(range(12))  # pass 1 loaded only what was not opened ahead


@pytest.mark.parametrize("threads", [0, 2])
def test_sampler_batches_follow_the_dataloader_order_and_rng(threads):
    """Same batches as the DataLoader over the same sampler, and the generator left in the same state."""
    data = torch.arange(50)
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    dl = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, drop_last=True, generator=g1)
    ref = [b.tolist() for b in dl]
    dl2 = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, drop_last=True, generator=g2)
    got = [b.tolist() for b in SamplerBatches(lambda idx: data[idx], dl2.batch_sampler, g2, threads)]
    assert got == ref and torch.equal(g1.get_state(), g2.get_state())
    skip_draw = torch.Generator().manual_seed(9)  # a batcher that forgot the DataLoader's base-seed draw differs
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data, generator=skip_draw), 8, True)
    assert [b.tolist() for b in (data[i] for i in sampler)] != ref


class Counting(BatchSource):
    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = n

    def __len__(self):
        return self.n

    def batches(self, epoch, start=0):
        for b in range(start, self.n):
            yield (epoch, b)


def test_batch_source_position_resume_and_abandoned_passes():
    src = Counting(4)
    assert list(src) == [(0, b) for b in range(4)] and src.state_dict() == {"epoch": 1, "batch": 0}
    it = iter(src)
    assert [next(it), next(it)] == [(1, 0), (1, 1)] and src.state_dict() == {"epoch": 1, "batch": 2}
    resumed = Counting(4)
    resumed.load_state_dict(src.state_dict())
    assert list(resumed) == [(1, 2), (1, 3)]
    assert next(iter(src)) == (2, 0)  # a pass abandoned part-way is not resumed by the next iter()
    assert list(Counting(3, start_epoch=5, start_batch=1)) == [(5, 1), (5, 2)]


class Failing(Counting):
    """Counting, the batches in ``bad`` raising once each."""

    def __init__(self, n, bad, **kw):
        super().__init__(n, **kw)
        self.bad = set(bad)

    def batches(self, epoch, start=0):
        for b in range(start, self.n):
            if (epoch, b) in self.bad:
                self.bad.discard((epoch, b))
                raise RuntimeError(f"batch {b} failed")
            yield (epoch, b)


def _skipping(it):
    """A loop that skips the batches that fail: what it served, and the errors it caught."""
    served, errors = [], []
    while True:
        try:
            served.append(next(it))
        except StopIteration:
            return served, errors
        except RuntimeError as exc:
            errors.append(str(exc))


def test_a_failed_batch_is_lost_and_the_pass_goes_on_as_a_dataloader_iterator_does():
    """A reviewer's reproduction: the pass was a generator, finished by the raise, so a loop that skips a failed
    batch saw the pass end there without a word. Now the failed batch is lost (as a DataLoader loses it) and the rest
    of the pass is served; the position says so; a failure on the last batch ends the pass."""
    src = Failing(5, {(0, 1), (1, 4)})
    assert _skipping(iter(src)) == ([(0, 0), (0, 2), (0, 3), (0, 4)], ["batch 1 failed"])
    assert src.state_dict() == {"epoch": 1, "batch": 0}
    assert _skipping(iter(src)) == ([(1, b) for b in range(4)], ["batch 4 failed"])  # the last batch
    assert src.state_dict() == {"epoch": 2, "batch": 0}
    it = iter(src)  # failed, then stopped: the position is past the failed batch
    src.bad.add((2, 1))
    assert next(it) == (2, 0)
    with pytest.raises(RuntimeError):
        next(it)
    # the position is the batch after the failed one, which the next call serves (a checkpoint saved at the error
    # resumes there: the session review's reproduction, where it said the next pass)
    assert src.state_dict() == {"epoch": 2, "batch": 2}
    resumed = Failing(5, set())
    resumed.load_state_dict(src.state_dict())
    assert next(iter(resumed)) == (2, 2)
    assert next(it) == (2, 2) and src.state_dict() == {"epoch": 2, "batch": 3}  # it goes on
    src.bad.add((2, 3))
    with pytest.raises(RuntimeError):
        next(it)
    del it  # a stopped pass dropped: abandoned, the position is the next pass
    assert src.state_dict() == {"epoch": 3, "batch": 0} and next(iter(src)) == (3, 0)


def test_a_stopped_pass_replaced_by_another_says_so_instead_of_serving_beside_it():
    """After a failed batch, an iter() (or a loaded position) before the failed pass goes on starts as after any
    stopped pass (the next pass, not one served apart), and the stopped iterator then raises one line, not a second
    pass served beside the first (the control: without the new iter(), it goes on)."""
    from robo_loaders_plugin import RoboLoadersError

    src = Failing(4, {(0, 1)})
    old = iter(src)
    assert next(old) == (0, 0)
    with pytest.raises(RuntimeError):
        next(old)
    new = iter(src)
    assert next(new) == (1, 0)  # the next pass, from its start (not apart: its position moves)
    with pytest.raises(
        RoboLoadersError, match=r"pass 0 \(replaced by another pass or position\) stopped at its batch 2"
    ):
        next(old)
    assert list(new) == [(1, 1), (1, 2), (1, 3)] and src.state_dict() == {"epoch": 2, "batch": 0}
    src = Failing(4, {(0, 1)})
    old = iter(src)
    with pytest.raises(RuntimeError):
        next(old), next(old)
    src.load_state_dict({"epoch": 5, "batch": 2})
    with pytest.raises(RoboLoadersError, match="replaced by another pass or position"):
        next(old)
    assert list(src) == [(5, 2), (5, 3)]


def test_a_position_is_loaded_only_into_a_pass_of_the_same_order_and_range(caplog):
    """A reviewer's reproduction (robomimic's datapipe/video_stream through ``epoch_loader``): a state saved with
    batch size 16 loaded into a run of batch size 32 (or another seed) served the same (epoch, batch) of another
    order, windows twice and never, without a word. The pass that decides the order is saved with the position and
    compared; a position out of range is one line, not an IndexError or an empty pass; a state of an earlier version
    (no pass) is loaded, said once. Control: the same pass resumes."""
    from robo_loaders_plugin import RoboLoadersError

    def source(**key):
        src = Counting(4)
        src.pass_key = {"batch_size": 16, "seed": 0, **key}
        return src

    saved = source()
    it = iter(saved)
    next(it)
    state = saved.state_dict()
    assert state == {"epoch": 0, "batch": 1, "pass": {"batch_size": 16, "seed": 0}}
    same = source()
    same.load_state_dict(state)
    assert list(same) == [(0, 1), (0, 2), (0, 3)]
    for other, named in (({"batch_size": 32}, "batch_size 16, this run's has 32"), ({"seed": 5}, "seed 0")):
        with pytest.raises(RoboLoadersError, match=named):
            source(**other).load_state_dict(state)
    with pytest.raises(RoboLoadersError, match="whose pass had items None, this run's has 10"):
        source(items=10).load_state_dict(state)
    for bad in ({"epoch": 1, "batch": -3}, {"epoch": -1, "batch": 0}, {"epoch": 1, "batch": 5}):
        with pytest.raises(RoboLoadersError, match=r"is no position of this run \(epoch >= 0, batch 0\.\.4"):
            source().load_state_dict({**bad, "pass": state["pass"]})
    with pytest.raises(RoboLoadersError, match="expected the state_dict"):
        source().load_state_dict({"epoch": "x"})
    old = source()
    old.load_state_dict({"epoch": 0, "batch": 2})
    assert "does not record its pass" in caplog.text and list(old) == [(0, 2), (0, 3)]


def test_the_position_after_an_abandoned_pass_is_the_next_pass():
    """A reviewer's reproduction: robomimic's ``run_epoch`` takes ``epoch_every_n_steps`` batches and drops its
    iterator, and the next epoch's ``iter()`` starts the next pass; ``state_dict()`` saved after such an epoch still
    said the abandoned pass's next batch, so the resumed run served the rest of the old pass. Now it says the next
    pass, and a resumed source serves what the uninterrupted one serves. Control: while the iterator lives, the
    position is its next batch."""

    def run_epoch(src, steps=3):
        it = iter(src)
        return [next(it) for _ in range(steps)]  # the iterator dropped on return

    src = Counting(10)
    run_epoch(src)
    live = iter(src)
    next(live)
    assert src.state_dict() == {"epoch": 1, "batch": 1}  # control: a live iterator's next batch
    del live
    checkpoint = src.state_dict()
    assert checkpoint == {"epoch": 2, "batch": 0}
    resumed = Counting(10)
    resumed.load_state_dict(checkpoint)
    assert [run_epoch(resumed) for _ in range(2)] == [run_epoch(src) for _ in range(2)]


def test_a_pass_asked_for_while_another_is_served_is_whole_and_moves_no_position(capsys):
    """A second iter() while a pass is being served (not exhausted, closed or dropped) is a whole pass of its own,
    the pass after the running one, served by batches_apart; the running pass keeps its position and ends it. An
    abandoned pass that is dropped (robomimic's epoch_every_n_steps), closed or failed is over: the next pass is the
    running one (it moves the position). The control: the position the old shared counter reached."""
    src = Counting(4)
    running = iter(src)
    assert next(running) == (0, 0)
    assert list(src) == [(1, b) for b in range(4)]  # whole, apart
    # the running pass's (a shared counter said epoch 1), and the pass after it past the one served apart
    assert src.state_dict() == {"epoch": 0, "batch": 1, "next_epoch": 2}
    # the next pass is past the one served apart: pass 1 again repeated its order (a reviewer's reproduction)
    assert list(running) == [(0, b) for b in range(1, 4)] and src.state_dict() == {"epoch": 2, "batch": 0}
    assert sum("apart from the running pass" in line for line in capsys.readouterr().out.splitlines()) == 1
    abandoned = iter(src)
    assert next(abandoned) == (2, 0)
    del abandoned  # dropped: the next pass is served as the running one and moves the position
    assert list(src) == [(3, b) for b in range(4)] and src.state_dict() == {"epoch": 4, "batch": 0}
    closed = iter(src)
    next(closed)
    closed.close()
    assert next(iter(src)) == (5, 0) and src.state_dict() == {"epoch": 5, "batch": 1}
    running = iter(src)  # abandoned part-way while a pass was served apart: the next is past both
    assert next(running) == (6, 0) and next(iter(src)) == (7, 0)
    del running
    assert next(iter(src)) == (8, 0)
    assert not capsys.readouterr().out  # said once per source


def test_a_run_resumed_after_a_pass_served_apart_skips_it_as_the_saved_run_does():
    """A reviewer's reproduction: a state saved mid-pass after a second iter() served the next pass apart did not
    record it, so the resumed run served that pass again after the rest of the running one, where the run it
    resumed served the pass after it. The state says the next pass now; loaded, the resumed run serves what the
    uninterrupted one serves. Controls: without a pass served apart the state is the position alone, and a
    ``next_epoch`` that is not past the position is refused."""
    from robo_loaders_plugin import RoboLoadersError

    src = Counting(4)
    running = iter(src)
    next(running)
    list(src)  # pass 1, apart
    state = src.state_dict()
    assert state == {"epoch": 0, "batch": 1, "next_epoch": 2}
    uninterrupted = [list(running), list(src), list(src)]
    resumed = Counting(4)
    resumed.load_state_dict(state)
    assert [list(resumed), list(resumed), list(resumed)] == uninterrupted
    assert [b[0] for b in uninterrupted[1]] == [2] * 4  # past pass 1
    plain = Counting(4)  # control: nothing apart, no next_epoch
    it = iter(plain)
    next(it)
    assert plain.state_dict() == {"epoch": 0, "batch": 1}
    with pytest.raises(RoboLoadersError, match="is no position of this run"):
        Counting(4).load_state_dict({"epoch": 3, "batch": 0, "next_epoch": 3})


def test_sampler_batches_consume_the_rng_like_a_persistent_worker_dataloader():
    """With persistent workers a DataLoader draws its base seed once for the whole run, not once per pass."""
    data = list(range(20))
    torch.manual_seed(3)
    dl = torch.utils.data.DataLoader(data, batch_size=5, shuffle=True, num_workers=1, persistent_workers=True)
    ref = [b.tolist() for _ in range(2) for b in dl]
    state = torch.get_rng_state()
    torch.manual_seed(3)
    dl2 = torch.utils.data.DataLoader(data, batch_size=5, shuffle=True, num_workers=1, persistent_workers=True)
    batches = SamplerBatches(lambda idx: torch.tensor(idx), dl2.batch_sampler, None, 0, seed_once=True)
    got = [b.tolist() for _ in range(2) for b in batches]
    assert got == ref and torch.equal(torch.get_rng_state(), state)


def test_the_shuffle_buffer_is_described_as_it_acts():
    """Issue 23 B12: "shuffle buffer 64 episodes" was logged for a dataset of 20 episodes (the buffer holds all 20)."""
    from robo_loaders_plugin.pipeline.options import PassOptions

    opts = PassOptions(shuffle_buffer=64)
    assert opts.describe_shuffle(20) == "shuffle buffer 20 episodes (all of them; shuffle_buffer=64)"
    assert opts.describe_shuffle(200, "demos") == "shuffle buffer 64 demos"
    assert opts.describe_shuffle(64) == "shuffle buffer 64 episodes"


def test_decoding_ahead_is_bounded_by_the_pass_not_by_the_cache():
    """A byte-sized cache may hold thousands of small episodes; loading ahead stays near a shuffle buffer's worth
    (at 1M steps it loaded ~10k demos ahead and served 10x fewer samples/s), and never beyond the cache's room."""
    from robo_loaders_plugin.pipeline.batches import AHEAD_PER_THREAD, decode_room

    assert decode_room(32, 16, 2) == 15  # the old default: the cache's room
    assert decode_room(10_000, 16, 2) == 16  # not 9,983
    assert decode_room(10_000, 1, 4) == 4 * AHEAD_PER_THREAD  # threads keep busy with a small shuffle buffer
    assert decode_room(3, 2, 8) == 0  # no room: nothing is loaded ahead
    assert decode_room(32, 16, 2, entering=10) == 5  # the episodes entering while batches are assembled


def test_entering_at_once_counts_first_uses_within_consecutive_batches():
    from robo_loaders_plugin.pipeline.batches import entering_at_once

    # batches of 2: [0 0] [1 2] [1 3] [4 5] [5 6]: first uses per batch 1, 2, 1, 2, 1
    plan = np.array([[e, 0] for e in (0, 0, 1, 2, 1, 3, 4, 5, 5, 6)])
    assert entering_at_once(plan, 2, 1) == 2
    assert entering_at_once(plan, 2, 2) == 3
    assert entering_at_once(plan, 2, 3) == 5
    assert entering_at_once(plan, 2, 99) == 7  # the whole pass: every episode
    assert entering_at_once(plan[:0], 2, 2) == 0
    assert entering_at_once(plan[np.argsort(plan[:, 0], kind="stable")], 2, 2) == 4  # control: another order


def _fit(counts, capacity, shuffle, given=False, batch=16, threads=2, decode_threads=2):
    from robo_loaders_plugin.pipeline.batches import fit_to_cache

    return fit_to_cache(
        lambda s: plan_windows(counts, 0, 0, s),
        capacity=capacity,
        episodes=len(counts),
        shuffle_buffer=shuffle,
        shuffle_given=given,
        batch_size=batch,
        threads=threads,
        decode_threads=decode_threads,
        option_prefix="--dataset.backend_kwargs",
    )


def test_a_pass_is_fitted_to_the_episode_cache_with_the_units_entering_while_batches_are_assembled(capsys):
    """Units of 13 items (480p, diffusion windows) and batches of 64: ~5 units enter per batch, and the 2 batches
    in flight with 2 threads need them beside the shuffle buffer. The old sizing (shuffle 13 + 13 loaded ahead in
    a cache of 27) left none of that room: units in use were evicted and decoded again."""
    from robo_loaders_plugin.pipeline.batches import entering_at_once

    counts = [13] * 132
    use = _fit(counts, capacity=27, shuffle=13, batch=64, threads=4)
    assert use.shuffle_buffer + use.entering + use.ahead <= 27 and use.shuffle_buffer < 13
    assert use.entering == entering_at_once(plan_windows(counts, 0, 0, use.shuffle_buffer), 64, 4) > 15
    two = _fit(counts, capacity=27, shuffle=13, batch=64, threads=2)
    assert two.shuffle_buffer + two.entering + two.ahead <= 27 and two.entering < use.entering
    assert "shuffle buffer" in use.note and "(not 13)" in use.note and not capsys.readouterr().out
    # the user's buffer is kept, with a warning
    given = _fit(counts, capacity=27, shuffle=13, given=True, batch=64, threads=4)
    assert given.shuffle_buffer == 13 and given.ahead == 0
    out = capsys.readouterr().out
    assert "units will be loaded more than once" in out and "--dataset.backend_kwargs.cache_memory" in out
    roomy = _fit(counts, capacity=60, shuffle=13, batch=64)  # room beside them: unchanged, loading ahead
    assert roomy.shuffle_buffer == 13 and roomy.ahead >= 1 and not roomy.note
    whole = _fit(counts, capacity=132, shuffle=13, batch=64)  # the cache holds every unit: nothing to fit
    assert (whole.shuffle_buffer, whole.entering) == (13, 0)
    small_batches = _fit([120] * 50, capacity=20, shuffle=9, batch=16)  # whole 84x84 episodes: ~1 enters per batch
    assert small_batches.shuffle_buffer == 9 and small_batches.ahead >= 1
    capsys.readouterr()
    exact = _fit([600] * 40, capacity=2, shuffle=1, batch=64)  # L480's datapipe: 2 whole episodes held, 1 open
    assert (exact.shuffle_buffer, exact.entering, exact.ahead) == (1, 1, 0) and not capsys.readouterr().out


def test_the_fitted_shuffle_buffer_does_not_depend_on_the_threads():
    """The order is a function of what a resumed run keeps: LeRobot resumes exactly with another ``--num_workers``,
    so the buffer fitted for 1, 2, 4 or 8 threads is the same; the threads only change the room for loading ahead and
    the warning (8 threads need more units than the cache holds)."""
    counts = [13] * 132
    fits = {t: _fit(counts, capacity=27, shuffle=13, batch=64, threads=t) for t in (1, 2, 4, 8)}
    assert len({f.shuffle_buffer for f in fits.values()}) == 1 and fits[4].shuffle_buffer < 13
    assert fits[1].entering < fits[4].entering < fits[8].entering  # control: the threads do change what enters


@pytest.mark.parametrize("ours", [True, False])
def test_pipeline_threads_are_joined_even_when_an_item_takes_seconds(ours):
    """A 480p unit decodes for seconds; torchdata's own shutdown waits 0.5 s per thread and leaves it running
    into interpreter finalization (the process then aborts: "terminate called without an active exception").
    ``shutdown_node_threads`` waits until it has stopped; the control (torchdata's ``_shutdown`` alone) does not."""
    import threading
    import time

    from torchdata.nodes import IterableWrapper, ParallelMapper

    from robo_loaders_plugin.core.torch_compat import shutdown_node_threads

    started = threading.Event()

    def slow(x):
        started.set()
        time.sleep(1.5)
        return x

    node = ParallelMapper(IterableWrapper(range(100)), map_fn=slow, num_workers=2, in_order=True, method="thread")
    node.reset()
    assert started.wait(10)
    workers = list(node._it._it._workers)
    if ours:
        assert shutdown_node_threads(node) == [] and not any(t.is_alive() for t in workers)
    else:
        node._it._it._shutdown()
        assert any(t.is_alive() for t in workers)
        shutdown_node_threads(node)


@pytest.mark.parametrize("order_late", [False, True])
def test_the_first_batches_of_a_pass_are_loaded_ahead(order_late, monkeypatch):
    """Resetting the pipeline starts its assembling threads at once, so the loads ahead must know the pass's order
    before that: told too late (as the pipeline once did, start_pass after the reset), the first batches' reached()
    calls found no order and loaded nothing ahead, and a 480p first batch decoded its shuffle buffer's 16 units one
    after another in one assembling thread (2.6 s). Checked by what happened first, the order reaching the loads
    ahead or the first batch being assembled (not by a count at the first batch, which a loaded machine's thread
    timing moved: 6 of 7 submitted once in a test run). Control (``order_late``): the order delivered after the
    pipeline started reaches them after the first batch was assembled, and nothing was submitted before."""
    import threading
    import time

    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline.batches import DecodeAhead, PipelineBatches

    n_eps, per_ep = 12, 8
    groups = ItemGroups(np.arange(n_eps * per_ep), np.repeat(np.arange(n_eps), per_ep), n_eps)
    cache = LoadOnceLRU(lambda ep: {"ep": ep}, capacity=n_eps)
    decode = DecodeAhead(cache.load_ahead, threads=1, ahead=4)
    delivered = threading.Event()
    events: list[str] = []
    start_pass = decode.start_pass

    def ordered(*args, **kwargs):
        events.append("order")
        return start_pass(*args, **kwargs)

    if order_late:

        def late(*args, **kwargs):  # the order arrives once the first batch is out (what a late order did)
            def deliver():
                delivered.wait(30)
                ordered(*args, **kwargs)

            threading.Thread(target=deliver).start()

        monkeypatch.setattr(decode, "start_pass", late)
    else:
        monkeypatch.setattr(decode, "start_pass", ordered)

    def collate(idx):
        events.append("batch")
        time.sleep(0.01)
        return {"index": torch.as_tensor(idx)}

    plan = SamplingPlan(batch_size=8, num_workers=2)
    source = PipelineBatches(groups, collate, plan, seed=3, shuffle_buffer=3, prefetch=2, decode_ahead=decode)
    try:
        it = source.batches(0)
        next(it)
        submitted_at_first = decode.submitted
        if not order_late:  # the loads ahead go on: the shuffle buffer's episodes and those ahead of it
            deadline = time.monotonic() + 10
            while decode.submitted < 3 + 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            submitted = decode.submitted
    finally:
        delivered.set()
        source.shutdown()
    if order_late:
        assert submitted_at_first == 0  # the control: nothing was loaded ahead of the first batches
        assert events[0] == "batch"
    else:
        assert events[0] == "order", events[:3]  # known before any batch was assembled
        assert submitted >= 3 + 4


WARM_COUNTS = np.full(40, 30)


@pytest.mark.parametrize("world_size, replacement", [(1, False), (1, True), (3, False)])
def test_a_warm_up_reorders_the_first_batches_and_serves_every_item_once(world_size, replacement):
    """``warm_up``: the first batch is drawn from two open episodes, the second from at most four (and the ones
    that entered while it was drawn), ... until the buffer is full; the pass is the same items, each episode's in
    the same order, and the rest of the pass is drawn as before. Control: without it the first batch opens the
    whole buffer."""
    batch, buffer = 16, 16
    for rank in range(world_size):
        args = dict(seed=4, epoch=0, buffer_episodes=buffer, replacement=replacement, rank=rank, world_size=world_size)
        plain, warm = plan_windows(WARM_COUNTS, **args), plan_windows(WARM_COUNTS, warm_up=batch, **args)
        assert sorted(map(tuple, warm.tolist())) == sorted(map(tuple, plain.tolist()))
        for e in np.unique(plain[:, 0]):  # each episode's items in the pass's order
            assert np.array_equal(warm[warm[:, 0] == e, 1], plain[plain[:, 0] == e, 1])
        assert np.array_equal(warm, plan_windows(WARM_COUNTS, warm_up=batch, **args))  # a function of (seed, pass)
        if rank == world_size - 1 and world_size > 1:
            continue  # the last share wraps round the pass: an episode in two runs is served without a warm-up
        assert len(np.unique(warm[:batch, 0])) == 2 < len(np.unique(plain[:batch, 0]))  # control: a full buffer
        assert len(np.unique(warm[batch : 2 * batch, 0])) <= 4 + 1
        assert len(np.unique(warm[: 3 * batch, 0])) <= 8 + 2
    assert np.array_equal(plan_windows(WARM_COUNTS, 4, 0, 2, warm_up=batch), plan_windows(WARM_COUNTS, 4, 0, 2))


def _first_entered(plan, n):
    from robo_loaders_plugin.pipeline.batches import _entry_order

    return _entry_order(plan)[:n].tolist()


def test_only_the_first_pass_warms_up():
    """Later passes are loaded ahead while the one before is served, so they draw from a full buffer from their
    first batch; pass 0's plan is the same however the run got there (a resumed run finds the same batches)."""
    node = BatchPlanNode(WARM_COUNTS, 16, True, 4, 16, warm_up=True)
    assert np.array_equal(node.plan_of(0), plan_windows(WARM_COUNTS, 4, 0, 16, warm_up=16))
    assert not np.array_equal(node.plan_of(0), plan_windows(WARM_COUNTS, 4, 0, 16))
    assert np.array_equal(node.plan_of(1), plan_windows(WARM_COUNTS, 4, 1, 16))
    resumed = BatchPlanNode(WARM_COUNTS, 16, True, 4, 16, warm_up=True)
    resumed.seek(0, 3)
    resumed.reset()
    assert np.array_equal(next(resumed), node.plan_of(0)[48:64])


@pytest.mark.parametrize("warm_up", [True, False])
def test_the_first_batch_is_served_once_two_episodes_are_loaded(warm_up):
    """Every episode but the first two to enter the pass is held back from loading until the first batch is out:
    with the warm-up the first batch comes; without it (control) it needs the whole buffer and does not come."""
    import threading

    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline.batches import DecodeAhead, PipelineBatches

    n_eps, per_ep, buffer = 12, 8, 6
    groups = ItemGroups(np.arange(n_eps * per_ep), np.repeat(np.arange(n_eps), per_ep), n_eps)
    # the loads ahead follow the plan's entry order (DecodeAhead), so these two are loaded first
    first_two = _first_entered(plan_windows(groups.counts, 3, 0, buffer, warm_up=8), 2)
    released = threading.Event()

    def load(ep):
        if ep not in first_two:
            released.wait(30)
        return {"ep": ep}

    cache = LoadOnceLRU(load, capacity=n_eps)
    decode = DecodeAhead(cache.load_ahead, threads=2, ahead=4)

    def collate(idx):
        for ep in np.unique(idx // per_ep):
            cache.get(int(ep))
        return {"index": torch.as_tensor(idx)}

    plan = SamplingPlan(batch_size=8, num_workers=2)
    source = PipelineBatches(
        groups, collate, plan, seed=3, shuffle_buffer=buffer, prefetch=2, decode_ahead=decode, warm_up=warm_up
    )
    out = []
    try:
        thread = threading.Thread(target=lambda: out.append(next(source.batches(0))), daemon=True)
        thread.start()
        thread.join(3)
        came = bool(out)
    finally:
        released.set()
        thread.join(30)
        source.shutdown()
    assert came == warm_up
    assert set((out[0]["index"].numpy() // per_ep).tolist()) <= set(first_two) or not warm_up


@pytest.mark.parametrize("held", [True, False])
def test_later_batches_wait_for_the_first_batch_of_a_start(held, monkeypatch):
    """The threads assembling later batches load nothing until the first batch of a start is assembled (at 480p
    they decoded their own units beside the first batch's on two cores). Control: without the hold the second
    batch starts while the first is still being assembled."""
    import threading
    import time

    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline import batches as pipeline_batches

    if not held:
        monkeypatch.setattr(pipeline_batches.FirstBatchFirst, "enter", lambda self, pairs: False)
    n_eps, per_ep = 6, 8
    groups = ItemGroups(np.arange(n_eps * per_ep), np.repeat(np.arange(n_eps), per_ep), n_eps)
    spans, lock = [], threading.Lock()

    def collate(idx):
        start = time.perf_counter()
        time.sleep(0.3 if not spans else 0.05)
        with lock:
            spans.append((start, time.perf_counter(), idx.copy()))
        return {"index": torch.as_tensor(idx)}

    for start in (0, 2):  # a start at another position holds for its own first batch
        spans.clear()
        source = pipeline_batches.PipelineBatches(
            groups, collate, SamplingPlan(batch_size=8, num_workers=2), seed=3, shuffle_buffer=3, prefetch=2
        )
        try:
            got = list(itertools.islice(source.batches(0, start), 3))
        finally:
            source.shutdown()
        first = groups.indices(source.plan_of(0)[start * 8 : start * 8 + 8])
        assert np.array_equal(got[0]["index"].numpy(), first)
        first_span = next(s for s in spans if np.array_equal(s[2], first))
        others = [s for s in spans if s is not first_span]
        assert others
        assert all(s[0] >= first_span[1] for s in others) == held, (start, spans)


def test_passes_follow_each_other_without_a_reset_and_any_other_position_resets():
    """An endless pipeline (every episode cached) runs from pass to pass: a pass asked for where the last one ended
    is not reset (a reset stopped the threads and dropped what was prefetched: 0.2-0.35 s of a 10-batch 480p pass).
    A pass abandoned part-way, a resumed position or a failed batch resets it, and every pass serves its own plan
    exactly (the control: the plan of another pass differs). Not endless (a smaller cache), each pass resets."""
    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline.batches import PipelineBatches

    n_eps, per_ep = 6, 5
    groups = ItemGroups(np.arange(n_eps * per_ep), np.repeat(np.arange(n_eps), per_ep), n_eps)
    fail_at = set()

    def collate(idx):
        if tuple(idx.tolist()) in fail_at:
            raise ValueError("bad batch")
        return idx.copy()

    plan = SamplingPlan(batch_size=4, num_workers=2)
    source = PipelineBatches(groups, collate, plan, seed=5, shuffle_buffer=2, endless=True)
    resets = []
    reset = source.root.reset
    source.root.reset = lambda *a: resets.append(1) or reset(*a)

    def expected(epoch, start=0):
        plan = source.plan_of(epoch)
        return [groups.indices(plan[b * 4 : (b + 1) * 4]).tolist() for b in range(start, len(source))]

    try:
        passes = [[b.tolist() for b in source] for _ in range(3)]
        assert passes == [expected(e) for e in range(3)] and len(resets) == 1
        assert expected(0) != expected(1)  # the control: passes differ, so a pass served from the wrong plan shows
        it = iter(source)  # pass 3, abandoned after two batches: pass 4 starts from a reset at its first batch
        assert [next(it).tolist(), next(it).tolist()] == expected(3)[:2]
        del it
        assert [b.tolist() for b in source] == expected(4) and len(resets) == 2
        fail_at.add(tuple(expected(8)[1]))  # before pass 7: pass 8's first batches are assembled during its end
        source.load_state_dict({"epoch": 7, "batch": 3})  # a resumed position
        assert [b.tolist() for b in source] == expected(7, 3) and len(resets) == 3
        it = iter(source)
        assert next(it).tolist() == expected(8)[0]
        with pytest.raises(ValueError, match="bad batch"):
            next(it)
        fail_at.clear()
        source.load_state_dict({"epoch": 8, "batch": 1})  # the failed batch again: from a reset, not the one after
        assert [b.tolist() for b in source] == expected(8, 1) and len(resets) == 4
    finally:
        source.shutdown()
    # not endless (an episode cache smaller than the dataset): the same passes, each from a reset
    per_pass = PipelineBatches(groups, collate, plan, seed=5, shuffle_buffer=2)
    reset = per_pass.root.reset
    per_pass.root.reset = lambda *a: resets.append(1) or reset(*a)
    try:
        assert [[b.tolist() for b in per_pass] for _ in range(3)] == [expected(e) for e in range(3)]
        assert len(resets) == 4 + 3
    finally:
        per_pass.shutdown()


def test_an_interrupt_inside_the_pipeline_resets_the_position_so_no_batch_is_skipped():
    """A reviewer's reading: Ctrl-C landing in the pipeline after it took a batch from its queue lost that batch,
    and the pass asked for again at the same position continued the running pipeline (no reset), serving the batch
    after the lost one in its place. The interrupted position now starts from a reset: every batch as planned.
    Control: without the interrupt, the pass continues without a reset."""
    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline.batches import PipelineBatches

    groups = ItemGroups(np.arange(30), np.repeat(np.arange(6), 5), 6)
    plan4 = SamplingPlan(batch_size=4, num_workers=2)
    source = PipelineBatches(groups, lambda idx: idx.copy(), plan4, seed=5, shuffle_buffer=2, endless=True)
    resets = []
    reset = source.root.reset
    source.root.reset = lambda *a: resets.append(1) or reset(*a)
    plan = source.plan_of(0)
    expected = [groups.indices(plan[b * 4 : (b + 1) * 4]).tolist() for b in range(len(source))]

    class Interrupting:
        """The pipeline's root, taking one batch and raising KeyboardInterrupt at the third call (once)."""

        def __init__(self, root):
            self.root, self.calls = root, 0

        def __next__(self):
            self.calls += 1
            if self.calls == 3:
                next(self.root)  # taken from the queue, never returned
                raise KeyboardInterrupt
            return next(self.root)

        def __getattr__(self, name):
            return getattr(self.root, name)

    try:
        real = source.root
        source.root = Interrupting(real)
        it = source.batches(0)
        assert [next(it).tolist(), next(it).tolist()] == expected[:2]
        with pytest.raises(KeyboardInterrupt):
            next(it)
        source.root = real
        again = [b.tolist() for b in source.batches(0, 2)]  # the same position, asked for again
        assert again == expected[2:] and len(resets) == 2  # from a reset: nothing skipped
    finally:
        source.shutdown()


@pytest.mark.parametrize("decode_ahead", [False, True])
def test_a_pipeline_nobody_holds_stops_its_threads_and_frees_its_dataset(decode_ahead):
    """An endless pipeline's threads never run out of work, and they hold the dataset (through ``collate``) and
    the batches they assembled ahead: once nobody holds the pipeline (its DataLoader dropped) they must stop, and
    the dataset be freed, instead of both living until the process ends. torchdata's iterators stop their threads
    when they are collected, which holds only while nothing the threads reach refers back to the pipeline (an
    assembling function that captured it would keep it alive for ever). With loads ahead (``video_stream``'s
    decoding), the next pass's plan was asked through a lambda over the pipeline: every dropped dataset's pipeline
    and six threads stayed (a reviewer's reproduction). The control: while the pipeline is held, its threads run
    and the dataset lives, so the check below sees threads that would have stayed."""
    import gc
    import threading
    import weakref

    from robo_loaders_plugin.core.iteration import SamplingPlan
    from robo_loaders_plugin.pipeline.batches import DecodeAhead, PipelineBatches

    class Data:  # what collate (and the loads ahead) are bound to: a dataset
        def collate(self, idx):
            return idx.copy()

        def load(self, episode):
            return episode

    n_eps, per_ep = 6, 5
    groups = ItemGroups(np.arange(n_eps * per_ep), np.repeat(np.arange(n_eps), per_ep), n_eps)
    data = Data()
    dataset = weakref.ref(data)
    before = set(threading.enumerate())
    source = PipelineBatches(
        groups,
        data.collate,
        SamplingPlan(batch_size=4, num_workers=2),
        seed=5,
        shuffle_buffer=2,
        endless=True,
        decode_ahead=DecodeAhead(data.load, threads=1, ahead=2) if decode_ahead else None,
    )
    it = iter(source)
    next(it)
    del data
    gc.collect()
    started = [t for t in threading.enumerate() if t not in before]
    assert started and all(t.is_alive() for t in started) and dataset() is not None  # the control
    del it, source
    gc.collect()
    for t in started:
        t.join(timeout=30)
    assert not [t.name for t in started if t.is_alive()]
    gc.collect()
    assert dataset() is None


def test_the_threaded_passes_that_keep_their_own_ordered_map_run_without_torchdata():
    """``core.threads.ordered_map`` is kept beside torchdata's ``ParallelMapper(in_order=True)`` because its users
    (the ``indexed`` kind's passes, mixtures) must not require the optional ``[datapipe]`` extra: with torchdata
    blocked as Python blocks an import, they import and serve in order. Control: the batch pipeline, which uses
    ``ParallelMapper``, does not import."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['torchdata'] = None\n"
        "import torch\n"
        "from robo_loaders_plugin.core.iteration import SamplerBatches\n"
        "import robo_loaders_plugin.mixtures.batches\n"
        "dl = torch.utils.data.DataLoader(range(10), batch_size=3)\n"
        "print([b for b in SamplerBatches(lambda idx: idx, dl.batch_sampler, None, num_threads=3)])\n"
        "try:\n"
        "    import robo_loaders_plugin.pipeline.batches\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]", "ModuleNotFoundError"], out


def test_replacement_draws_every_item_uniformly_over_passes():
    """``replacement`` draws uniformly over items, as ``RandomSampler(replacement=True)``: over many passes every item
    is drawn, each about as often (a reviewer's mutation, the last item never drawn, passed every replacement test)."""
    counts = [5, 1, 40, 3, 17]  # ragged: a per-episode-uniform draw would over-serve the short ones
    starts = np.concatenate([[0], np.cumsum(counts)])
    total, passes = int(starts[-1]), 400
    hits = np.zeros(total, dtype=np.int64)
    for epoch in range(passes):
        plan = plan_windows(counts, seed=3, epoch=epoch, buffer_episodes=2, replacement=True)
        hits += np.bincount(starts[plan[:, 0]] + plan[:, 1], minlength=total)
    assert (hits > 0).all(), np.flatnonzero(hits == 0)  # the first and last item of every episode included
    expected = passes  # each item expects `passes` draws (total draws per pass == total)
    chi2 = float(((hits - expected) ** 2 / expected).sum())
    assert chi2 < total + 6 * np.sqrt(2 * total), chi2  # ~6 sigma of a chi-square with total-1 dof
    # negative control: a draw uniform over episodes, then over each one's items, fails the same bound
    rng = np.random.default_rng(0)
    bad = np.zeros(total, dtype=np.int64)
    for _ in range(passes):
        ep = rng.integers(len(counts), size=total)
        bad += np.bincount(starts[ep] + (rng.random(total) * np.take(counts, ep)).astype(int), minlength=total)
    assert float(((bad - expected) ** 2 / expected).sum()) > total + 6 * np.sqrt(2 * total)
