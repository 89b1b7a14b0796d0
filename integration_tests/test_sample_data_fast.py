"""The fast LeRobot writer (sample_data/lerobot_fast.py, issue 22's million-frame workloads) writes the dataset
LeRobot's own writer writes: every metadata and data file with the same content (parquet schemas and their
metadata included), videos with the same packets, and the same ``LeRobotDataset`` items, on a small copy (reused
scenes included, one video file per episode included)."""

import json
import shutil

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


def assert_same_dataset(a, b, repo_id, frames=None):
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
    assert len(da) == len(db) == (sum(LENGTHS) if frames is None else frames)
    for i in range(len(da)):
        x, y = da[i], db[i]
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k], (i, k)


TRIES = 4


def written_alike(tmp_path, kwargs, tries: int = TRIES):
    """Both writers' datasets of ``kwargs``, compared; the fast one's root.

    Why several tries, and only for video packets: the h264 encodes here are not the same from run to run when both
    writers run in one process under load. Measured on this test's episodes with other processes running: 1 run in
    ~20 at 32x48 and ~1 in 8 at 64x96 had one file whose packets differed from every other run's, written by either
    writer (so not the fast writer's doing); the fast writer alone gave identical files in 200 runs, and the same
    frames encoded 150-400 times in one process, quiet or beside three busy processes, were identical. The cause was
    not found. With one file per episode (eight files) a whole try often holds one such file, so three whole tries
    failed together in CI; the versions are therefore pooled per file: each try's files are kept, and a video passes
    once some version the fast writer wrote has the packets of some version LeRobot's writer wrote. The matched
    versions are copied into the last try's two datasets, which are then compared whole (every file and every
    ``LeRobotDataset`` item). A writer that encodes differently every time (another frame, another option, another
    file rule) still fails every try; anything but the video packets fails the first."""
    theirs_versions: dict[str, list] = {}  # video name -> [(path, packets)] of every try
    mine_versions: dict[str, list] = {}
    for attempt in range(tries):
        theirs = write_lerobot_dataset(tmp_path / f"lerobot{attempt}", **kwargs)
        mine = write_lerobot_fast(tmp_path / f"fast{attempt}", **kwargs)
        assert files(theirs) == files(mine)
        unmatched = []
        for name in (n for n in files(theirs) if n.endswith(".mp4")):
            theirs_versions.setdefault(name, []).append((theirs / name, video_packets(theirs / name)))
            mine_versions.setdefault(name, []).append((mine / name, video_packets(mine / name)))
            pair = next(((a, b) for a, pa in theirs_versions[name] for b, pb in mine_versions[name] if pa == pb), None)
            if pair is None:
                unmatched.append(name)
            else:
                for version, path in zip(pair, (theirs / name, mine / name)):
                    if version != path:
                        shutil.copyfile(version, path)
        if not unmatched:
            assert_same_dataset(theirs, mine, "local/fast", sum(kwargs["episode_lengths"]))
            return mine
    raise VideoPacketsDiffer(
        f"{unmatched} after {tries} tries: {_first_difference(theirs_versions, mine_versions, unmatched[0])}"
    )


def _first_difference(theirs_versions, mine_versions, name) -> str:
    """Where the first versions of ``name`` differ (the stream head, or a packet's timestamps or bytes)."""
    (ha, pa), (hb, pb) = theirs_versions[name][0][1], mine_versions[name][0][1]
    if ha != hb:
        return f"stream {ha} != {hb}"
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x != y:
            return f"packet {i}: pts/dts/key {x[:3]} vs {y[:3]}, {len(x[3])} vs {len(y[3])} bytes"
    return f"{len(pa)} vs {len(pb)} packets"


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


def _small_h264(**more) -> dict:
    """The writers' arguments of the pooling's tests: three short episodes, one small h264 camera."""
    return dict(
        repo_id="local/fast",
        episode_lengths=LENGTHS[:3],
        cameras=1,
        image_size=(32, 48),
        mode="h264",
        seed=4,
        progress=False,
        **more,
    )


def test_negative_control_videos_that_differ_every_time_fail_every_try(tmp_path, monkeypatch):
    """The retries pass only an encoder's run-to-run variation: a fast writer whose videos differ on every run
    (frames mirrored before encoding; every other file, statistics included, still equal) fails every try."""
    from robo_loaders_plugin.sample_data import lerobot_fast

    encode = lerobot_fast._encode
    monkeypatch.setattr(lerobot_fast, "_encode", lambda frames, *a, **k: encode(frames[:, :, ::-1], *a, **k))
    with pytest.raises(VideoPacketsDiffer):
        written_alike(tmp_path, _small_h264())
    assert len(list(tmp_path.glob("fast*"))) == TRIES


def test_a_video_that_differs_in_one_try_only_is_matched_from_another_try(tmp_path, monkeypatch):
    """The pooling does what its docstring says: one file of the fast writer's first try encoded from other frames
    (an encoder's one-off variation) is matched by the same file of its next try, and the datasets then compared
    whole are the matched versions (the second try's, not the first's)."""
    from robo_loaders_plugin.sample_data import lerobot_fast

    encode, calls = lerobot_fast._encode, []

    def once_mirrored(frames, *a, **k):
        calls.append(1)
        return encode(frames[:, :, ::-1] if len(calls) == 2 else frames, *a, **k)

    monkeypatch.setattr(lerobot_fast, "_encode", once_mirrored)
    mine = written_alike(tmp_path, _small_h264(video_files_size_in_mb=0.001))
    assert mine == tmp_path / "fast1" and len(calls) == 6
    assert video_packets(mine / "videos/observation.images.cam0/chunk-000/file-001.mp4") == video_packets(
        tmp_path / "lerobot0/videos/observation.images.cam0/chunk-000/file-001.mp4"
    )
