"""``mixtures.kept_tables``: a parquet table's checked Arrow copy is served on a later start only while its file's
stat is the one it was read at and its bytes match their digest; anything else reads the parquet file again."""

import logging
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_loaders_plugin.mixtures import kept_tables as kt


def _write(path, start=1000, rows=100):
    table = pa.table({"index": pa.array(range(start, start + rows), pa.int64()), "task": ["pick"] * rows})
    pq.write_table(table, path)
    return pq.read_table(path)


class _Reads:
    """``read_parquet`` for :meth:`KeptTables.read`, counting the parquet reads."""

    def __init__(self, path, columns=None):
        self.path, self.columns, self.count = path, columns, 0

    def __call__(self):
        self.count += 1
        return pq.ParquetFile(self.path).read(columns=self.columns)


def _only_copy(kept):
    (name,) = os.listdir(kept.dir)
    return os.path.join(kept.dir, name)


def test_a_kept_copy_is_served_while_its_file_is_unchanged_and_equals_the_parquet_read(tmp_path):
    path = tmp_path / "file-000.parquet"
    expected = _write(path)
    reads = _Reads(path)
    first = kt.KeptTables(str(tmp_path / "cache")).read(str(path), "all", reads)
    later = kt.KeptTables(str(tmp_path / "cache"))  # a later start: a new object, the copy on disk
    again = later.read(str(path), "all", reads)
    assert reads.count == 1 and first.equals(expected) and again.equals(expected, check_metadata=True)
    assert again.schema.metadata == expected.schema.metadata  # pandas/huggingface metadata as the file's
    # column sets are kept apart: another set reads the file once, then is served too
    some = _Reads(path, ["index"])
    assert later.read(str(path), '["index"]', some).column_names == ["index"]
    assert later.read(str(path), '["index"]', some).column_names == ["index"] and some.count == 1
    assert later.read(str(path), "all", reads).num_columns == 2 and reads.count == 1


@pytest.mark.parametrize("change", ["rewritten", "same_size_values", "touched", "replaced"])
def test_a_changed_file_is_read_again_and_its_copy_replaced(tmp_path, change):
    path = tmp_path / "file-000.parquet"
    _write(path)
    kept = kt.KeptTables(str(tmp_path / "cache"))
    reads = _Reads(path)
    kept.read(str(path), "all", reads)
    if change == "rewritten":
        expected = _write(path, start=0, rows=50)
    elif change == "same_size_values":  # the same size, other values: the stat's mtime/ctime say so
        expected = _write(path, start=2000)
    elif change == "touched":
        expected = pq.read_table(path)
        os.utime(path, ns=(1, 1))
    else:  # another file renamed onto the path (a new inode)
        other = tmp_path / "other.parquet"
        expected = _write(other, start=5)
        os.replace(other, path)
    got = kt.KeptTables(str(tmp_path / "cache")).read(str(path), "all", reads)
    assert reads.count == 2 and got.equals(expected)
    assert kt.KeptTables(str(tmp_path / "cache")).read(str(path), "all", reads).equals(expected)
    assert reads.count == 2  # the replaced copy is served next
    assert len(os.listdir(kept.dir)) == 1  # replaced, not piled up


def _flip_value(copy: str, value: int) -> None:
    """Flip a bit of ``value``'s int64 bytes in the copy (a byte of the data, not of its framing)."""
    data = bytearray(open(copy, "rb").read())
    at = data.index(value.to_bytes(8, "little"))
    data[at] ^= 0x01
    with open(copy, "wb") as f:
        f.write(data)


def _refused(caplog) -> int:
    return sum("kept table" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)


def test_a_bit_flipped_or_cut_copy_is_refused_and_the_parquet_file_read(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="robo_loaders_plugin")
    path = tmp_path / "file-000.parquet"
    expected = _write(path)
    kept = kt.KeptTables(str(tmp_path / "cache"))
    reads = _Reads(path)
    kept.read(str(path), "all", reads)
    copy = _only_copy(kept)
    pristine = open(copy, "rb").read()
    _flip_value(copy, 1050)
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 2 and _refused(caplog) == 1
    assert open(copy, "rb").read() == pristine  # written again whole
    with open(copy, "r+b") as f:  # cut short
        f.truncate(len(pristine) // 2)
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 3 and _refused(caplog) == 2
    with open(copy, "wb") as f:  # of another format (an older magic)
        f.write(b"RLTABLE0" + pristine[8:])
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 4 and _refused(caplog) == 3
    # negative control: without the digest's check the flipped copy parses and serves another value
    _flip_value(copy, 1050)
    monkeypatch.setattr(kt.xxhash, "xxh3_128_digest", lambda body: open(copy, "rb").read()[8:24])
    served = kt.KeptTables(str(tmp_path / "cache")).read(str(path), "all", reads)
    assert reads.count == 4 and not served.equals(expected)
    assert 1050 not in served.column("index").to_pylist()


def test_another_files_copy_under_the_name_is_not_served(tmp_path):
    """A copy whose recorded file, stat or column set is not this read's (a name collision, a copy moved by hand)
    is read again, never served."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _write(a, start=0)
    expected = _write(b, start=500)
    kept = kt.KeptTables(str(tmp_path / "cache"))
    kept.read(str(a), "all", _Reads(a))
    shutil.copyfile(_only_copy(kept), kept._path(os.path.realpath(b), "all"))
    reads = _Reads(b)
    assert kept.read(str(b), "all", reads).equals(expected) and reads.count == 1
    shutil.copyfile(kept._path(os.path.realpath(b), "all"), kept._path(os.path.realpath(b), '["index"]'))
    columns = _Reads(b, ["index"])
    assert kept.read(str(b), '["index"]', columns).column_names == ["index"] and columns.count == 1


def test_a_cache_root_that_cannot_be_written_still_reads_and_a_missing_file_raises_its_own_error(tmp_path):
    path = tmp_path / "file-000.parquet"
    expected = _write(path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache root's directory would be")
    kept = kt.KeptTables(str(blocked))
    reads = _Reads(path)
    assert kept.read(str(path), "all", reads).equals(expected)
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 2  # nothing kept, no error
    gone = tmp_path / "gone.parquet"
    with pytest.raises(FileNotFoundError):
        kept.read(str(gone), "all", _Reads(gone))


def test_a_table_past_the_size_kept_is_read_from_parquet_at_every_start(tmp_path, monkeypatch):
    """Copies are kept for small tables only (``KEPT_TABLE_BYTES``): a bigger one is not written, and read from its
    parquet file each time (control: under the limit the same table is kept and served)."""
    path = tmp_path / "file-000.parquet"
    expected = _write(path)
    reads = _Reads(path)
    monkeypatch.setattr(kt, "KEPT_TABLE_BYTES", 100)
    kept = kt.KeptTables(str(tmp_path / "cache"))
    assert kept.read(str(path), "all", reads).equals(expected)
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 2
    assert not os.path.isdir(kept.dir) or os.listdir(kept.dir) == []
    monkeypatch.setattr(kt, "KEPT_TABLE_BYTES", 2 << 20)
    kept.read(str(path), "all", reads)
    assert kept.read(str(path), "all", reads).equals(expected) and reads.count == 3  # control: kept, then served
