"""LeRobot adapter at scale (issue 22): the frames of a pass read off lerobot-train's EpisodeAwareSampler with
numpy, equal to its public ``indices`` (a Python call per frame)."""

import os

import numpy as np
import pytest
from lerobot.datasets import EpisodeAwareSampler

from robo_loaders_plugin.lerobot import compat


def sampler(episodes=None, drop_first=0, drop_last=0, relative=False):
    lengths = np.random.default_rng(0).integers(5, 40, size=30)
    to = np.cumsum(lengths)
    frm = to - lengths
    mapping = None
    if relative:  # what LeRobotDataset gives a sampler when it holds only some episodes
        absolute = np.concatenate([np.arange(frm[e], to[e]) for e in episodes])
        mapping = {int(a): i for i, a in enumerate(absolute)}
    return EpisodeAwareSampler(
        frm.tolist(),
        to.tolist(),
        episode_indices_to_use=episodes,
        drop_n_first_frames=drop_first,
        drop_n_last_frames=drop_last,
        shuffle=True,
        seed=3,
        absolute_to_relative_idx=mapping,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"episodes": [2, 5, 6, 17, 29]},
        {"drop_first": 2, "drop_last": 3},
        {"episodes": [1, 3, 4, 28], "relative": True, "drop_last": 1},
    ],
)
def test_sampler_indices_equal_the_public_property(kwargs):
    s = sampler(**kwargs)
    mine = compat.sampler_indices(s)
    assert mine.dtype == np.int64 and mine.tolist() == list(s.indices)


def test_negative_control_a_changed_episode_table_is_seen():
    s = sampler()
    expected = list(s.indices)
    s._starts = s._starts + 1
    assert compat.sampler_indices(s).tolist() != expected


def test_datapipe_checks_its_rows_once_per_version_of_the_shards_and_lerobots_table(
    lerobot_datasets, tmp_path, monkeypatch
):
    """datapipe compares every row it serves with LeRobot's dataset object (issue 23 A2), a read of every episode
    from the shards; it does so once while neither side changes (issue 22), and again when LeRobot's cached
    table changes (negative control: its cache files rebuilt)."""
    import shutil

    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot_helpers import serve

    from robo_loaders_plugin.backends.datapipe import lerobot as factories

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    root = lerobot_datasets["h264_3cam_multifile"]
    checks = []
    real = factories.check_rows_match
    monkeypatch.setattr(factories, "check_rows_match", lambda *a, **k: checks.append(1) or real(*a, **k))

    def build():
        return serve("datapipe", LeRobotDataset("local/sample", root=root), cache_dir=str(tmp_path / "shards"))

    build()
    build()
    assert checks == [1]
    cache_dir = LeRobotDataset("local/sample", root=root).hf_dataset.cache_files[0]["filename"]
    shutil.rmtree(os.path.dirname(cache_dir))  # LeRobot builds its datasets cache again: other files
    build()
    assert checks == [1, 1]
