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


def test_l480_blobs_are_the_frames_channels_last_and_the_ceiling_counts_every_thread(monkeypatch):
    import blosc2

    small = dataclasses.replace(sc.WORKLOADS["l480"], frame=(3, 24, 32), batch=4)
    blobs, ratio = sc.camera_blobs(small, per_camera=2)
    assert [len(b) for b in blobs] == [2, 2, 2] and ratio > 0  # noise-dominated tiny frames may not pack
    frame = np.frombuffer(blosc2.decompress(blobs[0][0]), np.uint8)
    assert frame.size == 24 * 32 * 3
    calls = []
    monkeypatch.setattr(sc, "_best", lambda fn, repeat=3: (calls.append(fn()), 0.5)[1])
    for threads in (1, 2):
        assert sc.decompress_ceiling(small, blobs, threads, 3, put_back=True) == threads * 3 * small.batch / 0.5
    assert len(calls) == 2


def test_l480_ceiling_puts_the_frames_back_channels_first(monkeypatch):
    # what a batch of the ceiling holds: every frame as LeRobot serves it, (C, H, W); the control: left channels
    # last, the same bytes are not the served frame
    small = dataclasses.replace(sc.WORKLOADS["l480"], frame=(3, 24, 32), batch=1, window=1, arrays=1)
    blobs, _ = sc.camera_blobs(small, per_camera=1)
    import blosc2

    stored = np.frombuffer(blosc2.decompress(blobs[0][0]), np.uint8).reshape(24, 32, 3)
    seen = {}
    real_empty = np.empty

    def spy(shape, dtype):
        a = real_empty(shape, dtype)
        if len(shape) == 6:
            seen.setdefault("out", []).append(a)
        return a

    monkeypatch.setattr(sc.np, "empty", spy)
    monkeypatch.setattr(sc, "_best", lambda fn, repeat=3: (fn(), 1.0)[1])
    sc.decompress_ceiling(small, blobs, 1, 1, put_back=True)
    assert np.array_equal(seen["out"][-1][0, 0, 0], stored.transpose(2, 0, 1))
    sc.decompress_ceiling(small, blobs, 1, 1, put_back=False)
    assert not np.array_equal(seen["out"][-1][0, 0, 0], stored.transpose(2, 0, 1))
