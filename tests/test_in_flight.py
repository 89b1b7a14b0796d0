"""The batches in flight in every backend's footprint (core.in_flight): the loop the adapter states, how many
batches each kind of backend keeps alive, and where each plan counts them, on synthetic sizes. Each check has its
control: the same plan without the batches. A sample's bytes against what the native loaders serve:
integration_tests/test_batches_in_flight.py."""

import types

import numpy as np
import pytest
import torch
from fake_machine import patch_available

from robo_loaders_plugin.backends.compressed_cache.placement import compressed_cache_plan
from robo_loaders_plugin.backends.gpu_resampler import tiers
from robo_loaders_plugin.core.data_size import DataSize
from robo_loaders_plugin.core.footprint import HEADROOM, Available
from robo_loaders_plugin.core.in_flight import (
    BatchesInFlight,
    TrainingLoop,
    current_training_loop,
    indexed_in_flight,
    training_loop,
)
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.pipeline.buffer_plan import buffer_plan
from robo_loaders_plugin.sdk.placement import planned

MB = 10**6
GB = 10**9


def test_the_adapter_states_the_loop_and_indexed_backends_count_two_ahead_per_worker_and_one_held():
    assert current_training_loop() is None
    unknown = indexed_in_flight(1000)
    assert unknown.host_bytes == 0 and "not counted: the training script sets their size" in unknown.describe()
    with training_loop(TrainingLoop(batch_size=8, workers=3)):
        flying = indexed_in_flight(1000)
        assert (flying.count, flying.batch_bytes, flying.host_bytes) == (7, 8000, 56_000)
        assert flying.describe() == (
            "7 batches in flight (2 ahead per thread or DataLoader worker (3) + 1 held by training; 56.0 kB)"
        )
        with training_loop(None):  # a nested factory call that does not know the loop counts nothing
            assert indexed_in_flight(1000).host_bytes == 0
        assert current_training_loop() == TrainingLoop(8, 3)
    assert current_training_loop() is None
    # num_workers=0: batches built in the training process, counted as one worker
    assert indexed_in_flight(10, TrainingLoop(batch_size=4, workers=0)).count == 3


def _size(episodes=10, length=100, frame=1_000_000, other=100):
    return DataSize(np.full(episodes, length, np.int64), {"cam": frame}, other)


def _machine(host):
    return Available(
        host_bytes=host, shm_bytes=20 * GB, shm_dir="/dev/shm", shm_is_ram=True, disk_bytes=50 * GB, disk_dir="/d"
    )


def test_compressed_cache_counts_its_batches_in_host_memory_beside_the_store():
    """A RAM store that fits the host's memory alone but not with the batches beside it goes to disk, saying why;
    the control (no batches) stays in RAM. The batches are in the footprint and its bound, not in what a mixture
    keeps held beside the next component."""
    s = _size()  # 1 GB of frames
    batches = BatchesInFlight(5, 100 * MB, "2 ahead per thread or DataLoader worker (2) + 1 held by training")

    def plan(with_batches):
        return compressed_cache_plan(
            s,
            cache_dir=None,
            max_memory=None,
            codec="lz4hc",
            workers=2,
            option_prefix="p",
            available=_machine(int(1.3 * GB)),
            batches=batches if with_batches else None,
        )

    alone, beside = plan(False), plan(True)
    assert alone.in_ram and alone.footprint.host_bytes == s.other_bytes
    assert not beside.in_ram and "beside the batches in flight (500.0 MB)" in beside.spilled, beside.spilled
    assert beside.footprint.host_bytes == s.other_bytes + 500 * MB
    assert beside.footprint.bound.endswith("; plus " + batches.describe()), beside.footprint.bound
    kept = planned(beside, _machine(GB), ["x"], batches)
    assert kept.footprint.host_bytes - kept.kept.host_bytes == 500 * MB


def test_gpu_resampler_keeps_its_batches_out_of_the_default_budget_and_counts_them_on_top_of_a_given_one(
    monkeypatch, tmp_path
):
    """Within the default budget (90% of the available memory) the batches in flight, larger here than the episode
    being read while filling, are kept out of the tiers: fewer episodes held raw than without them (the control),
    and the footprint (tiers plus batches) within the budget. A given max_memory is the data's budget: the same
    tiers as without batches, the batches on top of it in the footprint and the bound."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path))
    s = _size(episodes=10, length=100, frame=10_000, other=10)  # 1 MB of frames per episode
    host = int(12 * MB / HEADROOM) + 1  # a default budget of 12 MB
    patch_available(monkeypatch, host)
    batches = BatchesInFlight(3, MB, "2 ahead per thread or DataLoader worker (1) + 1 held by training")
    opts = types.SimpleNamespace(max_memory=None, max_device_memory=None)
    cpu = torch.device("cpu")
    control, _ = tiers.plan_tiers_checked(s, cpu, opts, "kw")
    plan, limit = tiers.plan_tiers_checked(s, cpu, opts, "kw", batches=batches)
    assert control.raw == 9 and plan.raw == 6 and limit == int(HEADROOM * host) - 3 * MB
    assert 3 * MB <= plan.footprint.host_bytes <= int(HEADROOM * host)
    assert "less the batches in flight: 3 batches in flight (" in plan.footprint.bound, plan.footprint.bound

    given = types.SimpleNamespace(max_memory=8 * MB, max_device_memory=None)
    control, _ = tiers.plan_tiers_checked(s, cpu, given, "kw")
    plan, _ = tiers.plan_tiers_checked(s, cpu, given, "kw", batches=batches)
    assert plan.raw == control.raw and plan.footprint.host_bytes > 8 * MB
    tiers_only = control.footprint.host_bytes - tiers.BUILD_EPISODES * MB  # the control: tiers and filling
    assert plan.footprint.host_bytes == tiers_only + 3 * MB
    assert plan.footprint.bound.endswith(f"; plus {batches.describe()}"), plan.footprint.bound
    held = tiers.planned_tiers(s, cpu, given, "kw", ["x"], None, batches)
    assert held.kept.host_bytes == tiers_only


def test_gpu_resampler_on_cuda_counts_its_batches_in_gpu_memory(monkeypatch):
    """On CUDA the batches are gathered into GPU memory: counted there, not in the host's (the control: the host
    side is the plan without batches). The plan is made from the sizes alone: no GPU is touched."""
    s = _size(episodes=4, length=100, frame=10_000, other=10)
    patch_available(monkeypatch, 10 * GB, device=10 * GB)
    batches = BatchesInFlight(3, 2 * MB, "2 ahead per thread or DataLoader worker (1) + 1 held by training")
    opts = types.SimpleNamespace(max_memory=None, max_device_memory=None)
    cuda = torch.device("cuda:0")
    control, _ = tiers.plan_tiers_checked(s, cuda, opts, "kw")
    plan, _ = tiers.plan_tiers_checked(s, cuda, opts, "kw", batches=batches)
    assert plan.device == control.device == 4
    assert plan.footprint.device_bytes == control.footprint.device_bytes + 6 * MB
    assert plan.footprint.host_bytes == control.footprint.host_bytes
    assert plan.footprint.bound.endswith(" on cuda:0"), plan.footprint.bound
    held = tiers.planned_tiers(s, cuda, opts, "kw", ["x"], None, batches)
    assert held.kept.device_bytes == control.footprint.device_bytes


@pytest.mark.parametrize("threads", [None, 3])
def test_a_pipeline_buffer_counts_its_batches_but_a_mixture_keeps_only_its_units(threads):
    units = np.full(4, 1000, np.int64)
    plan = buffer_plan(
        units,
        cache_memory=None,
        cache_episodes=4,
        shuffle_buffer=2,
        shuffle_given=False,
        batch_bytes=100,
        prefetch=2,
        option_prefix="p",
        threads=threads,
    )
    flying = (2 + 1 + 1) * 100 if threads is None else (2 + 3 + 1) * 100
    assert plan.in_flight.host_bytes == flying and plan.footprint.host_bytes == 4000 + flying
    assert f"{format_bytes(flying)})" in plan.footprint.bound
    planned = plan.planned(_machine(GB), ["x"])
    assert planned.footprint.host_bytes == 4000 + flying and planned.kept.host_bytes == 4000
