"""Device-resident frame source (gpu_resampler): filling, gathering, placement and device choice, on the CPU."""

import re

import numpy as np
import pytest
import torch

from robo_loaders_plugin.backends.gpu_resampler.tensors import TensorFrames, training_device
from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.frames.base import FieldInfo, gather, gather_at, gather_many


def test_gather_equals_the_arrays_and_checks_what_it_is_filled_with():
    rng = np.random.default_rng(0)
    eps = [
        {"a": rng.normal(size=(L, 2)).astype(np.float32), "cam": rng.integers(0, 255, (L, 3, 4, 4), np.uint8)}
        for L in (5, 3, 7)
    ]
    infos = {"a": FieldInfo(np.dtype(np.float32), (2,), False), "cam": FieldInfo(np.dtype(np.uint8), (3, 4, 4), True)}
    frames = TensorFrames([5, 3, 7], infos, torch.device("cpu"), torch.device("cpu"))
    assert TensorFrames.nbytes([5, 3, 7], infos) == 15 * (8 + 48)
    for i, e in enumerate(eps):
        frames.fill(i, e)
    ep, steps = np.array([2, 0, 1]), np.array([[6, 6, 0], [0, 1, 4], [2, 1, 0]])
    for k in infos:
        got = gather(frames, k, ep, steps)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.from_numpy(eps[0][k]).dtype
        want = np.stack([eps[e][k][s] for e, s in zip(ep, steps)])
        assert np.array_equal(got.numpy(), want)
    blended = gather_at(frames, "a", np.array([1]), np.array([[0.25, 1.5]]), "linear")
    torch.testing.assert_close(blended[0, 1], torch.from_numpy((eps[1]["a"][1] + eps[1]["a"][2]) / 2))
    from robo_loaders_plugin.backends.gpu_resampler.tensors import EpisodeFieldMismatch

    with pytest.raises(EpisodeFieldMismatch, match=r"episode 0: field 'a' is float64\(2,\), expected float32\(2,\)"):
        frames.fill(0, {"a": eps[0]["a"].astype(np.float64), "cam": eps[0]["cam"]})


def test_gather_fields_reads_each_field_as_gather_does_and_checks_the_rows_once():
    rng = np.random.default_rng(2)
    infos = {"a": FieldInfo(np.dtype(np.float32), (2,), False), "cam": FieldInfo(np.dtype(np.uint8), (3, 4, 4), True)}
    frames = TensorFrames([5, 3, 7], infos, torch.device("cpu"), torch.device("cpu"))
    for i, n in enumerate((5, 3, 7)):
        frames.fill(
            i,
            {
                "a": rng.normal(size=(n, 2)).astype(np.float32),
                "cam": rng.integers(0, 255, (n, 3, 4, 4)).astype(np.uint8),
            },
        )
    ep, steps = np.array([2, 0, 1]), np.array([[6, 5], [0, 4], [2, 1]])
    got = gather_many(frames, ["cam", "a"], ep, steps)
    assert list(got) == ["cam", "a"]
    for k in infos:
        assert got[k].shape == (3, 2) + infos[k].shape and np.array_equal(got[k].numpy(), gather(frames, k, ep, steps))
    # the one check guards every field: numpy's take (mode="clip") would serve the last held row instead
    with pytest.raises(IndexError, match=re.escape("rows 15..15 outside the 15 rows held")):
        gather_many(frames, ["a", "cam"], np.array([2]), np.array([7]))


def test_device_choice_errors():
    assert training_device("auto", "w", prefer_cuda=False).type == "cpu"
    assert training_device("cpu", "w").type == "cpu"
    with pytest.raises(BackendOptionError, match=re.escape("w.device must be")):
        training_device("tpu", "w")
    if not torch.cuda.is_available():
        assert training_device("auto", "w").type == "cpu"
        with pytest.raises(BackendOptionError, match=re.escape("w.device='cuda:1' but torch sees no CUDA GPU")):
            training_device("cuda:1", "w")


def test_joined_reads_number_parts_end_to_end_and_place_steps_in_rows():
    """The two helpers every joined read (``frames.base.JoinedField``) and ``copy_windows`` lay out a batch with."""
    from robo_loaders_plugin.frames.base import part_offsets, step_slots

    assert part_offsets([3, 0, 2]).tolist() == [0, 3, 3, 5] and part_offsets([]).tolist() == [0]
    assert part_offsets([3, 0, 2]).dtype == np.int64
    flat = np.arange(4 * 3 * 2).reshape(4, 3, 2)  # a (N=4, T=3, 2) batch
    slots = step_slots([2, 0], 3)
    assert slots.tolist() == [6, 7, 8, 0, 1, 2]
    np.testing.assert_array_equal(flat.reshape(12, 2)[slots], np.concatenate([flat[2], flat[0]]))
    assert step_slots(np.zeros(0, np.int64), 3).size == 0


def test_copy_windows_copies_a_slice_only_of_steps_that_follow_one_another():
    """A window clamped at an episode's edge repeats steps: ``7, 10, 11, 11, 11`` spans 4 steps as ``7..11`` does,
    and was copied as that slice (a reviewer's reproduction through ``video_stream``). Control: a run is copied
    right too."""
    from robo_loaders_plugin.frames.base import ROW_COPY_BYTES, copy_windows

    values = np.repeat(np.arange(12, dtype=np.uint8)[:, None], ROW_COPY_BYTES, 1)  # step r: 256 bytes of r
    local = np.array([[7, 10, 11, 11, 11], [0, 0, 2, 5, 6], [3, 4, 5, 6, 7]])
    out = np.zeros((3, 5, ROW_COPY_BYTES), dtype=np.uint8)
    copy_windows(values, local, out, np.arange(3))
    np.testing.assert_array_equal(out, values[local])
