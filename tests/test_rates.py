"""Rate conversion against a plain numpy reference (np.interp per dimension, hand-written previous/nearest) on
random ragged episodes, edges included; conversion to the recorded rate is the identity."""

import numpy as np
import pytest

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource, gather_at
from robo_loaders_plugin.windows import lerobot as lr
from robo_loaders_plugin.windows import robomimic as rm
from robo_loaders_plugin.windows.rates import resampled_length, resolve_modes

RNG = np.random.default_rng(0)
LENGTHS = [23, 7, 41, 1, 16]


class ArrayFrames(FrameSource):
    def __init__(self, episodes):
        self.episodes = episodes
        self.lengths = np.array([len(next(iter(e.values()))) for e in episodes])

    def info(self, field):
        a = self.episodes[0][field]
        return FieldInfo(a.dtype, a.shape[1:], field == "cam")

    def take(self, field, episodes, steps, out):
        ep = np.broadcast_to(episodes.reshape(episodes.shape + (1,) * (steps.ndim - 1)), steps.shape)
        for i in np.ndindex(steps.shape):
            out[i] = self.episodes[ep[i]][field][steps[i]]


def make_episodes(lengths=LENGTHS):
    return [
        {
            "pos": RNG.normal(size=(L, 3)).astype(np.float32),
            "grip": RNG.integers(0, 2, size=(L,)).astype(np.int64),
            "cam": RNG.integers(0, 255, size=(L, 4, 4, 3)).astype(np.uint8),
        }
        for L in lengths
    ]


def reference_value(x: np.ndarray, p: float, mode: str):
    """x at recorded-step position p (within the episode), by hand."""
    if mode == "linear":
        flat = x.reshape(len(x), -1)
        at = np.arange(len(x))
        return np.array([np.interp(p, at, flat[:, d]) for d in range(flat.shape[1])]).reshape(x.shape[1:])
    if mode == "previous":
        return x[int(np.floor(p + 1e-6))]
    return x[min(int(np.floor(p + 0.5 + 1e-6)), len(x) - 1)]


MODES = {"pos": "linear", "grip": "previous", "cam": "nearest"}


@pytest.mark.parametrize("rate", [3.0, 2.5, 1.7, 0.6])
@pytest.mark.parametrize("F,S,pad_fs,pad_seq", [(1, 5, True, True), (2, 3, False, True), (1, 4, True, False)])
def test_robomimic_windows_at_a_target_rate_equal_the_resampled_reference(rate, F, S, pad_fs, pad_seq):
    """A sample equals SequenceDataset's sample of the demo resampled to the target rate by the reference: its
    ``next_obs`` the observation at the next target step (the demo's final next_obs past its end), its ``dones``
    those of the last recorded step the transition to the next target step covers (a reviewer's reproduction:
    ``next_obs`` was read at the observation's own recorded position, one recorded step ahead, and the demo's last
    done was never served)."""
    lengths = [
        L
        for L in LENGTHS
        if resampled_length(L, rate) >= (F - 1) * (not pad_fs) + (S - 1) * (not pad_seq) + 1
        and (pad_fs or resampled_length(L, rate) >= F)
    ]
    episodes = make_episodes(lengths)
    frames = ArrayFrames(episodes)
    opts = rm.SequenceOptions(
        obs_keys=("pos", "grip", "cam"),
        dataset_keys=("dones",),
        frame_stack=F,
        seq_length=S,
        pad_frame_stack=pad_fs,
        pad_seq_length=pad_seq,
        load_next_obs=True,
    )
    # the sources' fields are named obs/<k>, next_obs/<k> (the next step's, then a final state) and dones
    finals = [{k: RNG.integers(0, 2, size=v.shape[1:]).astype(v.dtype) for k, v in e.items()} for e in episodes]
    dones = [RNG.integers(0, 2, size=len(e["pos"])).astype(np.int64) for e in episodes]
    frames.episodes = [
        {
            **{f"obs/{k}": v for k, v in e.items()},
            **{f"next_obs/{k}": np.concatenate([v[1:], f[k][None]]) for k, v in e.items()},
            "dones": d,
        }
        for e, f, d in zip(episodes, finals, dones)
    ]
    w = rm.SequenceWindows(lengths, opts, rate)
    modes = {f"{p}/{k}": m for k, m in MODES.items() for p in ("obs", "next_obs")} | {"dones": "previous"}
    batch = rm.collate(frames, w, np.arange(len(w)), modes=modes)
    resampled = []
    for e, f, d in zip(episodes, finals, dones):
        L = len(e["pos"])
        steps = range(resampled_length(L, rate))
        states = {k: np.concatenate([v, f[k][None]]) for k, v in e.items()}  # obs, then the final next_obs
        resampled.append(
            {
                **{k: np.stack([reference_value(e[k], j * rate, MODES[k]) for j in steps]) for k in MODES},
                **{
                    f"next/{k}": np.stack([reference_value(states[k], min((j + 1) * rate, L), MODES[k]) for j in steps])
                    for k in MODES
                },
                "dones": np.array([d[max(s for s in range(L) if s < (j + 1) * rate - 1e-6)] for j in steps]),
            }
        )
    i = 0
    for d, e in enumerate(resampled):
        L = len(e["pos"])
        n = L - (0 if pad_fs else F - 1) - (0 if pad_seq else S - 1)
        for k in range(max(n, 1) if pad_seq else n):
            start = k + (0 if pad_fs else F - 1)
            steps = np.clip(np.arange(start - (F - 1), start + S), 0, L - 1)
            for key in MODES:
                for got, want in (
                    (batch["obs"][key][i], e[key][steps].astype(batch["obs"][key].dtype)),
                    (batch["next_obs"][key][i], e[f"next/{key}"][steps].astype(batch["next_obs"][key].dtype)),
                ):
                    if MODES[key] == "linear":
                        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{d}/{k}/{key}")
                    else:
                        assert np.array_equal(got, want), (d, k, key)
            assert np.array_equal(batch["dones"][i], e["dones"][steps]), (d, k, "dones")
            i += 1
    assert i == len(w)


def test_the_recorded_rate_is_the_identity():
    episodes = make_episodes()
    frames = ArrayFrames([{f"obs/{k}": v for k, v in e.items()} for e in episodes])
    opts = rm.SequenceOptions(
        obs_keys=("pos", "grip", "cam"), dataset_keys=(), frame_stack=2, seq_length=4, load_next_obs=False
    )
    modes = {f"obs/{k}": m for k, m in MODES.items()}
    native = rm.collate(frames, rm.SequenceWindows(LENGTHS, opts), np.arange(60))
    same = rm.collate(frames, rm.SequenceWindows(LENGTHS, opts, 20 / 20), np.arange(60), modes=modes)
    assert rm.SequenceWindows(LENGTHS, opts, 20 / 20).recorded(np.arange(4)).dtype.kind == "i"  # no blending at all
    for k in native["obs"]:
        assert native["obs"][k].dtype == same["obs"][k].dtype and np.array_equal(native["obs"][k], same["obs"][k])


@pytest.mark.parametrize("offsets", [[-0.7, 0.0, 0.35, 1.5], [-3.2, 2.9], [0.5]])
def test_lerobot_fractional_offsets_equal_the_reference_with_edges_and_pads(offsets):
    """Two episodes of rows; each delta key read at row + offset (in recorded steps), clamped into the row's
    episode, *_is_pad where the offset falls outside it."""
    episodes = make_episodes([9, 6])
    frames = ArrayFrames(episodes)
    rowmap = lr.RowMap([9, 6])
    abs_index = np.concatenate([np.arange(100, 109), np.arange(300, 306)])
    start = np.array([100] * 9 + [300] * 6)
    w = lr.DeltaWindows(abs_index, start, start + np.array([9] * 9 + [6] * 6), dict.fromkeys(MODES, offsets))
    idx = np.arange(15)
    rows, pad = w.locate(idx)
    for key, mode in MODES.items():
        unit, steps = rowmap.locate(rows[key], idx)
        got = gather_at(frames, key, unit, steps, mode)
        for r in idx:
            ep, local = (0, r) if r < 9 else (1, r - 9)
            L = len(episodes[ep]["pos"])
            for j, d in enumerate(offsets):
                p = local + d
                assert pad[f"{key}_is_pad"][r, j] == (p < 0 or p > L - 1)
                want = reference_value(episodes[ep][key], min(max(p, 0.0), L - 1), mode)
                if mode == "linear":
                    np.testing.assert_allclose(got[r, j], want, rtol=1e-6, atol=1e-6)
                else:
                    assert np.array_equal(got[r, j], want), (key, r, j)


def test_modes_are_checked():
    infos = {
        "pos": FieldInfo(np.dtype(np.float32), (3,), False),
        "grip": FieldInfo(np.dtype(np.int64), (), False),
        "cam": FieldInfo(np.dtype(np.uint8), (4, 4, 3), True),
    }
    assert resolve_modes(infos, None, "w") == {"pos": "linear", "grip": "previous", "cam": "nearest"}
    assert resolve_modes(infos, {"pos": "previous"}, "w")["pos"] == "previous"
    only = r"between recorded steps \(only \['cam', 'grip', 'pos'\] are"
    with pytest.raises(BackendOptionError, match=r"w.modes names \['speed'\].*" + only):
        resolve_modes(infos, {"speed": "linear"}, "w")
    with pytest.raises(BackendOptionError, match="never blended"):
        resolve_modes(infos, {"cam": "linear"}, "w")
    # issue 23 B12: with no field read at another rate the message said "its fields are []"
    with pytest.raises(
        BackendOptionError,
        match=r"w.modes names \['pos'\], but this run reads no field between "
        r"recorded steps: modes apply to rate conversion \(target_fps, "
        r"delta_timestamps\)",
    ) as e:
        resolve_modes({}, {"pos": "linear"}, "w")
    assert "[]" not in str(e.value)
    with pytest.raises(BackendOptionError, match="needs a float field"):
        resolve_modes(infos, {"grip": "linear"}, "w")
    with pytest.raises(BackendOptionError, match="one of"):
        resolve_modes(infos, {"pos": "cubic"}, "w")
