"""``lerobot.compat.sampler_batches``: lerobot-train's ``BatchSampler(EpisodeAwareSampler)`` pass computed with numpy
gives exactly the index batches, and leaves the sampler's state exactly as, iterating LeRobot's own sampler."""

from __future__ import annotations

import itertools

import pytest
import torch
from lerobot.datasets import EpisodeAwareSampler

from robo_loaders_plugin.lerobot import compat

FROM = [0, 37, 90, 91, 160, 400]
TO = [37, 90, 91, 160, 400, 433]


def make(shuffle=True, seed=7, episodes=None, drop_last_frames=0, drop_first_frames=0, mapping=False):
    absolute = None
    if mapping:  # a dataset of some episodes: absolute frame -> row of the loaded subset
        used = episodes if episodes is not None else range(len(FROM))
        frames = [f for e in sorted(used) for f in range(FROM[e], TO[e])]
        absolute = {f: i for i, f in enumerate(frames)}
    return EpisodeAwareSampler(
        FROM,
        TO,
        episode_indices_to_use=episodes,
        drop_n_first_frames=drop_first_frames,
        drop_n_last_frames=drop_last_frames,
        shuffle=shuffle,
        seed=seed,
        absolute_to_relative_idx=absolute,
    )


CASES = [
    dict(),
    dict(shuffle=False),
    dict(seed=1000, drop_last_frames=7),
    dict(episodes=[1, 3, 4], mapping=True),
    dict(drop_first_frames=2, drop_last_frames=3, episodes=[0, 2, 4, 5], mapping=True),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("batch_size,drop_last", [(64, False), (64, True), (1, False), (500, False)])
def test_passes_equal_lerobots_own_iteration(case, batch_size, drop_last):
    ours, theirs = make(**case), make(**case)
    for s in (ours, theirs):  # a resumed run: positioned mid-pass before the first iteration
        s.load_state_dict({"epoch": 2, "start_index": 45})
    ours_b = torch.utils.data.BatchSampler(ours, batch_size, drop_last)
    theirs_b = torch.utils.data.BatchSampler(theirs, batch_size, drop_last)
    for _ in range(3):
        fast = compat.sampler_batches(ours_b)
        assert fast is not None
        assert list(fast) == [list(b) for b in theirs_b]
        assert ours.state_dict() == theirs.state_dict()


def test_the_state_advances_at_the_first_batch_as_the_batch_sampler_does():
    ours, theirs = make(), make()
    fast = compat.sampler_batches(torch.utils.data.BatchSampler(ours, 8, False))
    native = iter(torch.utils.data.BatchSampler(theirs, 8, False))
    assert ours.state_dict() == theirs.state_dict() == {"epoch": 0, "start_index": 0}
    assert next(fast) == next(native)
    assert ours.state_dict() == theirs.state_dict() == {"epoch": 1, "start_index": 0}


def test_the_comparison_can_fail():
    # the control: a pass of the next epoch (what an off-by-one in the state would serve) is a different order
    ours, theirs = make(), make()
    theirs.set_epoch(1)
    fast = compat.sampler_batches(torch.utils.data.BatchSampler(ours, 64, False))
    assert list(fast) != [list(b) for b in torch.utils.data.BatchSampler(theirs, 64, False)]


def test_other_samplers_are_iterated_as_they_are():
    assert compat.sampler_batches(torch.utils.data.BatchSampler(range(10), 4, False)) is None
    assert (
        compat.sampler_batches(torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(10)), 4, False))
        is None
    )

    class Shard(torch.utils.data.BatchSampler):  # accelerate's shards subclass BatchSampler
        pass

    assert compat.sampler_batches(Shard(make(), 4, False)) is None
    assert list(itertools.islice(compat.sampler_batches(torch.utils.data.BatchSampler(make(), 4, False)), 1))
