"""``LeRobotV3.glob`` on a local root lists with pathlib (as LeRobot lists its own files), not fsspec: the same paths
as fsspec's glob, the general path every remote root still takes, on a tree with the names that tell listers apart
(hidden files and directories, a directory named like a file, deeper levels, near-miss suffixes); and the local
root's size (``local_bytes``), walked once per source object."""

from __future__ import annotations

import glob
import json
import os

import fsspec
import pytest

from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3

PATTERNS = ("meta/episodes/*/*.parquet", "data/*/*.parquet", "videos/*/*/*.mp4")


@pytest.fixture
def root(tmp_path):
    """A LeRobot-shaped root whose listing differs between a lister that skips hidden names and one that does not."""
    os.makedirs(tmp_path / "meta")
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"fps": 10, "features": {}}))
    files = [
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-001.parquet",
        "meta/episodes/chunk-000/.hidden.parquet",
        "meta/episodes/.hidden-chunk/file-000.parquet",
        "meta/episodes/chunk-001/file-000.parquet.tmp",
        "meta/episodes/chunk-001/deeper/file-000.parquet",
        "meta/episodes/top.parquet",
        "data/chunk-000/file-000.parquet",
        "data/chunk-010/file-002.parquet",
        "videos/observation.images.cam/chunk-000/file-000.mp4",
        "videos/observation.images.cam/chunk-000/file-000.mp4.part",
    ]
    for rel in files:
        os.makedirs(os.path.dirname(tmp_path / rel), exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    os.makedirs(tmp_path / "data" / "chunk-002" / "dir.parquet")  # a directory whose name matches
    return tmp_path


@pytest.mark.parametrize("pattern", PATTERNS)
def test_local_glob_lists_what_fsspecs_glob_lists(root, pattern):
    source = LeRobotV3(root)
    assert source.local
    expected = sorted(fsspec.filesystem("file").glob(f"{os.path.realpath(root)}/{pattern}"))
    assert expected  # the pattern matches something in the tree
    assert source.glob(pattern) == expected


def test_the_tree_tells_a_lister_that_skips_hidden_names_apart(root):
    """Negative control: a lister that differs from fsspec on hidden names (Python's ``glob.glob``) gives another
    answer on this tree, so the comparison above would catch such a lister."""
    pattern = PATTERNS[0]
    source = LeRobotV3(root)
    other = sorted(glob.glob(f"{os.path.realpath(root)}/{pattern}"))
    assert other != source.glob(pattern)


def test_local_bytes_is_the_roots_size_walked_once(root, monkeypatch):
    """``LeRobotV3.local_bytes`` (what ``data_size`` records as ``source_bytes``) is every file's size under the root,
    summed by one walk per source object: a mixture plans, then builds, each component from one object. Control: a
    root with one more byte gives another size."""
    (root / "data" / "chunk-000" / "file-000.parquet").write_bytes(b"x" * 100)
    expected = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    walks = []
    real_walk = os.walk
    monkeypatch.setattr(os, "walk", lambda *a, **k: walks.append(a) or real_walk(*a, **k))
    source = LeRobotV3(root)
    assert source.local_bytes() == expected == 100 + len(json.dumps({"fps": 10, "features": {}}))
    assert source.local_bytes() == expected
    assert len(walks) == 1
    (root / "data" / "chunk-000" / "file-000.parquet").write_bytes(b"x" * 101)
    assert LeRobotV3(root).local_bytes() == expected + 1
