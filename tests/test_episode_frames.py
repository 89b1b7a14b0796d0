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


class _Reader:
    """``read(ep, fields)`` over in-memory episodes, recording what each call asks for (picklable)."""

    def __init__(self, eps):
        self.eps, self.asked = eps, []

    def __call__(self, ep, fields):
        self.asked.append((ep, None if fields is None else tuple(fields)))
        return {k: v for k, v in self.eps[ep].items() if fields is None or k in fields}


@pytest.mark.parametrize("fields_alone", [True, False])
def test_a_mixtures_low_dim_read_leaves_the_frames_when_the_reader_reads_fields_alone(fields_alone):
    """With ``fields_alone`` (LeRobot's datapipe), ``gather_low_dim`` (a mixture's start, every component's low-dim
    rows) reads each episode's non-frame fields only; a later frame load reads the frames alone; training's
    ``gather`` of a low-dim field still loads an unread episode whole (one read); every value is the episode's, and
    a pickled source (a spawned worker) keeps the setting. Control (``fields_alone=False``, robomimic's reader):
    ``gather_low_dim`` loads the episodes whole, frames included."""
    import pickle

    read = _Reader(_episodes())
    eps, asked = read.eps, read.asked
    frames = EpisodeFrames(LENGTHS, INFOS, read, capacity=2, decode_on_load=False, fields_alone=fields_alone)
    ep, steps = np.array([2, 0, 2]), np.array([[6, 5], [0, 1], [1, 2]])
    got = frames.gather_low_dim(["a"], ep, steps)["a"]
    assert np.array_equal(got, np.stack([eps[e]["a"][s] for e, s in zip(ep, steps)]))
    if fields_alone:
        assert asked == [(0, ("a",)), (2, ("a",))]  # no frame read for the low-dim rows
    else:
        assert sorted(asked) == [(0, None), (2, None)]  # the control: loaded whole, frames included
    cam = frames.gather("cam", ep, steps)
    assert np.array_equal(cam, np.stack([eps[e]["cam"][s] for e, s in zip(ep, steps)]))
    if fields_alone:
        assert sorted(asked[2:]) == [(0, ("cam",)), (2, ("cam",))]  # the frames, alone
    asked.clear()
    frames.gather("a", np.array([1]), np.array([[0, 1]]))  # training: an unread episode loaded whole, once
    assert asked == [(1, None)]
    assert pickle.loads(pickle.dumps(frames)).fields_alone is fields_alone


def _chunks(eps, margin=(0, 2)):
    """Each episode of ``eps`` as units of at most 3 rows (``ChunkFrames``), loaded with ``margin``."""
    from robo_loaders_plugin.frames.chunks import ChunkFrames, runs_of, split_runs

    lengths = [len(e["cam"]) for e in eps]
    rows = runs_of(lengths)
    units = split_runs(rows, 1, 2)
    cams = np.concatenate([e["cam"] for e in eps])
    small = {"a": np.concatenate([e["a"] for e in eps])}
    return ChunkFrames(units, {ep: (s, e) for ep, s, e in rows}, INFOS, small,
                       lambda ep, lo, hi: {"cam": cams[lo:hi]}, margin, capacity=2)  # fmt: skip


def _encoded(cam):
    """``cam``'s frames compressed one by one (what a shard's frames member holds), not decoded."""
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.encoded_frames import EncodedFrames

    blobs = [FrameCodec().compress(f) for f in cam]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    return EncodedFrames(b"".join(blobs), offsets, cam.dtype, cam.shape, "test")


@pytest.mark.parametrize("kind", ["episodes", "encoded", "chunks", "steps (B,)"])
def test_a_camera_of_several_sources_is_read_as_one_into_any_rows_of_a_batch(kind):
    """``EpisodeFrames.join_field`` / ``ChunkFrames.join_field`` (``frames.joined_loads``): a mixture's camera read
    across three sources writes each part's windows straight into the batch's rows, equal to each source's own
    ``gather`` of the same (episode, steps), rows in any order and parts interleaved; sources holding the field in
    another shape are not joined. Control: the same read with two parts' sources swapped differs."""
    rng = np.random.default_rng(1)
    sets = [_episodes() for _ in range(3)]
    for eps in sets:  # each source its own values
        for e in eps:
            e["cam"] = rng.integers(0, 255, e["cam"].shape, np.uint8)
    if kind in ("episodes", "steps (B,)"):
        sources = [
            EpisodeFrames(LENGTHS, INFOS, lambda ep, f, eps=eps: eps[ep], capacity=2, decode_on_load=False)
            for eps in sets
        ]
    elif kind == "encoded":  # frames still compressed, decoded straight into the batch's rows
        sources = [
            EpisodeFrames(
                LENGTHS,
                INFOS,
                lambda ep, f, eps=eps: dict(eps[ep], cam=_encoded(eps[ep]["cam"])),
                capacity=2,
                decode_on_load=False,
            )
            for eps in sets
        ]
    else:
        sources = [_chunks(eps) for eps in sets]
    cls = type(sources[0])
    joined = cls.join_field([(s, "cam") for s in sources])
    assert joined is not None
    n = 12
    parts = rng.integers(0, 3, n)
    units = np.array([rng.integers(0, len(s.lengths)) for s in (sources[p] for p in parts)])
    steps = np.stack([np.minimum(np.arange(2) + rng.integers(0, sources[p].lengths[u]), sources[p].lengths[u] - 1)
                      for p, u in zip(parts, units)])  # fmt: skip
    if kind == "steps (B,)":
        steps = steps[:, 0]
    rows = rng.permutation(n + 3)[:n]
    out = np.zeros((n + 3, *steps.shape[1:], 3, 4, 4), np.uint8)
    joined.take(parts, units, steps, rows, out)
    for b in range(n):
        want = sources[parts[b]].gather("cam", units[b : b + 1], steps[b : b + 1])[0]
        assert np.array_equal(out[rows[b]], want), b
    untouched = np.setdiff1d(np.arange(n + 3), rows)
    assert not out[untouched].any()  # only the batch's rows are written
    swapped = cls.join_field([(sources[1], "cam"), (sources[0], "cam"), (sources[2], "cam")])
    other = np.zeros_like(out)
    swapped.take(parts, units, steps, rows, other)
    assert not np.array_equal(other, out)  # the control: another source's frames are seen
    with pytest.raises(ValueError, match="C-contiguous"):  # a strided batch is refused, never written into a copy
        joined.take(parts, units, steps, rows, np.zeros((n + 3, 2, 3, 4, 4), np.uint8)[:, ::2])
    odd = type("Odd", (), {"info": lambda self, f: FieldInfo(np.dtype(np.uint8), (3, 4, 5), True)})()
    assert cls.join_field([(sources[0], "cam"), (odd, "cam")]) is None  # another shape: read part by part
