"""``LeRobotV3.read_table`` (and ``episodes``) read the parquet files one by one (``ParquetFile``) instead of through
``pyarrow.dataset`` (whose cost per row group made a million rows in LeRobot's row group per episode a 4-6 s read):
it must give the scanner's table exactly, over several data files, with and without an episode selection."""

import os
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
import pytest

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


def test_tables_read_directly_equal_lerobots_own_read(lerobot_datasets, tmp_path):
    """A mixture's components read their tables with pyarrow (``compat.tables_read_directly``) instead of LeRobot's
    reads through the datasets cache: ``meta/episodes``, ``meta/tasks.parquet`` and ``data/`` give the same columns,
    features and values (over one file and over two, with and without an episode selection), LeRobot's dataset
    object built inside the block serves the same items, and outside it LeRobot's own reads are back."""
    import torch
    from lerobot.datasets import dataset_metadata, dataset_reader
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.datasets.feature_utils import get_hf_features_from_features
    from lerobot.datasets.io_utils import load_episodes, load_nested_dataset, load_tasks
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.lerobot import compat

    split = tmp_path / "two_files"
    shutil.copytree(lerobot_datasets["av1_1cam"], split)
    (path,) = sorted((split / "meta" / "episodes").glob("*/*.parquet"))
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 1), path)
    pq.write_table(table.slice(1), path.parent / "file-001.parquet")
    _split_data_file(split)
    originals = (dataset_metadata.load_episodes, dataset_metadata.load_tasks, dataset_reader.load_nested_dataset)
    for root in [*lerobot_datasets.values(), split]:
        theirs, mine = load_episodes(root), compat.ParquetReads().episodes(root)
        assert mine.column_names == theirs.column_names and mine.features == theirs.features
        assert mine.to_dict() == theirs.to_dict() and len(mine) == len(theirs) >= 2
        features = get_hf_features_from_features(LeRobotDatasetMetadata("local/x", root=root).features)
        with compat.tables_read_directly() as reads:
            assert reads.tasks(root).equals(load_tasks(root))
            added = reads.tasks(root)  # each call a frame of its own: a task LeRobot adds to one is not in the next
            added.loc["a task added by the run"] = [len(added)]
            again = reads.tasks(root)
            assert again.equals(load_tasks(root)) and not again.equals(added)
            for episodes in (None, [3, 1]):
                theirs = load_nested_dataset(root / "data", features=features, episodes=episodes)
                mine = reads.data(root / "data", features, episodes, original=load_nested_dataset)
                assert mine.features == theirs.features and not mine.cache_files and theirs.cache_files
                assert mine.data.table.equals(theirs.data.table), (root, episodes)
            native = LeRobotDataset("local/x", root=root, episodes=[1, 3], return_uint8=True)
        reference = LeRobotDataset("local/x", root=root, episodes=[1, 3], return_uint8=True)
        assert not native.hf_dataset.cache_files and not native.meta.episodes.cache_files
        assert len(native) == len(reference)
        for i in (0, len(native) // 2, len(native) - 1):
            a, b = native[i], reference[i]
            assert a.keys() == b.keys()
            assert all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)
    assert (dataset_metadata.load_episodes, dataset_metadata.load_tasks, dataset_reader.load_nested_dataset) == (
        originals
    )  # LeRobot's own reads back after the block
    # negative control: the two files read the other way round are another table, which the comparison sees
    (path.parent / "file-001.parquet").rename(path.parent / "file-b.parquet")
    path.rename(path.parent / "file-c.parquet")
    assert compat.ParquetReads().episodes(split).to_dict() != load_episodes(lerobot_datasets["av1_1cam"]).to_dict()


def test_tables_read_directly_rereads_a_changed_file_and_reads_big_data_as_lerobot(
    lerobot_datasets, tmp_path, monkeypatch
):
    """Within one block a file is read once while it is unchanged (the factory's and the dataset's metadata): an
    edited file is read again, its table, its column names and the episodes ``Dataset`` LeRobot's metadata
    objects share (control: the unchanged file is the same table object, the same names, the same Dataset); a
    ``data/`` past
    ``DIRECT_DATA_BYTES`` is LeRobot's own read, memory-mapped from its datasets cache."""
    from lerobot.datasets.io_utils import load_nested_dataset

    from robo_loaders_plugin.lerobot import compat

    root = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    tasks = root / "meta" / "tasks.parquet"
    with compat.tables_read_directly() as reads:
        first = reads.read(tasks)
        assert reads.read(tasks) is first  # control: unchanged, read once
        edited = first.slice(0, 0)
        pq.write_table(edited, tasks)
        assert reads.read(tasks).num_rows == 0 != first.num_rows
        episodes = sorted((root / "meta" / "episodes").glob("*/*.parquet"))[0]
        names = reads.column_names(episodes)
        assert reads.column_names(episodes) == names and "length" in names  # control: unchanged, the same names
        without_stats = reads.read_except(episodes, "stats/")  # names and columns through one open of the file
        assert reads.read_except(episodes, "stats/") is without_stats and "length" in without_stats.column_names
        assert without_stats.column_names == [n for n in names if not n.startswith("stats/")]
        held = reads.episodes(root)
        assert reads.episodes(root) is held  # control: unchanged, one Dataset for every metadata object
        pq.write_table(pq.read_table(episodes).drop_columns(["length"]), episodes)
        assert reads.column_names(episodes) == [n for n in names if n != "length"]  # edited: its schema read again
        assert "length" not in reads.read_except(episodes, "stats/").column_names  # and its table
        assert "length" in held.column_names and "length" not in reads.episodes(root).column_names
        monkeypatch.setattr(compat, "DIRECT_DATA_BYTES", 0)
        big = reads.data(root / "data", original=load_nested_dataset)
        assert big.cache_files  # LeRobot's read
        monkeypatch.setattr(compat, "DIRECT_DATA_BYTES", 64 << 20)
        assert not reads.data(root / "data", original=load_nested_dataset).cache_files


def test_local_copy_checked_per_video_file_as_lerobot_checks_it(lerobot_datasets, tmp_path):
    """``compat.cached_episodes_sufficient`` answers as LeRobot's ``_check_cached_episodes_sufficient``: complete
    copies sufficient, a missing video file or a requested episode absent from the table not (each a control of the
    other), with several cameras and episodes packed into several video files."""
    from lerobot.datasets.dataset_reader import DatasetReader
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.lerobot import compat

    root = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    original = DatasetReader._check_cached_episodes_sufficient
    reader = LeRobotDataset("local/x", root=root, return_uint8=True).reader
    videos = sorted((root / "videos").rglob("*.mp4"))
    assert len(videos) > 3
    for episodes in (None, [0, 4], [2]):
        reader.episodes = episodes
        assert compat.cached_episodes_sufficient(reader, original) is original(reader) is True
    videos[-1].rename(videos[-1].with_suffix(".gone"))
    reader.episodes = None
    assert compat.cached_episodes_sufficient(reader, original) is original(reader) is False
    reader.episodes = [0]
    assert compat.cached_episodes_sufficient(reader, original) is original(reader)
    videos[-1].with_suffix(".gone").rename(videos[-1])
    reader.episodes = [0, 99]  # not in the table
    assert compat.cached_episodes_sufficient(reader, original) is original(reader) is False


def test_a_mixtures_sources_read_the_tables_lerobot_read_and_an_edited_file_again(lerobot_datasets, tmp_path):
    """Inside ``tables_read_directly`` (a mixture's build) the backend's source of a dataset LeRobot built in the
    block takes ``meta/episodes`` and ``data/`` from LeRobot's own reads while the files are unchanged: the very
    table objects (not read again: ~5 ms a component at 400), equal to a fresh read and to the scanner; pickled, the
    source leaves them behind, and once the block ends the reads keep nothing (the sources outlive it). An episodes
    file edited after LeRobot's read is read again, so the check against LeRobot's object still refuses it (the
    control: the check is not fooled by the shared reads)."""
    import pickle

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.lerobot import compat
    from robo_loaders_plugin.lerobot.dataset import native_source, sources_checked_once

    root = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    (meta_file,) = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    with compat.tables_read_directly() as reads:
        native = LeRobotDataset("local/x", root=root, return_uint8=True)
        assert compat.active_reads() is reads
        source, _ = native_source(native)
        names = [c for c in reads.column_names(meta_file) if not c.startswith("stats/")]
        lerobots = reads.held(meta_file, names)
        assert lerobots is not None and source.episode_table is lerobots  # one file: LeRobot's table itself
        fresh = pq.read_table(meta_file, columns=names)
        assert source.episode_table.equals(fresh) and source.episodes.keys() == set(range(len(fresh)))
        data_files = source.data_files()
        assert all(reads.held(p) is not None for p in data_files) and len(data_files) >= 1  # LeRobot read them whole
        columns = list(source.columns)
        assert source.read_table(columns).equals(_scanned(source, columns))
        assert source.read_table(columns, [1]).equals(_scanned(source, columns, [1]))
        assert pickle.loads(pickle.dumps(source))._table_reads is None
        # control: meta/episodes edited after LeRobot read it (one episode one frame longer) is read again, refused
        edited = fresh.set_column(
            fresh.column_names.index("length"),
            "length",
            pa.array([fresh["length"][0].as_py() + 1, *fresh["length"].to_pylist()[1:]]),
        )
        pq.write_table(edited, meta_file)
        with sources_checked_once(), pytest.raises(SourceError, match="meta/episodes"):
            native_source(native)
    assert compat.active_reads() is None
    assert reads.held(meta_file, names) is None and reads.held(data_files[0]) is None  # closed: nothing kept
    assert reads.read(meta_file, names).equals(edited) and reads.held(meta_file, names) is None
    outside = LeRobotV3(str(root), table_reads=None)
    assert outside.episode_table.equals(edited)  # the source's own read


def _episodes_edited(root, edit):
    """``meta/episodes`` of the dataset at ``root`` rewritten through ``edit(table) -> table``."""
    (path,) = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    pq.write_table(edit(pq.read_table(path)), path)


def _set(table, column, row, value):
    values = table[column].to_pylist()
    values[row] = value
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values, table[column].type))


def test_episode_columns_checked_against_the_rows_read(lerobot_datasets, tmp_path):
    """The checks a source makes of ``meta/episodes`` against the data rows it reads (``episode_runs``,
    ``LeRobotEpisodes``), and ``data_size``'s lengths, read from ``episode_ints``: an episode whose recorded length,
    first row or entry disagrees with the data files is refused, naming it. Control: the unedited copy passes, and
    ``data_size`` counts each episode's recorded length."""
    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes

    def copy(name):
        root = tmp_path / name
        shutil.copytree(lerobot_datasets["av1_1cam"], root)
        return root

    source = LeRobotV3(str(copy("same")))
    episodes = LeRobotEpisodes(source, 1e-4)  # control
    lengths = pq.read_table(sorted((tmp_path / "same/meta/episodes").glob("*/*.parquet"))[0])["length"].to_pylist()
    assert list(source.data_size().lengths) == lengths and sum(lengths) == len(episodes.arrays["index"])
    assert list(source.data_size([1]).lengths) == [lengths[1]]

    root = copy("length")
    _episodes_edited(root, lambda t: _set(t, "length", 1, lengths[1] - 1))
    with pytest.raises(SourceError, match=f"episode 1: {lengths[1]} rows in the data files but meta/episodes says"):
        LeRobotEpisodes(LeRobotV3(str(root)), 1e-4)
    root = copy("first")
    _episodes_edited(root, lambda t: _set(t, "dataset_from_index", 1, t["dataset_from_index"][1].as_py() + 1))
    with pytest.raises(SourceError, match="episode 1: the 'index' column is not"):
        LeRobotEpisodes(LeRobotV3(str(root)), 1e-4)
    root = copy("missing")
    _episodes_edited(root, lambda t: t.filter(pc.not_equal(t["episode_index"], 2)))
    with pytest.raises(SourceError, match="episode 2 has rows in data/ but no entry in meta/episodes"):
        LeRobotEpisodes(LeRobotV3(str(root)), 1e-4)
    with pytest.raises(SourceError, match=r"episodes \[2\] are not in meta/episodes"):
        LeRobotV3(str(root)).data_size([1, 2])


def test_an_episodes_file_replaced_while_read_is_read_again(lerobot_datasets, tmp_path, monkeypatch):
    """``compat.ParquetReads.episodes`` keys the table it keeps by the files as they were before it read them: one
    replaced during the read (here right after it) is not found under its new stat holding the old table, so the
    next read (the dataset's metadata, or another component on the root) gives the file's new values. The first
    read's table is the old file's, so the check sees the replacement (a key taken after the read served it)."""
    from robo_loaders_plugin.lerobot.compat import ParquetReads

    root = tmp_path / "replaced"
    shutil.copytree(lerobot_datasets["av1_1cam"], root)
    (path,) = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    old = pq.read_table(path)["length"].to_pylist()
    reads = ParquetReads()
    real = ParquetReads.read_except

    def replaced_after(self, p, prefix):
        table = real(self, p, prefix)
        if str(p) == str(path) and not getattr(self, "_replaced", False):
            self._replaced = True
            edited = _set(pq.read_table(path), "length", 0, old[0] + 1)
            pq.write_table(edited, str(path) + ".new")
            os.replace(str(path) + ".new", path)  # a writer's atomic replace: a new inode
        return table

    monkeypatch.setattr(ParquetReads, "read_except", replaced_after)
    first = reads.episodes(root)
    assert first["length"] == old  # read before the replacement
    again = reads.episodes(root)
    assert again["length"] == [old[0] + 1, *old[1:]]


def test_tables_read_directly_from_kept_copies_serve_lerobots_items_without_reading_parquet(
    lerobot_datasets, tmp_path, monkeypatch
):
    """A later start's block with kept copies (``mixtures.kept_tables``) builds LeRobot's metadata and dataset from
    the copies, opening no parquet file, and serves LeRobot's own items, episodes and tasks (three cameras, several
    data and video files); an edited file is read again on the next start (control: the count of parquet opens
    sees the reads)."""
    import torch
    from lerobot.datasets.io_utils import load_episodes, load_tasks
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.lerobot import compat
    from robo_loaders_plugin.mixtures.kept_tables import KeptTables

    root = tmp_path / "copy"
    shutil.copytree(lerobot_datasets["h264_3cam_multifile"], root)
    opened = []
    real_open = pq.ParquetFile

    def counted(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", counted)

    def start():
        opened.clear()
        with compat.tables_read_directly(KeptTables(str(tmp_path / "cache"))):
            return LeRobotDataset("local/x", root=root, episodes=[0, 2], return_uint8=True)

    first = start()
    assert opened  # control: the first start reads the files
    kept = start()
    assert opened == []
    monkeypatch.setattr(pq, "ParquetFile", real_open)
    reference = LeRobotDataset("local/x", root=root, episodes=[0, 2], return_uint8=True)
    assert kept.meta.episodes.to_dict() == load_episodes(root).to_dict() == first.meta.episodes.to_dict()
    assert kept.meta.tasks.equals(load_tasks(root)) and kept.hf_dataset.features == reference.hf_dataset.features
    assert kept.hf_dataset.data.table.equals(reference.hf_dataset.data.table)
    assert len(kept) == len(reference) > 2
    for i in (0, len(kept) // 2, len(kept) - 1):
        a, b = kept[i], reference[i]
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)
    (data,) = sorted((root / "data").glob("*/*.parquet"))[:1]
    table = pq.read_table(data)
    edited = table.set_column(
        table.schema.get_field_index("timestamp"), "timestamp", pc.add(table.column("timestamp"), 0.5)
    )
    pq.write_table(edited, data)
    monkeypatch.setattr(pq, "ParquetFile", counted)
    after = start()
    assert [os.path.realpath(p) for p in opened] == [os.path.realpath(data)]  # the edited file alone read again
    assert after.hf_dataset.data.table.column("timestamp") != kept.hf_dataset.data.table.column("timestamp")


def test_a_dataset_of_a_schema_read_before_equals_the_constructors_own(lerobot_datasets, tmp_path, monkeypatch):
    """``ParquetReads.dataset`` runs datasets' constructor once per schema in a block and gives every later table
    of that schema a copy of the first one's attributes: each copy must equal the constructor's own ``Dataset`` of
    its table (rows, features, schema with its metadata, LeRobot's transform) with a fingerprint of its own, a
    transform set on one not on another; a table of another schema, or other ``features``, is built by the
    constructor. Through LeRobot: the episodes and data of a second root with the schema of a first one equal
    LeRobot's own reads. Controls: the two tables differ (a copy serving the first's rows would be seen), and
    the constructor's count sees every build."""
    import datasets
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.datasets.feature_utils import get_hf_features_from_features
    from lerobot.datasets.io_utils import hf_transform_to_torch, load_episodes, load_nested_dataset

    from robo_loaders_plugin.lerobot import compat
    from robo_loaders_plugin.lerobot.compat import ParquetReads

    root = lerobot_datasets["av1_1cam"]
    features = get_hf_features_from_features(LeRobotDatasetMetadata("local/x", root=root).features)
    (path,) = sorted((root / "data").glob("*/*.parquet"))
    whole = pq.read_table(path).cast(features.arrow_schema)
    first, second = whole.slice(0, 40), whole.slice(40)
    built = []
    constructor = datasets.Dataset.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        constructor(self, *args, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "__init__", counted)
    reads = ParquetReads()
    one, two = reads.dataset(first, features), reads.dataset(second, features)
    assert len(built) == 1  # the second from the first's attributes
    expected = datasets.Dataset(second, info=datasets.DatasetInfo(features=features))
    assert two.features == expected.features and two.to_dict() == expected.to_dict()
    assert two.data.schema.equals(expected.data.schema, check_metadata=True)
    assert one.to_dict() != expected.to_dict()  # control: serving the first's rows would be seen
    assert two._fingerprint != one._fingerprint and not two.cache_files
    assert two._indexes is not one._indexes and two.info is not one.info
    one.set_transform(hf_transform_to_torch)
    assert two.format == expected.format and two[0] == expected[0]  # the transform on one is not on two
    two.set_transform(hf_transform_to_torch)
    expected.set_transform(hf_transform_to_torch)
    assert all((two[5][k] == expected[5][k]).all() for k in expected[5])
    # another schema (a column's type), or other features: the constructor's
    built.clear()
    at = whole.schema.get_field_index("timestamp")
    other = whole.set_column(at, "timestamp", whole["timestamp"].cast(pa.float64()))
    assert reads.dataset(other).features != one.features and len(built) == 1
    renamed = datasets.Features({("x." + k if k == "index" else k): v for k, v in features.items()})
    relabelled = reads.dataset(first.rename_columns(list(renamed)), renamed)
    assert len(built) == 2 and "x.index" in relabelled.features
    # a datasets release whose Dataset has attributes the copy does not know: the constructor's
    monkeypatch.setattr(compat, "DATASET_ATTRIBUTES", compat.DATASET_ATTRIBUTES | {"_a_new_state"})
    assert reads.dataset(second, features).to_dict() == expected.to_dict() and len(built) == 3
    monkeypatch.undo()
    monkeypatch.setattr(datasets.Dataset, "__init__", counted)
    # through LeRobot's readers: a second root of the first's schema, its own values
    edited = tmp_path / "edited"
    shutil.copytree(root, edited)
    (episodes_path,) = sorted((edited / "meta" / "episodes").glob("*/*.parquet"))
    lengths = pq.read_table(episodes_path)["length"].to_pylist()
    pq.write_table(_set(pq.read_table(episodes_path), "length", 0, lengths[0] + 7), episodes_path)
    (data_path,) = sorted((edited / "data").glob("*/*.parquet"))
    data = pq.read_table(data_path)
    pq.write_table(_set(data, "timestamp", 3, data["timestamp"][3].as_py() + 0.5), data_path)
    built.clear()
    reads = ParquetReads()
    mine = {r: (reads.episodes(r), reads.data(r / "data", features, None, original=None)) for r in (root, edited)}
    assert len(built) == 2  # the first root's episodes and data by the constructor, the second's copied
    for r, (episodes, data) in mine.items():
        assert episodes.to_dict() == load_episodes(r).to_dict() and episodes.features == load_episodes(r).features
        assert data.to_dict() == load_nested_dataset(r / "data", features=features).to_dict()
    assert reads.episodes(edited)["length"][0] == lengths[0] + 7 != reads.episodes(root)["length"][0]
