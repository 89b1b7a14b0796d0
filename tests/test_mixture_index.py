"""The mixture index (``mixtures.index``): a component's metadata is read once and reused while its files are
unchanged; a component edited, truncated, renamed, added or given another file is read again, alone, and its new
values served. Opens are counted with an audit hook, so "not read" means no file of the component was opened."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from robo_loaders_plugin.mixtures.index import INDEX_DIR, ComponentIndex
from robo_loaders_plugin.storage.fingerprint import Fingerprint

OPENED: list[str] = []
_WATCHING: list[str] = []  # the folder whose opens are counted (an audit hook cannot be removed: it is switched)


def _audit(event, args):
    if event == "open" and _WATCHING and isinstance(args[0], str) and args[0].startswith(_WATCHING[0]):
        OPENED.append(args[0])


sys.addaudithook(_audit)


@pytest.fixture
def components(tmp_path):
    """Five components with a ``meta/`` folder (an info file and an episodes file) and a data file, the index in
    its own cache root; yields ``(paths, cache root)`` with the components' opens counted."""
    base = tmp_path / "data"
    paths = []
    for k in range(5):
        root = base / f"c{k}"
        (root / "meta" / "episodes").mkdir(parents=True)
        (root / "meta" / "info.json").write_text(json.dumps({"value": k}))
        (root / "meta" / "episodes" / "000.bin").write_bytes(bytes(range(k + 1)))
        (root / "data.bin").write_bytes(b"frames")
        paths.append(str(root))
    _WATCHING[:] = [str(base)]
    OPENED.clear()
    yield paths, str(tmp_path / "cache")
    _WATCHING.clear()


def index_of(paths, cache_dir):
    def read(k):
        with open(os.path.join(paths[k], "meta", "info.json")) as f:
            doc = json.load(f)
        size = os.path.getsize(os.path.join(paths[k], "meta", "episodes", "000.bin"))
        return {"value": doc["value"], "episodes_bytes": size}

    return ComponentIndex("test-meta-1", ("meta",), read, cache_dir)


def served(paths, cache_dir):
    """``(values, components read, files opened)`` of one start."""
    OPENED.clear()
    index = index_of(paths, cache_dir)
    values = [r["value"] for r in index.records(paths)]
    return values, index.reread, list(OPENED)


def test_a_second_start_opens_no_components_file_and_an_edited_one_is_read_alone(components):
    """Issue 44 item 3. First start: every component read (in the pool). Second: none read, no file of any
    component opened (the stat says they are unchanged). One component's info edited in place to the same size
    with its mtime set back (what ``cp -p`` or ``rsync -t`` leave): that one is read again and its new value served,
    the others not opened. Negative control: with the fingerprint comparison disabled, the stale value is served,
    so the check is what keeps it out."""
    paths, cache_dir = components
    values, read, opened = served(paths, cache_dir)
    assert values == [0, 1, 2, 3, 4] and read == [0, 1, 2, 3, 4] and opened
    assert os.path.isdir(os.path.join(cache_dir, INDEX_DIR, "test-meta-1"))

    values, read, opened = served(paths, cache_dir)
    assert values == [0, 1, 2, 3, 4] and read == [] and opened == []

    info = os.path.join(paths[2], "meta", "info.json")
    stat = os.stat(info)
    with open(info, "w") as f:
        f.write(json.dumps({"value": 7}))  # same size as {"value": 2}
    os.utime(info, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.path.getsize(info) == stat.st_size

    # control first, on a copy of the index: without the comparison it serves the stale value (and reads nothing)
    control = cache_dir + "-control"
    shutil.copytree(cache_dir, control)
    original = Fingerprint.differences
    Fingerprint.differences = lambda self, current: []
    try:
        values, read, _ = served(paths, control)
    finally:
        Fingerprint.differences = original
    assert values[2] == 2 and read == []  # stale: what the check prevents

    values, read, opened = served(paths, cache_dir)
    assert values == [0, 1, 7, 3, 4] and read == [2]
    assert opened and all(p.startswith(paths[2] + os.sep) for p in opened), opened
    assert served(paths, cache_dir)[1:] == ([], [])  # kept: the next start reads nothing again


def test_truncated_added_removed_renamed_and_new_components_are_read_again(components):
    """Every change the index must see: a metadata file truncated, a file added to ``meta/``, one removed, two
    components swapped between their paths, a component added to the mixture and one left out. Each time exactly
    the changed components are read and their current values served; a change outside ``meta/`` (the frames) is
    no metadata change."""
    paths, cache_dir = components
    assert served(paths, cache_dir)[1] == [0, 1, 2, 3, 4]

    episodes = os.path.join(paths[1], "meta", "episodes", "000.bin")
    with open(episodes, "r+b") as f:
        f.truncate(1)
    index = index_of(paths, cache_dir)
    records = index.records(paths)
    assert index.reread == [1] and records[1]["episodes_bytes"] == 1

    open(os.path.join(paths[3], "meta", "episodes", "001.bin"), "wb").close()
    assert served(paths, cache_dir)[1] == [3]
    os.remove(os.path.join(paths[3], "meta", "episodes", "001.bin"))
    assert served(paths, cache_dir)[1] == [3]

    with open(os.path.join(paths[4], "data.bin"), "ab") as f:
        f.write(b"more")
    assert served(paths, cache_dir)[1] == []

    tmp = paths[0] + ".tmp"
    os.rename(paths[0], tmp)
    os.rename(paths[4], paths[0])
    os.rename(tmp, paths[4])
    values, read, _ = served(paths, cache_dir)
    assert values == [4, 1, 2, 3, 0] and read == [0, 4]

    extra = os.path.join(os.path.dirname(paths[0]), "c5")
    shutil.copytree(paths[2], extra)
    with open(os.path.join(extra, "meta", "info.json"), "w") as f:
        f.write(json.dumps({"value": 5}))
    values, read, _ = served([*paths, extra], cache_dir)
    assert values == [4, 1, 2, 3, 0, 5] and read == [5]
    values, read, opened = served(paths[1:3], cache_dir)
    assert values == [1, 2] and read == [] and opened == []


def test_a_cache_root_that_cannot_be_written_reads_every_component(components, tmp_path):
    """Without a writable cache root nothing is kept: every start reads every component (slower, never stale)."""
    paths, _ = components
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for _ in range(2):
        values, read, _ = served(paths, str(blocker))
        assert values == [0, 1, 2, 3, 4] and read == [0, 1, 2, 3, 4]


def test_a_one_file_component_is_keyed_by_its_stat_and_each_key_is_a_record_of_its_own(tmp_path):
    """A component that is one file (a robomimic HDF5) with ``by_content=False``: reused while its stat holds, read
    again alone on any change of it, a ``touch`` included (its digest would read every byte of a large file to save
    a metadata read); an edit in place with the size and mtime kept is read again (the ctime changed), and its new
    value served. Each key (a filter key) is a record of its own. Negative control: the same edit with the
    fingerprint comparison disabled serves the stale value."""
    paths = []
    for k in range(3):
        (tmp_path / f"f{k}.bin").write_text(f"v{k}")
        paths.append(str(tmp_path / f"f{k}.bin"))
    cache_dir = str(tmp_path / "cache")

    def start(keys, root=cache_dir):
        def read(k):
            return {"value": (tmp_path / f"f{k}.bin").read_text()}

        index = ComponentIndex("test-file-1", (), read, root, by_content=False)
        return [r["value"] for r in index.records(paths, keys)], index.reread

    assert start(["train"] * 3) == (["v0", "v1", "v2"], [0, 1, 2])
    assert start(["train"] * 3) == (["v0", "v1", "v2"], [])
    assert start(["valid"] * 3)[1] == [0, 1, 2] and start(["valid"] * 3)[1] == []

    os.utime(paths[0])  # touched: same bytes, new mtime
    assert start(["train"] * 3) == (["v0", "v1", "v2"], [0])

    stat = os.stat(paths[1])
    with open(paths[1], "w") as f:
        f.write("w1")  # same size
    os.utime(paths[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    control = cache_dir + "-control"
    shutil.copytree(cache_dir, control)
    original = Fingerprint.differences
    Fingerprint.differences = lambda self, current: []
    try:
        assert start(["train"] * 3, control) == (["v0", "v1", "v2"], [])  # stale: what the comparison keeps out
    finally:
        Fingerprint.differences = original
    assert start(["train"] * 3) == (["v0", "w1", "v2"], [1])


def test_the_index_line_is_said_once_per_start_unless_something_was_read(components, caplog):
    """robomimic asks for a mixture's records once per split and check; the "N of M reused" line is said once for
    the same components, and again whenever a component was read (news). Control: another set of components is
    said."""
    import logging

    paths, cache_dir = components

    def lines(ps):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            index_of(paths, cache_dir).records(ps)
        return [r.getMessage() for r in caplog.records if "mixture index:" in r.getMessage()]

    first = lines(paths)
    assert len(first) == 1 and "0 of 5 components' metadata reused, 5 read" in first[0], first
    assert lines(paths) == []  # nothing read, said already
    with open(os.path.join(paths[0], "meta", "info.json"), "w") as f:
        json.dump({"value": 9}, f)
    edited = lines(paths)
    assert len(edited) == 1 and "4 of 5 components' metadata reused, 1 read" in edited[0], edited
    assert len(lines(paths[:3])) == 1  # the control: other components


def test_tqdm_s_lock_is_made_before_threads_read_metadata():
    """Two threads in tqdm's ``thread_map`` at once (HF ``datasets`` reading two components' parquet files): without
    a class-wide lock both make one and both delete it, and the second fails (the control, the failure seen in CI);
    once ``tqdm_lock_made`` ran, both find the lock, put it back, and it stays."""
    import threading

    from tqdm import tqdm
    from tqdm.contrib.concurrent import ensure_lock

    from robo_loaders_plugin.mixtures.index import tqdm_lock_made

    both_looked, both_in = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)

    class HfLike(tqdm):  # HF datasets passes its own subclass; this one lets both threads look before either makes
        @classmethod
        def get_lock(cls):
            both_looked.wait()
            return super().get_lock()

    def two_threads() -> list:
        errors: list = []

        def one():
            try:
                with ensure_lock(HfLike):
                    both_in.wait()  # both inside before either leaves, as two parquet reads overlap
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return errors

    saved = tqdm.__dict__.get("_lock")
    try:
        for cls in (tqdm, HfLike):
            if "_lock" in cls.__dict__:
                delattr(cls, "_lock")
        errors = two_threads()
        assert [type(e) for e in errors] == [AttributeError] and "_lock" in str(errors[0])
        tqdm_lock_made()
        assert two_threads() == [] and "_lock" in tqdm.__dict__
    finally:
        if saved is not None:
            tqdm._lock = saved


def _kept(cache_dir, kind="test-meta-1"):
    folder = os.path.join(cache_dir, INDEX_DIR, kind)
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))]


def test_an_edited_or_damaged_record_is_read_again_never_served(components):
    """A kept record is served only while it is what was written: one edited (or bit-flipped) so that it still
    parses, with the component unchanged, is read again from the component's files and its true value served; one of
    another shape that ``parse`` refuses (a key missing, with its digest made to match) is read again too, not a
    failed start. Negative control: with the record's digest not compared, the edited value is served."""
    from robo_loaders_plugin.mixtures import index as index_module

    paths, cache_dir = components
    assert served(paths, cache_dir)[1] == [0, 1, 2, 3, 4]
    stored = {json.load(open(p))["record"]["value"]: p for p in _kept(cache_dir)}
    with open(stored[2]) as f:
        text = f.read()
    flipped = text.replace('"value": 2', '"value": 3')
    assert flipped != text
    control = cache_dir + "-control"
    shutil.copytree(cache_dir, control)
    with open(stored[2], "w") as f:
        f.write(flipped)
    with open(stored[2].replace(cache_dir, control), "w") as f:
        f.write(flipped)

    original = index_module.record_digest
    index_module.record_digest = lambda record: json.load(open(stored[2].replace(cache_dir, control)))["record_digest"]
    try:
        values, read, _ = served(paths, control)
    finally:
        index_module.record_digest = original
    assert values[2] == 3 and 2 not in read  # the control: the edit served

    values, read, _ = served(paths, cache_dir)
    assert values == [0, 1, 2, 3, 4] and read == [2]

    doc = json.load(open(stored[4]))
    del doc["record"]["value"]
    doc["record_digest"] = index_module.record_digest(doc["record"])
    with open(stored[4], "w") as f:
        json.dump(doc, f)
    index = ComponentIndex(
        "test-meta-1", ("meta",), index_of(paths, cache_dir).read, cache_dir, parse=lambda r: r["value"]
    )
    assert index.records(paths) == [0, 1, 2, 3, 4] and index.reread == [4]


def test_a_first_run_and_a_reuse_give_the_same_values(tmp_path):
    """A record just read is given as a kept one comes back (through JSON: tuples as lists), so what a start decides
    from it does not depend on whether the index held it; LeRobot's records become metadata with LeRobot's tuple
    shapes either way (``IndexedMeta``)."""
    from robo_loaders_plugin.lerobot.mixture_meta import IndexedMeta

    root = tmp_path / "c"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{}")
    record = {
        "features": {"action": {"dtype": "float32", "shape": (7,), "names": None}},
        "fps": 15,
        "root": str(root),
        "has_language_columns": False,
        "stats": None,
    }
    index = ComponentIndex("test-lerobot-1", ("meta",), lambda k: record, str(tmp_path / "cache"), parse=IndexedMeta)
    first, again = index.records([str(root)])[0], index.records([str(root)])[0]
    assert index.reread == [] and first.features == again.features
    assert first.features["action"]["shape"] == (7,) and again.features["action"]["shape"] == (7,)
    raw = ComponentIndex("test-raw-1", ("meta",), lambda k: record, str(tmp_path / "cache"))
    assert raw.records([str(root)])[0] == raw.records([str(root)])[0]  # the first given through JSON too


def test_a_reuse_gives_the_kept_records_in_the_callers_thread_and_reads_the_others_in_the_pool(components, monkeypatch):
    """A start whose components are unchanged starts no thread (a stat and a small JSON file each: Python holding
    the GIL, which threads only slow down); a first start and an edited component are read in the pool, off the
    caller's thread (control: the first start's reads are seen there)."""
    import threading

    from robo_loaders_plugin.mixtures import index as index_module

    paths, cache_dir = components
    pools, readers = [], []
    real_pool = index_module.ThreadPoolExecutor

    def counted(*args, **kwargs):
        pools.append(args)
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(index_module, "ThreadPoolExecutor", counted)

    def start():
        index = index_of(paths, cache_dir)
        read = index.read
        index.read = lambda k: readers.append(threading.get_ident()) or read(k)
        return [r["value"] for r in index.records(paths)], index.reread

    assert start() == ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4]) and len(pools) == 1
    assert len(readers) == 5 and threading.get_ident() not in readers  # control: read in the pool
    pools.clear()
    assert start() == ([0, 1, 2, 3, 4], []) and pools == []
    with open(os.path.join(paths[3], "meta", "info.json"), "w") as f:
        f.write(json.dumps({"value": 8}))
    readers.clear()
    assert start() == ([0, 1, 2, 8, 4], [3]) and len(pools) == 1 and pools[0][0] == 1
    assert len(readers) == 1 and threading.get_ident() not in readers
