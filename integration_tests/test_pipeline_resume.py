"""lerobot-train's ``--resume`` through the backends that assemble batches in a pipeline (``datapipe``,
``video_stream``) when the episode cache holds fewer units than the dataset and the shuffle buffer is fitted to it
(``pipeline.batches.fit_to_cache``): the resumed pass must be the rest of the interrupted run's pass, every frame
served once, whatever pass the run resumes in and however many workers it resumes with.

Why a dataset of its own: the fit changes the shuffle buffer only when many short units enter per batch (60
episodes of 4-12 frames, batches of 32); the shared fixtures' five long episodes never need it.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import REPO, serve

from robo_loaders_plugin.lerobot.integration import cycle
from robo_loaders_plugin.testing import episode_aware_sampler

# the episode cache's bytes: ~14 of the 60 units (the fit shrinks the default shuffle buffer to make room)
CACHE_MEMORY = {"datapipe": 400_000, "video_stream": 400_000}
MODE = {"datapipe": "png", "video_stream": "h264"}
BATCH = 32


@pytest.fixture(scope="module")
def many_short(tmp_path_factory):
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    lengths = np.random.default_rng(0).integers(4, 13, size=60).tolist()
    base = tmp_path_factory.mktemp("many_short")
    return {
        mode: write_lerobot_dataset(
            base / mode, episode_lengths=lengths, cameras=1, image_size=(16, 32), mode=mode, seed=2, progress=False
        )
        for mode in ("png", "h264")
    }


def _stream(ds, nat, workers, state=None, seed=3):
    sampler = episode_aware_sampler(nat, seed=seed)
    if state:
        sampler.load_state_dict(state)  # lerobot-train's --resume: compute_sampler_state(step) -> load_state_dict
    return cycle(torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers))


def _pass_served(before, after):
    served = collections.Counter(int(i) for batch in before + after for i in batch)
    return sorted(i for i, n in served.items() if n > 1), served


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
@pytest.mark.parametrize("epoch,workers_after", [(1, 2), (2, 2), (1, 1), (1, 4)])
def test_a_run_resumed_in_a_later_pass_or_with_other_workers_serves_the_rest_of_its_pass(
    many_short, backend, epoch, workers_after, capsys
):
    """Stopped 3 batches into pass ``epoch`` with 2 workers, resumed there with ``workers_after``: the resumed
    batches are the uninterrupted run's, and the pass serves every frame once. Before, the resumed run fitted its
    shuffle buffer on the checkpoint's pass (pass 0 has the warm-up) and for its own number of workers: another
    order, 6 frames twice and 6 never in the resumed pass. Control: resuming another order (another seed) at the
    same offset serves frames twice, so the check can fail."""
    nat = LeRobotDataset(REPO, root=many_short[MODE[backend]])
    ds = serve(backend, nat, cache_memory=CACHE_MEMORY[backend])
    per_pass, stop = -(-len(nat) // BATCH), 3
    run = _stream(ds, nat, 2)
    batches = [next(run)["index"].tolist() for _ in range(per_pass * epoch + stop)]
    assert "units (not" in capsys.readouterr().out  # the fit made the shuffle buffer smaller
    state = {"epoch": epoch, "start_index": stop * BATCH}
    resumed = _stream(ds, nat, workers_after, state)
    rest = [next(resumed)["index"].tolist() for _ in range(per_pass - stop)]
    uninterrupted = [next(run)["index"].tolist() for _ in range(per_pass - stop)]
    assert rest == uninterrupted
    twice, served = _pass_served(batches[-stop:], rest)
    assert twice == [] and sorted(served) == list(range(len(nat)))
    other = _stream(ds, nat, workers_after, state, seed=4)  # control: the rest of another order
    twice, _ = _pass_served(batches[-stop:], [next(other)["index"].tolist() for _ in range(per_pass - stop)])
    assert twice


@pytest.mark.parametrize("backend", ["datapipe", "video_stream"])
def test_a_run_resumed_with_less_memory_free_serves_the_rest_of_its_pass(many_short, backend, monkeypatch):
    """A reviewer's reproduction: with no option given, the episode cache holds the whole dataset when it fits a
    share of the free memory, else the default budget; the shuffle buffer was fitted to that cache, so a run resumed
    on a busier machine fitted a smaller buffer and served the rest of another order (16 frames twice, 16 never). It
    is fitted to the budget the options name now, whatever is free. Scaled down: the default budget is 400 kB (the 1
    GB default against 480p units), the free memory faked. Control: another seed's order at the same offset serves
    frames twice."""
    import dataclasses

    from robo_loaders_plugin.core import footprint
    from robo_loaders_plugin.pipeline import buffer_plan

    monkeypatch.setattr(buffer_plan, "DEFAULT_CACHE_MEMORY", 400_000)
    measure = footprint.Available.measure.__func__

    def free(host_bytes):
        monkeypatch.setattr(
            footprint.Available,
            "measure",
            classmethod(lambda cls, *a, **k: dataclasses.replace(measure(cls, *a, **k), host_bytes=host_bytes)),
        )

    nat = LeRobotDataset(REPO, root=many_short[MODE[backend]])
    per_pass, stop = -(-len(nat) // BATCH), 3
    free(64 << 30)  # the run starts with plenty free: the whole dataset is cached
    run = _stream(serve(backend, nat), nat, 2)
    first = [next(run)["index"].tolist() for _ in range(per_pass)]
    free(2 << 20)  # resumed with 2 MB free: the cache holds what the default budget does
    state = {"epoch": 0, "start_index": stop * BATCH}
    resumed = _stream(serve(backend, nat), nat, 2, state)
    rest = [next(resumed)["index"].tolist() for _ in range(per_pass - stop)]
    assert rest == first[stop:]
    twice, served = _pass_served(first[:stop], rest)
    assert twice == [] and sorted(served) == list(range(len(nat)))
    other = _stream(serve(backend, nat), nat, 2, state, seed=4)  # control
    twice, _ = _pass_served(first[:stop], [next(other)["index"].tolist() for _ in range(per_pass - stop)])
    assert twice
