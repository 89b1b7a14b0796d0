"""Window rules as index arrays against a per-sample reference written from the frameworks' documented rules."""

import numpy as np
import pytest

from robo_loaders_plugin.windows.lerobot import DeltaWindows, RowMap
from robo_loaders_plugin.windows.robomimic import SequenceOptions, SequenceSetupError, SequenceWindows


def reference_sequence(lengths, F, S, pad_fs, pad_seq):
    """SequenceDataset 0.3.0, sample by sample: (demo, [positions of the T = F-1+S steps]) with edge repeats."""
    out = []
    for d, L in enumerate(lengths):
        n = L - (0 if pad_fs else F - 1) - (0 if pad_seq else S - 1)
        n = max(n, 1) if pad_seq else n
        for k in range(n):
            i = k + (0 if pad_fs else F - 1)
            window = list(range(max(0, i - (F - 1)), min(L, i + S)))
            begin_pad = max(0, F - 1 - i)
            end_pad = max(0, i + S - L)
            out.append(
                (
                    d,
                    [window[0]] * begin_pad + window + [window[-1]] * end_pad,
                    [False] * begin_pad + [True] * len(window) + [False] * end_pad,
                )
            )
    return out


@pytest.mark.parametrize(
    "F,S,pad_fs,pad_seq",
    [
        (1, 10, True, True),
        (3, 5, False, True),
        (2, 4, True, False),
        (4, 8, False, False),
        (10, 1, True, True),
        (1, 60, True, True),
    ],
)
def test_sequence_windows_match_the_per_sample_reference(F, S, pad_fs, pad_seq):
    shortest = 1 if pad_seq and pad_fs else (F - 1) * (not pad_fs) + (S - 1) * (not pad_seq) + 1
    lengths = [12, 40, max(7, shortest), 25, shortest]
    ref = reference_sequence(lengths, F, S, pad_fs, pad_seq)
    w = SequenceWindows(
        lengths,
        SequenceOptions(
            obs_keys=(), dataset_keys=(), frame_stack=F, seq_length=S, pad_frame_stack=pad_fs, pad_seq_length=pad_seq
        ),
    )
    assert len(w) == len(ref)
    idx = np.arange(len(ref))
    ep, raw, pos = w.locate(idx)
    mask = (raw >= 0) & (raw < np.asarray(lengths)[ep][:, None])
    for i, (d, positions, real) in enumerate(ref):
        assert ep[i] == d and pos[i].tolist() == positions and mask[i].tolist() == real, i
    k = idx - w.first[ep]
    assert np.array_equal(w.index(ep, k), idx)  # (demo, window) -> sample index round trip
    assert np.array_equal(w.check([-1, 0]), [len(ref) - 1, 0])
    with pytest.raises(IndexError):
        w.check([len(ref)])


def test_goal_is_the_last_next_obs_sequence_dataset_can_index():
    w = SequenceWindows(
        [10, 20], SequenceOptions(obs_keys=(), dataset_keys=(), seq_length=4, pad_seq_length=False, goal_mode="last")
    )
    assert w.goal_positions(np.array([0, 1])).tolist() == [[6], [16]]  # L - (S - 1) - 1


def test_demos_too_short_are_refused_like_robomimic_asserts():
    with pytest.raises(SequenceSetupError, match="shorter than frame_stack=5"):
        SequenceWindows([3], SequenceOptions(obs_keys=(), dataset_keys=(), frame_stack=5, pad_frame_stack=False))
    with pytest.raises(SequenceSetupError, match="too short"):
        SequenceWindows([3], SequenceOptions(obs_keys=(), dataset_keys=(), seq_length=5, pad_seq_length=False))


def test_lerobot_delta_windows_clamp_into_the_episode_and_mark_padding():
    """Two episodes (absolute index 100..104 and 200..202), deltas -2..+2: rows clamp into the row's own episode."""
    abs_index = np.array([100, 101, 102, 103, 104, 200, 201, 202])
    start = np.array([100] * 5 + [200] * 3)
    end = np.array([105] * 5 + [203] * 3)
    w = DeltaWindows(abs_index, start, end, {"action": [-2, -1, 0, 1, 2]})
    rows, pad = w.locate(np.arange(8))
    for r in range(8):
        target = abs_index[r] + np.arange(-2, 3)
        clamped = np.clip(target, start[r], end[r] - 1)
        assert rows["action"][r].tolist() == (r + clamped - abs_index[r]).tolist()
        assert pad["action_is_pad"][r].tolist() == ((target < start[r]) | (target >= end[r])).tolist()
    unit, steps = RowMap([5, 3]).locate(rows["action"], np.arange(8))
    assert unit.tolist() == [0] * 5 + [1] * 3 and steps.min() == 0 and steps[5:].max() == 2


def test_lerobot_keys_with_the_same_offsets_share_their_rows_and_keep_their_own_pad_masks():
    """Shared rows let a batch gather a camera and ``observation.state`` in one call; each key's pad mask stays its
    own tensor in the batch (LeRobot's items hold one per key)."""
    abs_index, start, end = np.arange(8), np.array([0] * 5 + [5] * 3), np.array([5] * 5 + [8] * 3)
    w = DeltaWindows(abs_index, start, end, {"state": [-1, 0], "cam": [-1, 0], "action": [0, 1, 2]})
    rows, pad = w.locate(np.arange(8))
    assert rows["state"] is rows["cam"] and rows["action"] is not rows["state"]
    assert np.array_equal(pad["state_is_pad"], pad["cam_is_pad"]) and pad["state_is_pad"] is not pad["cam_is_pad"]
    alone, alone_pad = DeltaWindows(abs_index, start, end, {"cam": [-1, 0]}).locate(np.arange(8))
    assert np.array_equal(rows["cam"], alone["cam"]) and np.array_equal(pad["cam_is_pad"], alone_pad["cam_is_pad"])
    # control: offsets that differ in one place are different windows, not shared
    rows, _ = DeltaWindows(abs_index, start, end, {"state": [-1, 0], "cam": [-2, 0]}).locate(np.arange(8))
    assert rows["state"] is not rows["cam"] and not np.array_equal(rows["state"], rows["cam"])


def test_joined_windows_locate_each_datasets_rows_as_its_own_windows_do():
    """``DeltaWindows.joined``/``RowMap.joined`` (a LeRobot mixture's joined batches): the joined windows of two
    datasets (each in its own absolute index space, one with an episode selection) find every row's window and pad
    mask as that dataset's own windows, its rows shifted by the first's; control: the datasets joined in the other
    order do not."""
    deltas = {"action": np.arange(-2, 5), "observation.state": np.array([-1, 0])}

    def windows(runs, first, ep_from, ep_to):
        rm = RowMap(runs)
        return rm, DeltaWindows.of_runs(rm, np.array(first), np.array(ep_from), np.array(ep_to), deltas)

    rm_a, a = windows([5, 3], [0, 5], [0, 5], [5, 8])
    rm_b, b = windows([4, 6], [20, 40], [20, 40], [24, 46])  # episodes 3 and 7 of a larger dataset
    joined = DeltaWindows.joined([a, b], deltas)
    rows = RowMap.joined([rm_a, rm_b])
    assert len(rows) == 18 and rows.run_lengths.tolist() == [5, 3, 4, 6]
    for own, shift, n in ((a, 0, 8), (b, 8, 10)):
        idx = np.arange(n)
        mine, pads = own.locate(idx)
        theirs, their_pads = joined.locate(idx + shift)
        for key in deltas:
            assert np.array_equal(theirs[key], mine[key] + shift), key
            assert np.array_equal(their_pads[f"{key}_is_pad"], pads[f"{key}_is_pad"]), key
    swapped = DeltaWindows.joined([b, a], deltas)  # control: the other order finds other windows
    assert not np.array_equal(
        swapped.locate(np.arange(8))[1]["action_is_pad"], a.locate(np.arange(8))[1]["action_is_pad"]
    )
    with pytest.raises(ValueError, match="per run"):
        DeltaWindows.joined([DeltaWindows(np.arange(3), np.zeros(3), np.full(3, 3), deltas)], deltas)
