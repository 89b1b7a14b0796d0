"""RobomimicHdf5.validate at scale (issue 22): the low-level walk raises exactly what the object-API walk raised,
and a file that passed is not walked again until it changes."""

import os

import h5py
import numpy as np
import pytest

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.sources import robomimic_hdf5 as rh
from robo_loaders_plugin.sources.robomimic_hdf5 import RobomimicHdf5


def write(path, demos=4, rows=6):
    with h5py.File(path, "w") as f:
        for i in range(demos):
            g = f.create_group(f"data/demo_{i}")
            g.attrs["num_samples"] = rows
            g.create_dataset("actions", data=np.zeros((rows, 2)))
            g.create_dataset("obs/a", data=np.zeros((rows, 3)))
            g.create_dataset("obs/b", data=np.zeros((rows,)))
    return str(path)


BREAK = {
    "rows": lambda f: (f.__delitem__("data/demo_2/obs/b"), f.create_dataset("data/demo_2/obs/b", data=np.zeros(5))),
    "scalar": lambda f: f.create_dataset("data/demo_1/obs/c", data=3.0),
    "no attribute": lambda f: f["data/demo_3"].attrs.__delitem__("num_samples"),
    "zero": lambda f: f["data/demo_0"].attrs.__setitem__("num_samples", 0),
    "string attribute": lambda f: f["data/demo_0"].attrs.__setitem__("num_samples", "6"),
    "not a group": lambda f: (f.__delitem__("data/demo_1"), f.create_dataset("data/demo_1", data=np.zeros(3))),
    "soft link": lambda f: f["data/demo_2"].__setitem__("obs/c", h5py.SoftLink("/data/demo_0/actions")),
}


def slow_walk(path):
    """What the object-API walk (the validation before issue 22) raises for this file (or None), and the datasets
    it found with another number of rows than their demo's ``num_samples`` (``RobomimicHdf5.unsized``)."""
    src = RobomimicHdf5.__new__(RobomimicHdf5)
    src.path, src.unsized = path, {}
    with h5py.File(path, "r") as f:
        try:
            for demo in rh.sorted_demos(f["data"].keys()):
                src._check_demo_slowly(f, demo)
        except SourceError as exc:
            return str(exc), src.unsized
    return None, src.unsized


@pytest.mark.parametrize("damage", sorted(BREAK))
def test_the_low_level_walk_raises_what_the_object_api_walk_raised(tmp_path, monkeypatch, damage):
    """Both walks refuse the same files with the same line, and find the same datasets not sized per step, which
    are refused where served (``check_sized``: a served ``obs/b`` of 5 rows in a demo of 6)."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5")
    with h5py.File(path, "r+") as f:
        BREAK[damage](f)
    expected, unsized = slow_walk(path)
    if damage == "zero":  # an empty demo is refused where selected only (a filter key may leave it out)
        src = RobomimicHdf5(path)
        with src.open() as f:
            assert "demo_0" not in src.stored_demos(f) and "demo_1" in src.stored_demos(f)
            with pytest.raises(SourceError) as err:
                src.lengths(f, ["demo_1", "demo_0"])
        assert str(err.value) == expected
        return
    if expected is None:  # a soft link to a dataset of the right length is a dataset of the demo
        src = RobomimicHdf5(path)
        assert src.unsized == unsized and bool(unsized) == (damage in ("rows", "scalar"))
        src.check_sized(["actions"])  # sized: served
        for name in unsized:
            with pytest.raises(SourceError, match=rf"data/demo_\d/{name} has .* rows .* but data/demo_\d has"):
                src.check_sized(["actions", name])
        return
    with pytest.raises(SourceError) as err:
        RobomimicHdf5(path)
    assert str(err.value) == expected


def test_an_intact_file_is_checked_without_the_object_api(tmp_path, monkeypatch):
    """The low-level walk handles an ordinary file alone (the object-API walk is only for what it does not expect);
    negative control: a demo whose num_samples is a string ("6", which robomimic's int() accepts) goes to the object
    API."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5")
    slow = []
    check = RobomimicHdf5._check_demo_slowly
    monkeypatch.setattr(RobomimicHdf5, "_check_demo_slowly", lambda self, f, d: slow.append(d) or check(self, f, d))
    RobomimicHdf5(path)
    assert slow == []
    with h5py.File(path, "r+") as f:
        f["data/demo_2"].attrs["num_samples"] = "6"
    RobomimicHdf5(path)
    assert slow == ["demo_2"]


def test_a_file_that_passed_is_not_walked_again_until_it_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5")
    walks = []
    check = RobomimicHdf5._check_demos
    monkeypatch.setattr(RobomimicHdf5, "_check_demos", lambda self, f, d: walks.append(1) or check(self, f, d))
    RobomimicHdf5(path)
    RobomimicHdf5(path)
    assert len(walks) == 1 and os.listdir(tmp_path / "cache" / ".validated")
    # negative control: the file changed (an array resized, as issue 23 A6's attack): walked again, and refused
    # where served, also from the record of that walk
    with h5py.File(path, "r+") as f:
        del f["data/demo_1/actions"]
        f.create_dataset("data/demo_1/actions", data=np.zeros((9, 2)))
    for _ in range(2):
        with pytest.raises(SourceError, match="demo_1/actions has 9 rows"):
            RobomimicHdf5(path).check_sized(["obs/a", "actions"])
    assert len(walks) == 2


def test_a_second_start_takes_the_demos_lengths_from_the_record_until_the_file_changes(tmp_path, monkeypatch):
    """Issue 45 (a million steps on reuse): the lengths the walk read are recorded with it and served by
    ``lengths`` without reading an attribute; negative controls: an edited file's new lengths are read (not the
    recorded ones), and a record whose lengths were damaged is not trusted."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5", demos=5, rows=6)
    demos = [f"demo_{i}" for i in range(5)]
    first = RobomimicHdf5(path)
    with first.open() as f:
        assert first.lengths(f, demos).tolist() == [6] * 5
    reads = []
    length = RobomimicHdf5.length
    monkeypatch.setattr(RobomimicHdf5, "length", staticmethod(lambda f, d: reads.append(d) or length(f, d)))
    second = RobomimicHdf5(path)
    with second.open() as f:
        assert second.lengths(f, demos).tolist() == [6] * 5 and reads == []
        assert second.lengths(f, ["demo_3", "demo_0"]).tolist() == [6, 6]
    with h5py.File(path, "r+") as f:  # the file changes: demo_1 grows to 9 steps
        del f["data/demo_1"]
        g = f.create_group("data/demo_1")
        g.attrs["num_samples"] = 9
        for key, shape in (("actions", (9, 2)), ("obs/a", (9, 3)), ("obs/b", (9,))):
            g.create_dataset(key, data=np.zeros(shape))
    third = RobomimicHdf5(path)
    with third.open() as f:
        assert third.lengths(f, demos).tolist() == [6, 9, 6, 6, 6]
    (record,) = (tmp_path / "cache" / ".validated").iterdir()
    text = record.read_text()
    assert '"demo_1": 9' in text
    record.write_text(text.replace('"demo_1": 9', '"demo_1": "9"'))
    walks = []
    check = RobomimicHdf5._check_demos
    monkeypatch.setattr(RobomimicHdf5, "_check_demos", lambda self, f, d: walks.append(1) or check(self, f, d))
    fourth = RobomimicHdf5(path)
    assert walks == [1]
    with fourth.open() as f:
        assert fourth.lengths(f, demos).tolist() == [6, 9, 6, 6, 6]


def test_a_source_built_without_its_check_reads_the_lengths(tmp_path, monkeypatch):
    """``check=False`` (a conversion's workers): nothing recorded is used, every length is read from the file."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5", demos=3, rows=4)
    RobomimicHdf5(path)
    reads = []
    length = RobomimicHdf5.length
    monkeypatch.setattr(RobomimicHdf5, "length", staticmethod(lambda f, d: reads.append(d) or length(f, d)))
    src = RobomimicHdf5(path, check=False)
    with src.open() as f:
        assert src.lengths(f, ["demo_0", "demo_2"]).tolist() == [4, 4]
    assert reads == ["demo_0", "demo_2"]


def test_the_kept_lengths_do_not_travel_with_the_source(tmp_path, monkeypatch):
    """A pickled source (a worker's copy) leaves the lengths behind and reads them; the original keeps them."""
    import pickle

    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5", demos=3, rows=4)
    src = RobomimicHdf5(path)
    copy = pickle.loads(pickle.dumps(src))
    assert src._lengths == {"demo_0": 4, "demo_1": 4, "demo_2": 4} and copy._lengths == {}
    with copy.open() as f:
        assert copy.lengths(f, ["demo_1"]).tolist() == [4]


def test_a_record_whose_lengths_were_edited_is_not_trusted(tmp_path, monkeypatch):
    """A reviewer's reproduction: a record whose demo length was changed by one, still a whole number (a hand edit,
    a flipped digit), was trusted over the file's ``num_samples``, and every backend then refused the intact file
    ("has shape (30, 3) but ... num_samples=29"). The record holds its own checksum: such a record is ignored and
    the file walked again. Control: the untouched record is used (no walk)."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5", demos=3, rows=6)
    demos = [f"demo_{i}" for i in range(3)]
    RobomimicHdf5(path)
    walks = []
    check = RobomimicHdf5._check_demos
    monkeypatch.setattr(RobomimicHdf5, "_check_demos", lambda self, f, d: walks.append(1) or check(self, f, d))
    RobomimicHdf5(path)
    assert walks == []
    (record,) = (tmp_path / "cache" / ".validated").iterdir()
    text = record.read_text()
    assert '"demo_1": 6' in text
    record.write_text(text.replace('"demo_1": 6', '"demo_1": 5'))
    source = RobomimicHdf5(path)
    assert walks == [1]
    with source.open() as f:
        assert source.lengths(f, demos).tolist() == [6, 6, 6]


def test_a_source_of_the_other_kind_is_one_line(tmp_path):
    """A reviewer's reproduction (``verify --source`` given the other framework's data): a LeRobot root that is a
    file was a ``NotADirectoryError`` traceback, and a robomimic path that is a directory was called "truncated,
    corrupt or not an HDF5 file; re-download it"."""
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotV3

    path = write(tmp_path / "f.hdf5")
    with pytest.raises(SourceError, match=r"f\.hdf5: meta/info.json not found; not a LeRobot v3 dataset root"):
        LeRobotV3(path)
    with pytest.raises(SourceError, match=r"is a directory, not an HDF5 file; give the \.hdf5 file's path"):
        RobomimicHdf5(str(tmp_path))
    # meta/info.json that is not JSON, or not even UTF-8 (a binary file copied over it): one line, not a traceback
    (tmp_path / "ds" / "meta").mkdir(parents=True)
    for body in (b"{not json", b"{\x80\x81 garbage"):
        (tmp_path / "ds" / "meta" / "info.json").write_bytes(body)
        with pytest.raises(SourceError, match=r"ds/meta/info\.json: not valid JSON"):
            LeRobotV3(str(tmp_path / "ds"))


def test_a_file_replaced_after_the_open_does_not_get_the_old_files_record(tmp_path, monkeypatch):
    """A reviewer's reproduction: a file renamed over the path between the source's open and its validation record
    paired the new file's stat with the old file's demo lengths, and every later start trusted them (every backend
    refused the new file: 'has 16 rows, the metadata says 19 steps'). The record is made and used only for the file
    opened. Control: without the replacement the record is saved and the next start reads no attribute."""
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "cache"))
    path = write(tmp_path / "f.hdf5", demos=3, rows=6)
    new = write(tmp_path / "new.hdf5", demos=3, rows=4)
    record = rh._validation_record

    def replaced_meanwhile(p, c):
        if os.path.exists(new):
            os.replace(new, path)
        return record(p, c)

    monkeypatch.setattr(rh, "_validation_record", replaced_meanwhile)
    RobomimicHdf5(path)  # opened the 6-row file; the path names the 4-row one when the record is made
    monkeypatch.setattr(rh, "_validation_record", record)
    source = RobomimicHdf5(path)
    with source.open() as f:
        assert source.lengths(f, ["demo_0", "demo_1", "demo_2"]).tolist() == [4, 4, 4]
    reads = []  # control: this start's record (of the file opened) is used by the next one
    length = RobomimicHdf5.length
    monkeypatch.setattr(RobomimicHdf5, "length", staticmethod(lambda f, d: reads.append(d) or length(f, d)))
    again = RobomimicHdf5(path)
    with again.open() as f:
        assert again.lengths(f, ["demo_0", "demo_1", "demo_2"]).tolist() == [4, 4, 4] and reads == []
