"""core/files.py: the one atomic file write (index, manifest, sidecar, result and README files) and the one way
file locks are taken (caches, RAM stores, conversion leases and manifests, remote copies): every lock an flock,
exclusive ones through filelock, and no other module of the package locking files itself."""

import ast
import fcntl
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from robo_loaders_plugin.core.files import (
    atomic_write_bytes,
    atomic_write_json,
    path_lock,
    try_lock,
    unlock,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def test_try_lock_tells_a_held_lock_from_a_free_one(tmp_path):
    path = str(tmp_path / "lock")
    a = os.open(path, os.O_RDWR | os.O_CREAT)
    b = os.open(path, os.O_RDWR)  # another open file of the same path: another holder, even in this process
    try:
        assert try_lock(a) is True and try_lock(b) is False  # exclusive by default
        assert try_lock(b, shared=True) is False
        unlock(a)
        assert try_lock(a, shared=True) and try_lock(b, shared=True)  # shared locks coexist
        assert try_lock(a) is False  # upgrading while b shares it
        os.close(b)  # a lock goes with its file (as with a dead process)
        b = None
        assert try_lock(a) is True
    finally:
        os.close(a)
        if b is not None:
            os.close(b)


def test_try_lock_raises_what_is_not_a_busy_lock():
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        try_lock(r)  # a closed descriptor is an error, never "someone else holds it"
    with pytest.raises(OSError):
        try_lock(r, shared=True)


def test_every_kind_of_lock_excludes_the_others_on_one_file_across_processes(tmp_path):
    """The locks are one primitive (flock): a path_lock, an exclusive try_lock and a shared lock of one file held
    in another process each keep the others out, and are seen by fcntl itself (an independent observer)."""
    path = str(tmp_path / "lock")
    holder = (
        "import os, sys, time\n"
        "from robo_loaders_plugin.core.files import lock_shared, path_lock\n"
        "how, path = sys.argv[1], sys.argv[2]\n"
        "if how == 'path':\n"
        "    lock = path_lock(path); lock.acquire()\n"
        "else:\n"
        "    fd = os.open(path, os.O_RDWR | os.O_CREAT); lock_shared(fd)\n"
        "print('held', flush=True); time.sleep(60)\n"
    )
    for how in ("path", "shared"):
        p = subprocess.Popen(
            [sys.executable, "-c", holder, how, path], stdout=subprocess.PIPE, text=True, env={**os.environ}
        )
        try:
            assert p.stdout.readline().strip() == "held"
            fd = os.open(path, os.O_RDWR)
            try:
                assert try_lock(fd) is False  # an exclusive lock: refused by either
                assert try_lock(fd, shared=True) is (how == "shared")  # shared locks coexist
                if how == "shared":
                    unlock(fd)
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the kernel says, not our helper
                started = time.monotonic()
                with pytest.raises(TimeoutError), path_lock(path).acquire(timeout=0.3):
                    pass
                assert time.monotonic() - started >= 0.3
            finally:
                os.close(fd)
        finally:
            p.kill()
            p.wait()
    with path_lock(path):  # the holders are gone: free again, and the file kept
        fd = os.open(path, os.O_RDWR)
        try:
            assert try_lock(fd) is False  # held by this process's path_lock, through another open file
        finally:
            os.close(fd)
    assert os.path.exists(path)


def test_path_locks_of_two_threads_take_turns(tmp_path):
    path, inside, overlaps = str(tmp_path / "lock"), [], []

    def work():
        for _ in range(5):
            with path_lock(path):
                inside.append(1)
                overlaps.append(len(inside))
                time.sleep(0.005)
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1] * 15


def _lock_imports(path: str) -> list[str]:
    """The modules among fcntl and filelock that a source file imports, at its top or inside a function."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found += [n for n in names if n.split(".")[0] in ("fcntl", "filelock")]
    return found


def _modules_locking_files(package: str) -> dict[str, list[str]]:
    out = {}
    for d, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(d, name)
                rel = os.path.relpath(path, package)
                found = [] if rel == os.path.join("core", "files.py") else _lock_imports(path)
                if found:
                    out[rel] = found
    return out


def test_no_module_but_core_files_takes_a_file_lock_itself(tmp_path):
    package = os.path.join(ROOT, "robo_loaders_plugin")
    assert _modules_locking_files(package) == {}
    # control: a module locking a file itself, at its top or inside a function, is found
    planted = tmp_path / "robo_loaders_plugin"
    (planted / "storage").mkdir(parents=True)
    (planted / "storage" / "top.py").write_text("import fcntl\n")
    (planted / "storage" / "inside.py").write_text("def f():\n    from filelock import FileLock\n")
    (planted / "core").mkdir()
    (planted / "core" / "files.py").write_text("import fcntl\nimport filelock\n")  # the one allowed
    assert _modules_locking_files(str(planted)) == {
        os.path.join("storage", "top.py"): ["fcntl"],
        os.path.join("storage", "inside.py"): ["filelock"],
    }
