"""core/files.py: the one atomic file write (index, manifest, sidecar, result and README files) and the one
non-blocking flock (caches, RAM stores, conversion leases)."""

import fcntl
import json
import os
import threading

import pytest

from robo_loaders_plugin.core.files import atomic_write_bytes, atomic_write_json, try_flock


def test_atomic_write_json_creates_replaces_keeps_the_layout_asked_and_leaves_nothing_beside(tmp_path):
    path = str(tmp_path / "doc.json")
    atomic_write_json(path, {"b": 1, "a": "é"})
    assert open(path, encoding="utf-8").read() == '{"b": 1, "a": "\\u00e9"}'
    atomic_write_json(path, {"b": 2, "a": "é"}, indent=1, sort_keys=True, ensure_ascii=False)
    assert open(path, encoding="utf-8").read() == '{\n "a": "é",\n "b": 2\n}'
    atomic_write_bytes(str(tmp_path / "raw"), b"\x00\xff")
    assert (tmp_path / "raw").read_bytes() == b"\x00\xff"
    assert sorted(os.listdir(tmp_path)) == ["doc.json", "raw"]


def test_a_failed_write_changes_nothing(tmp_path):
    path = tmp_path / "doc.json"
    atomic_write_json(str(path), {"old": True})
    with pytest.raises(TypeError):
        atomic_write_json(str(path), {"new": object()})  # not serialisable: nothing written
    with pytest.raises(OSError):
        atomic_write_bytes(str(tmp_path / "missing" / "doc.json"), b"{}")
    assert json.loads(path.read_text()) == {"old": True} and os.listdir(tmp_path) == ["doc.json"]


def test_readers_see_the_old_document_or_the_new_one_and_threads_may_write_one_file_together(tmp_path):
    """What the rename is for (a reader never opens half a document), and why a temporary name has a random part
    (two threads of one process writing the same sidecar must not share one)."""
    path = str(tmp_path / "doc.json")
    atomic_write_json(path, {"n": 0, "pad": "x" * 100_000})
    stop, seen, errors = threading.Event(), set(), []

    def write(k):
        for n in range(1, 40):
            atomic_write_json(path, {"n": n + 1000 * k, "pad": "x" * 100_000})

    def read():
        while not stop.is_set():
            with open(path) as f:
                seen.add(json.load(f)["n"])  # a half-written file would not parse

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=lambda k=k: errors.extend(_run(write, k))) for k in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert errors == [] and seen and os.listdir(tmp_path) == ["doc.json"]


def _run(f, *args):
    try:
        f(*args)
        return []
    except Exception as exc:  # noqa: BLE001 - reported by the test
        return [exc]


def test_try_flock_tells_a_held_lock_from_a_free_one(tmp_path):
    path = str(tmp_path / "lock")
    a = os.open(path, os.O_RDWR | os.O_CREAT)
    b = os.open(path, os.O_RDWR)  # another open file of the same path: another holder, even in this process
    try:
        assert try_flock(a) is True and try_flock(b) is False  # exclusive by default
        assert try_flock(b, fcntl.LOCK_SH) is False
        fcntl.flock(a, fcntl.LOCK_UN)
        assert try_flock(a, fcntl.LOCK_SH) and try_flock(b, fcntl.LOCK_SH)  # shared locks coexist
        assert try_flock(a, fcntl.LOCK_EX) is False  # upgrading while b shares it
        os.close(b)  # a lock goes with its file (as with a dead process)
        b = None
        assert try_flock(a, fcntl.LOCK_EX) is True
    finally:
        os.close(a)
        if b is not None:
            os.close(b)


def test_try_flock_raises_what_is_not_a_busy_lock():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        try_flock(r)  # a closed descriptor is an error, never "someone else holds it"
