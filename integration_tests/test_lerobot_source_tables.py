"""``LeRobotV3.read_table`` (and ``episodes``) read the parquet files one by one (``ParquetFile``) instead of through
``pyarrow.dataset`` (whose cost per row group made a million rows in LeRobot's row group per episode a 4-6 s read):
it must give the scanner's table exactly, over several data files, with and without an episode selection."""

import shutil

import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq

from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3


def _scanned(source, columns, episodes=None):
    """The table as ``pyarrow.dataset`` reads it (the reader ``read_table`` replaced)."""
    dataset = pa_ds.dataset(source.data_files(), format="parquet", filesystem=source.fs)
    flt = pa_ds.field("episode_index").isin(list(episodes)) if episodes is not None else None
    return dataset.to_table(columns=list(columns), filter=flt)


def _split_data_file(root):
    """The dataset's one data file cut in two (file-000: the first half of its rows, file-001: the rest), as
    LeRobot's writer leaves a dataset past ``data_files_size_in_mb``."""
    (path,) = sorted((root / "data").glob("*/*.parquet"))
    table = pq.read_table(path)
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), path)
    pq.write_table(table.slice(half), path.parent / "file-001.parquet")
    return table


def test_read_table_equals_the_dataset_scanner_over_several_files(lerobot_datasets, tmp_path):
    root = tmp_path / "two_files"
    shutil.copytree(lerobot_datasets["av1_1cam"], root)
    whole = _split_data_file(root)
    source = LeRobotV3(str(root))
    assert len(source.data_files()) == 2
    columns = list(source.columns)
    mine = source.read_table(columns)
    assert mine.equals(_scanned(source, columns)) and mine.num_rows == whole.num_rows
    assert mine.column("index").to_pylist() == whole.column("index").to_pylist()  # file order kept
    picked = [2, 0]
    chosen = source.read_table(columns, picked)
    assert chosen.equals(_scanned(source, columns, picked))
    assert set(chosen.column("episode_index").to_pylist()) == {0, 2}
    # columns in the order asked, and a selection without episode_index among them, as the scanner allowed
    asked = ["timestamp", "index"]
    assert source.read_table(asked, picked).equals(_scanned(source, asked, picked))
    # negative control: the files read in the other order give another table, which the comparison sees
    swapped = pa_ds.dataset(source.data_files()[::-1], format="parquet").to_table(columns=columns)
    assert not mine.equals(swapped)


def test_read_table_equals_the_dataset_scanner_on_each_layout(lerobot_datasets):
    for name, root in lerobot_datasets.items():
        source = LeRobotV3(str(root))
        (path,) = source.glob("meta/episodes/*/*.parquet")
        table = pq.read_table(path)
        expected = {
            r["episode_index"]: {k: v for k, v in r.items() if not k.startswith("stats/")} for r in table.to_pylist()
        }
        assert source.episodes == expected and len(expected) == table.num_rows, name
        columns = list(source.columns)
        assert source.read_table(columns).equals(_scanned(source, columns)), name
        assert source.read_table(columns, [1]).equals(_scanned(source, columns, [1])), name


def test_episodes_read_directly_equal_lerobots_own_read(lerobot_datasets, tmp_path):
    """A mixture's components read ``meta/episodes`` with ``compat.episodes_table`` (pyarrow, in memory) instead of
    LeRobot's ``load_episodes`` (through the datasets cache): the same columns, features and values, over one file
    and over two; LeRobot's metadata built inside ``episodes_read_directly`` holds that table, and outside it
    LeRobot's own read is back."""
    from lerobot.datasets import dataset_metadata
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.datasets.io_utils import load_episodes

    from robo_loaders_plugin.lerobot import compat

    split = tmp_path / "two_episode_files"
    shutil.copytree(lerobot_datasets["av1_1cam"], split)
    (path,) = sorted((split / "meta" / "episodes").glob("*/*.parquet"))
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 1), path)
    pq.write_table(table.slice(1), path.parent / "file-001.parquet")
    for root in [*lerobot_datasets.values(), split]:
        theirs, mine = load_episodes(root), compat.episodes_table(root)
        assert mine.column_names == theirs.column_names and mine.features == theirs.features
        assert mine.to_dict() == theirs.to_dict() and len(mine) == len(theirs) >= 2
    with compat.episodes_read_directly():
        meta = LeRobotDatasetMetadata("local/two_episode_files", root=split)
    assert meta.episodes.to_dict() == load_episodes(split).to_dict() and not meta.episodes.cache_files
    assert dataset_metadata.load_episodes is load_episodes  # LeRobot's own read back after the context
    # negative control: the two files read the other way round are another table, which the comparison sees
    (path.parent / "file-001.parquet").rename(path.parent / "file-b.parquet")
    path.rename(path.parent / "file-c.parquet")
    assert compat.episodes_table(split).to_dict() != load_episodes(lerobot_datasets["av1_1cam"]).to_dict()
