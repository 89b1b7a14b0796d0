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


def _buffers_digest(table) -> str:
    """The digest of an earlier version (each chunk's buffers as laid out): the control's."""
    import hashlib

    h = hashlib.sha256()
    for name, column in zip(table.data.table.column_names, table.data.table.columns):
        h.update(f"{name}\0{column.type}\0".encode())
        for chunk in column.chunks:
            h.update(f"{chunk.offset}:{len(chunk)}\0".encode())
            for buf in chunk.buffers():
                h.update(b"-" if buf is None else memoryview(buf))
    return h.hexdigest()


def test_datapipe_checks_its_rows_once_when_a_later_start_reads_the_tables_kept_copies(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A mixture's component held in memory (``compat.tables_read_directly``) is read from parquet at the first
    start and from its kept Arrow copy at the next (``mixtures.kept_tables``): the same values in other buffers,
    so the rows are not compared again (they were at the second start of every mixture: 3.6 s at 400
    components). Negative control: the digest of the buffers, as before, has the rows compared again."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot_helpers import serve

    from robo_loaders_plugin.backends.datapipe import lerobot as factories
    from robo_loaders_plugin.mixtures.kept_tables import KeptTables

    root = lerobot_datasets["h264_3cam_multifile"]
    checks = []
    real = factories.check_rows_match
    monkeypatch.setattr(factories, "check_rows_match", lambda *a, **k: checks.append(1) or real(*a, **k))

    def build(cache):
        monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / cache))
        with compat.tables_read_directly(KeptTables(str(tmp_path / cache))):
            native = LeRobotDataset("local/sample", root=root)
            assert not native.hf_dataset.cache_files  # held in memory: its values' digest is recorded
            return serve("datapipe", native, cache_dir=str(tmp_path / cache / "shards"))

    build("a")
    build("a")
    assert checks == [1]
    checks.clear()
    monkeypatch.setattr(factories, "hf_table_digest", _buffers_digest)
    build("b")
    build("b")
    assert checks == [1, 1]


def test_the_table_digest_is_of_the_values_not_of_their_buffers(lerobot_datasets, tmp_path):
    """``compat.hf_table_digest``: one digest for a data file read from parquet (validity bitmaps of all ones), from
    an Arrow IPC copy (none) and cut in other chunks; another for one value changed (negative control), a column
    renamed or another type."""
    import datasets
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    (path,) = sorted((lerobot_datasets["av1_1cam"] / "data").glob("*/*.parquet"))[:1]
    read = pq.read_table(path)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, read.schema) as writer:
        writer.write_table(read)
    copy = pa.ipc.open_file(sink.getvalue()).read_all()
    assert any(b is not None for b in read.column("timestamp").chunk(0).buffers()[:1])  # the layouts differ
    assert copy.column("timestamp").chunk(0).buffers()[0] is None

    def digest(table):
        return compat.hf_table_digest(datasets.Dataset(table, fingerprint="x"))

    one = digest(read)
    assert digest(copy) == one == digest(pa.concat_tables([read.slice(0, 3), read.slice(3)]))
    at = read.schema.get_field_index("timestamp")
    changed = read.column("timestamp").to_numpy().copy()
    changed[1] += 1e-3
    assert digest(read.set_column(at, "timestamp", pa.array(changed))) != one
    assert digest(read.rename_columns([*read.column_names[:-1], "other"])) != one
    assert digest(read.set_column(at, "timestamp", pc.cast(read.column("timestamp"), pa.float64()))) != one
