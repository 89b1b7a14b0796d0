"""benchmarks/scale_ceiling.py: the workloads' byte counts and the gathers that measure the copy ceiling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from benchmarks import scale_ceiling as sc


def test_each_workload_copies_the_bytes_its_batches_hold():
    # W1: 2 cameras 84x84, windows of 10 (no next_obs); W2: 2 cameras, 2 frames; R240: both cameras 240x240
    assert sc.WORKLOADS["w1"].sample_bytes == 2 * 10 * 84 * 84 * 3
    assert sc.WORKLOADS["w2"].sample_bytes == 2 * 2 * 3 * 84 * 84
    assert sc.WORKLOADS["r240"].sample_bytes == sc.SAMPLE_BYTES == 10 * 2 * 240 * 240 * 3


@pytest.mark.parametrize("threads", [None, 1])
@pytest.mark.parametrize("reuse", [False, True])
def test_gather_counts_samples_over_every_array(threads, reuse, monkeypatch):
    small = dataclasses.replace(sc.WORKLOADS["w1"], rows=64, frame=(4, 4, 3), batch=8)
    calls = []
    monkeypatch.setattr(sc, "_best", lambda fn, repeat=3: (calls.append(fn()), 0.5)[1])
    data = [np.ones((small.rows, *small.frame), np.uint8) for _ in range(small.arrays)]
    if threads is None and reuse:
        reuse = False  # numpy gathers have no reused variant
    assert sc.gather(data, 10, False, threads, small, reuse) == 10 * small.batch / 0.5
    assert len(calls) == 1
