"""Frames of whole episodes loaded on demand (``frames.episodes.EpisodeFrames``): what each read asks for."""

import numpy as np
import pytest

from robo_loaders_plugin.frames.base import FieldInfo
from robo_loaders_plugin.frames.episodes import EpisodeFrames

LENGTHS = (5, 3, 7)


def _episodes():
    rng = np.random.default_rng(0)
    return [
        {"a": rng.normal(size=(n, 2)).astype(np.float32), "cam": rng.integers(0, 255, (n, 3, 4, 4), np.uint8)}
        for n in LENGTHS
    ]


INFOS = {"a": FieldInfo(np.dtype(np.float32), (2,), False), "cam": FieldInfo(np.dtype(np.uint8), (3, 4, 4), True)}


@pytest.mark.parametrize("fields_alone", [True, False])
def test_a_low_dim_field_is_read_without_the_frames_when_the_reader_reads_fields_alone(fields_alone):
    """With ``fields_alone`` (LeRobot's datapipe), gathering a field that is not frames reads that episode's
    non-frame fields only (a mixture's start reads every component's low-dim rows: it loaded every episode whole,
    frames included); a later frame load reads the frames alone; every value is the episode's. Control
    (``fields_alone=False``, robomimic's reader): the first gather loads the episode whole, frames included."""
    eps, asked = _episodes(), []

    def read(ep, fields):
        asked.append((ep, None if fields is None else tuple(fields)))
        return {k: v for k, v in eps[ep].items() if fields is None or k in fields}

    frames = EpisodeFrames(LENGTHS, INFOS, read, capacity=2, decode_on_load=False, fields_alone=fields_alone)
    ep, steps = np.array([2, 0, 2]), np.array([[6, 5], [0, 1], [1, 2]])
    for field in ("a", "cam"):
        got = frames.gather(field, ep, steps)
        assert np.array_equal(got, np.stack([eps[e][field][s] for e, s in zip(ep, steps)]))
        if field == "a":
            if fields_alone:
                assert asked == [(0, ("a",)), (2, ("a",))]  # no frame read for the low-dim rows
            else:
                assert sorted(asked) == [(0, None), (2, None)]  # the control: loaded whole, frames included
    if fields_alone:
        assert sorted(asked[2:]) == [(0, ("cam",)), (2, ("cam",))]  # the frames, alone
    assert all(e != 1 for e, _ in asked)  # an episode nothing asked for is not read
