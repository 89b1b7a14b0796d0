"""The fast LeRobot writer (sample_data/lerobot_fast.py, issue 22's million-frame workloads) writes the dataset
LeRobot's own writer writes: every metadata and data file with the same content (parquet schemas and their
metadata included), videos with the same packets, and the same ``LeRobotDataset`` items, on a small copy (reused
scenes included, one video file per episode included)."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from robo_loaders_plugin.sample_data.lerobot_fast import write_lerobot_fast
from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

LENGTHS = (20, 25, 20, 20, 25, 31, 20, 25)


def files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def video_packets(path):
    """Everything a decoder sees of an mp4: stream parameters and every packet (timestamps, key flag, bytes)."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        head = (
            s.codec_context.name,
            s.codec_context.width,
            s.codec_context.height,
            s.codec_context.pix_fmt,
            s.time_base,
            s.duration,
            s.frames,
            s.average_rate,
        )
        return head, [(p.pts, p.dts, p.is_keyframe, bytes(p)) for p in c.demux(s) if p.size]


class VideoPacketsDiffer(AssertionError):
    """Two video files whose packets differ (everything before them in the comparison was equal)."""


def assert_same_dataset(a, b, repo_id):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    assert files(a) == files(b)
    for name in files(a):
        pa, pb = a / name, b / name
        if name.endswith(".json"):
            assert json.loads(pa.read_text()) == json.loads(pb.read_text()), name
        elif name.endswith(".parquet"):
            ta, tb = pq.read_table(pa), pq.read_table(pb)
            assert ta.schema.equals(tb.schema, check_metadata=True), name
            assert ta.to_pylist() == tb.to_pylist(), name
            assert pq.ParquetFile(pa).num_row_groups == pq.ParquetFile(pb).num_row_groups, name
        else:  # the same packets; LeRobot's file differs only in the container's bitrate hint (its btrt box),
            # copied from the growing file at each of its per-episode rewrites
            if video_packets(pa) != video_packets(pb):
                raise VideoPacketsDiffer(name)
    da, db = LeRobotDataset(repo_id, root=a), LeRobotDataset(repo_id, root=b)
    assert len(da) == len(db) == sum(LENGTHS)
    for i in range(len(da)):
        x, y = da[i], db[i]
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k], (i, k)


def written_alike(tmp_path, kwargs, tries: int = 3):
    """Both writers' datasets of ``kwargs``, compared; the fast one's root.

    Why up to three tries, and only on video packets: the h264 encodes here are not the same from run to run when
    both writers run in one process under load. Measured on this test's episodes with other processes running: 1
    run in ~20 at 32x48 and ~1 in 8 at 64x96 had one file whose packets differed from every other run's, written by
    either writer (so not the fast writer's doing); the fast writer alone gave identical files in 200 runs, and the
    same frames encoded 400 times in a quiet process were identical. The cause was not found. A writer that differs
    every time (another frame, another option, another file rule) still fails all three tries; anything but the
    video packets fails the first."""
    for attempt in range(tries):
        theirs = write_lerobot_dataset(tmp_path / f"lerobot{attempt}", **kwargs)
        mine = write_lerobot_fast(tmp_path / f"fast{attempt}", **kwargs)
        try:
            assert_same_dataset(theirs, mine, "local/fast")
            return mine
        except VideoPacketsDiffer:
            if attempt == tries - 1:
                raise


@pytest.mark.parametrize(
    "video_mb,scenes,dims", [(None, 3, {}), (0.001, None, {}), (None, 3, {"state_dim": 14, "action_dim": 7})]
)
def test_fast_writer_writes_what_lerobots_writer_writes(tmp_path, video_mb, scenes, dims):
    """Default file sizes with reused scenes (encoded once, then copied), a size limit below one episode's video
    (every episode starts a new file, so LeRobot's file rule is exercised), and a robot of other sizes (a 14-wide
    state, 7-wide actions: the content's vectors repeated or cut)."""
    kwargs = dict(
        repo_id="local/fast",
        episode_lengths=LENGTHS,
        cameras=1,
        image_size=(32, 48),
        mode="h264",
        seed=4,
        video_files_size_in_mb=video_mb,
        progress=False,
        scenes=scenes,
        **dims,
    )
    mine = written_alike(tmp_path, kwargs)
    if video_mb:
        assert len(list((mine / "videos").rglob("*.mp4"))) == len(LENGTHS)


def test_negative_control_a_changed_value_is_seen(tmp_path):
    """The comparison fails when the content differs (another seed)."""
    kwargs = dict(
        repo_id="local/fast",
        episode_lengths=LENGTHS,
        cameras=1,
        image_size=(32, 48),
        mode="h264",
        progress=False,
        scenes=3,
    )
    theirs = write_lerobot_dataset(tmp_path / "lerobot", seed=4, **kwargs)
    mine = write_lerobot_fast(tmp_path / "fast", seed=5, **kwargs)
    with pytest.raises(AssertionError):
        assert_same_dataset(theirs, mine, "local/fast")


def test_scenes_keep_states_and_actions_distinct():
    from robo_loaders_plugin.sample_data.lerobot_v3 import episode_contents

    plain = list(episode_contents(LENGTHS, cameras=1, image_size=(16, 16), fps=20, seed=1))
    pooled = list(episode_contents(LENGTHS, cameras=1, image_size=(16, 16), fps=20, seed=1, scenes=2))
    for p, q in zip(plain, pooled):
        assert np.array_equal(p.state, q.state) and np.array_equal(p.action, q.action)
    assert np.array_equal(pooled[0].frames[0][:20], pooled[2].frames[0][:20])  # scene 0 again
    assert not np.array_equal(pooled[0].frames[0], pooled[1].frames[0][:20])


def test_negative_control_videos_that_differ_every_time_fail_every_try(tmp_path, monkeypatch):
    """The retries pass only an encoder's run-to-run variation: a fast writer whose videos differ on every run
    (frames mirrored before encoding; every other file, statistics included, still equal) fails all three tries."""
    from robo_loaders_plugin.sample_data import lerobot_fast

    encode = lerobot_fast._encode
    monkeypatch.setattr(lerobot_fast, "_encode", lambda frames, *a, **k: encode(frames[:, :, ::-1], *a, **k))
    kwargs = dict(
        repo_id="local/fast",
        episode_lengths=LENGTHS[:3],
        cameras=1,
        image_size=(32, 48),
        mode="h264",
        seed=4,
        progress=False,
    )
    with pytest.raises(VideoPacketsDiffer):
        written_alike(tmp_path, kwargs)
    assert len(list(tmp_path.glob("fast*"))) == 3
