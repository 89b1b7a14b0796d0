"""The cache directory (storage.cache) and the staleness policy (storage.fingerprint): unit tests."""

import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from robo_loaders_plugin import StaleSourceError
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import (
    DIGEST_METHOD,
    LEGACY_METHOD,
    Fingerprint,
    check_same_source,
    fingerprint,
    hash_file,
    new_digest,
)


def digest_of(path):
    def digest():
        h = new_digest()
        hash_file(h, path)
        return h.hexdigest()

    return digest


def test_fingerprint_sees_content_changed_with_mtime_restored_and_a_touch(tmp_path):
    src = tmp_path / "data.bin"
    src.write_bytes(b"a" * 5000)
    first = fingerprint(str(src), digest_of(str(src)))
    st = os.stat(src)
    src.write_bytes(b"a" * 2500 + b"b" + b"a" * 2499)  # same size
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # cp -p / rsync -t
    changed = fingerprint(str(src), digest_of(str(src)), recorded=first)
    assert changed.content != first.content
    with pytest.raises(StaleSourceError, match=r"made from .*data.bin.*content digest differs.*convert again"):
        check_same_source(first, changed, "the cache", "convert again")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a touch: new mtime, same bytes
    touched = fingerprint(str(src), digest_of(str(src)), recorded=changed)
    assert touched.content == changed.content
    assert changed.differences(touched) == ["the file: modified (mtime changed)"]  # conservative: rebuild
    copy = tmp_path / "copy.bin"
    shutil.copy2(src, copy)  # cp -p: content and mtime kept, another path
    assert not touched.differences(fingerprint(str(copy), digest_of(str(copy))))  # the same source
    assert Fingerprint.from_dict(changed.as_dict()) == changed


def test_fingerprint_fast_path_trusts_only_an_identical_stat(tmp_path):
    src = tmp_path / "data.bin"
    src.write_bytes(b"x" * 100)
    calls = []

    def digest():
        calls.append(1)
        return digest_of(str(src))()

    first = fingerprint(str(src), digest)
    assert fingerprint(str(src), digest, recorded=first) is first and len(calls) == 1  # same stat: no re-hash
    st = os.stat(src)
    src.write_bytes(b"y" * 100)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime restored, but ctime moved on
    assert fingerprint(str(src), digest, recorded=first).content != first.content and len(calls) == 2


def test_files_under_a_linked_directory_are_fingerprinted_and_a_link_cycle_ends(tmp_path):
    """A reviewer's reproduction: a dataset whose ``videos/`` is a symbolic link (moved to another disk) was
    fingerprinted without the files under it, so editing them kept its caches in use, serving the old frames. The
    walk follows directory links, each real directory once (a link back up the tree ends). Control: the walk
    without following links does not see the file."""
    from robo_loaders_plugin.core.files import files_under, stat_files

    elsewhere = tmp_path / "other_disk" / "videos"
    (elsewhere / "chunk-000").mkdir(parents=True)
    video = elsewhere / "chunk-000" / "file-000.mp4"
    video.write_bytes(b"v1" * 50)
    root = tmp_path / "dataset"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text("{}")
    os.symlink(elsewhere, root / "videos")
    os.symlink(root, root / "meta" / "loop")  # a cycle: listed once, then not followed again
    names = sorted(files_under(str(root)))
    assert names == ["meta/info.json", "videos/chunk-000/file-000.mp4"]
    plain = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    assert "videos/chunk-000/file-000.mp4" not in plain  # control

    def digest():
        h = new_digest()
        for name, size, *_ in stat_files(str(root)):
            hash_file(h, str(root / name), size)
        return h.hexdigest()

    first = fingerprint(str(root), digest)
    video.write_bytes(b"v2" * 50)  # another recording, the same size
    again = fingerprint(str(root), digest, recorded=first)
    assert again.content != first.content and first.differences(again)


def legacy_sampled_digest(path):
    """The digest before issue 23 (A5): a file under 1 MiB whole, a larger one as its size and 16 evenly spaced
    64 KiB blocks."""
    import hashlib

    h, size = hashlib.sha256(), os.path.getsize(path)
    with open(path, "rb") as f:
        if size < 1 << 20:
            h.update(f.read())
            return h.hexdigest()
        h.update(str(size).encode())
        step = (size - 65536) / 15
        for i in range(16):
            f.seek(int(i * step))
            h.update(f.read(65536))
    return h.hexdigest()


def test_an_edit_in_bytes_a_sample_would_skip_with_the_mtime_restored_is_seen(tmp_path):
    """A large file (a video, an HDF5 of frames) edited between the blocks the old digest sampled, mtime restored:
    the stat differs (ctime), so the whole file is hashed and the edit is seen; the sampled digest missed it."""
    src = tmp_path / "video.mp4"
    src.write_bytes(np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes())
    first = fingerprint(str(src), digest_of(str(src)))
    before = legacy_sampled_digest(src)
    st = os.stat(src)
    with open(src, "r+b") as f:  # 100 KiB in: between the first two sampled blocks (0 and ~205 KiB)
        f.seek(100 << 10)
        byte = f.read(1)[0]
        f.seek(100 << 10)
        f.write(bytes([byte ^ 0x01]))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # cp -p / rsync -t
    assert legacy_sampled_digest(src) == before  # negative control: the sample cannot see this edit
    changed = fingerprint(str(src), digest_of(str(src)), recorded=first)
    assert changed.method == DIGEST_METHOD and changed.content != first.content
    assert cache.content_key(changed) != cache.content_key(first)  # another cache entry: rebuilt, not reused
    with pytest.raises(StaleSourceError, match="content digest differs"):
        check_same_source(first, changed, "shards", "convert again")


def test_a_fingerprint_of_the_sampled_method_is_never_compared_with_a_full_digest(tmp_path):
    """Fingerprints recorded by earlier versions (no 'method': sampled): an identical stat still reuses what they
    describe (same cache key as before); any other stat cannot be compared with a full digest, so it is a
    difference, never equal or unequal by accident; a new digest never equals an old one."""
    src = tmp_path / "data.bin"
    src.write_bytes(b"x" * 5000)
    files = fingerprint(str(src), digest_of(str(src))).files
    old = Fingerprint.from_dict(
        {"path": str(src.resolve()), "files": [list(f) for f in files], "content": legacy_sampled_digest(src)}
    )
    assert old.method == LEGACY_METHOD and old.identity() == [[f[0], f[1], f[2]] for f in files] + [old.content]
    calls = []

    def digest():
        calls.append(1)
        return digest_of(str(src))()

    assert fingerprint(str(src), digest, recorded=old) is old and not calls  # identical stat: the fast path
    os.utime(src, ns=(os.stat(src).st_atime_ns, os.stat(src).st_mtime_ns))  # ctime moves, the bytes do not
    current = fingerprint(str(src), digest, recorded=old)
    assert len(calls) == 1 and current.method == DIGEST_METHOD and current.content != old.content
    assert cache.content_key(current) != cache.content_key(old)  # caches: rebuilt once
    with pytest.raises(
        StaleSourceError,
        match=rf"computed by another robo-loaders \({LEGACY_METHOD}; this one "
        rf"computes {DIGEST_METHOD}\).*convert again",
    ):
        check_same_source(old, current, "shards", "convert again")  # given shards: refused, not guessed
    assert not current.differences(Fingerprint.from_dict(current.as_dict()))
    h = new_digest()
    assert h.hexdigest() != __import__("hashlib").sha256().hexdigest()  # new digests carry their method


def test_cache_root_default_env_and_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "home"))
    assert cache.cache_root() == str(tmp_path / "home") and os.path.isdir(tmp_path / "home" / ".locks")
    monkeypatch.delenv("ROBO_LOADERS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_root() == str(tmp_path / "xdg" / "robo-loaders")
    (tmp_path / "f").write_text("x")
    with pytest.raises(cache.CacheError, match=r"cache_dir=.*/f' is a file"):
        cache.cache_root(str(tmp_path / "f"))


def test_cache_root_probes_a_root_once_inside_one_builds_block(tmp_path, monkeypatch):
    """``cache_root`` writes a probe file in the root at each call (~0.7 ms), a mixture's components asking for the
    same root several times each: inside ``placements_planned_once`` (one build) a root is probed once. Controls:
    outside the block every call probes; a root that is not writable is refused inside the block too; a root whose
    ``.locks`` went away meanwhile is probed (and made) again."""
    from robo_loaders_plugin.core import paths

    probes = []
    real = paths.writable_dir_problem
    monkeypatch.setattr(paths, "writable_dir_problem", lambda p: probes.append(p) or real(p))
    root = str(tmp_path / "cache")
    cache.cache_root(root)
    cache.cache_root(root)
    assert len(probes) == 2  # control: outside a build's block, each call probes
    probes.clear()
    with cache.placements_planned_once():
        for _ in range(3):
            assert cache.cache_root(root) == root
        assert len(probes) == 1
        shutil.rmtree(os.path.join(root, ".locks"))
        assert cache.cache_root(root) == root and os.path.isdir(os.path.join(root, ".locks"))
        assert len(probes) == 2
        (tmp_path / "f").write_text("x")
        with pytest.raises(cache.CacheError, match="is a file"):
            cache.cache_root(str(tmp_path / "f"))
        monkeypatch.setattr(paths, "writable_dir_problem", lambda p: "cannot write in it (read-only)")
        with pytest.raises(cache.CacheError, match="read-only"):
            cache.cache_root(str(tmp_path / "other"))
    probes.clear()
    monkeypatch.setattr(paths, "writable_dir_problem", lambda p: probes.append(p) or real(p))
    cache.cache_root(root)
    assert len(probes) == 1  # the block's roots forgotten with it


def _obtain(root, key, content, built):
    fp = Fingerprint("/src", (("", 1, 0, 0, 0),), content)

    def build(path, _fp):
        built.append(path)
        with open(path, "wb") as f:
            f.write(b"z" * 1000)

    return cache.obtain(
        root,
        "kind",
        {"src": key},
        lambda recorded: fp,
        lambda p: None,
        lambda p: os.path.getsize(p) == 1000,
        build,
        "test",
    )


def test_obtain_reuses_rebuilds_on_change_and_retires_the_old_copy(tmp_path):
    root, built = cache.cache_root(str(tmp_path)), []
    e1, h1, reused, _ = _obtain(root, "a", "v1", built)
    assert not reused and len(built) == 1
    e1b, h1b, reused, _ = _obtain(root, "a", "v1", built)
    assert reused and e1b.name == e1.name and len(built) == 1
    e2, _h2, reused, _ = _obtain(root, "a", "v2", built)  # the source changed
    assert not reused and e2.name != e1.name
    assert os.path.exists(e1.path)  # still in use (h1, h1b): kept
    del h1, h1b
    eb, _hb, *_ = _obtain(root, "b", "v1", built)  # another source and key: not a sibling of 'a'
    assert cache.retire_siblings(e2) == [e1.path] and not os.path.exists(e1.path)
    assert sorted(e.name for e in cache.entries(root)) == sorted([e2.name, eb.name])


def test_a_source_replaced_while_its_entry_is_built_keeps_nothing(tmp_path):
    """An entry is named after the fingerprint taken before its build; a source replaced during the build (mv)
    left an entry named for the first version holding what was read of the second, reused once the first came back
    with its mtime. The source is fingerprinted again after the build (a stat when unchanged): changed, the entry is
    removed and the run refused in one line. Control: a build that only reads the source keeps its entry."""
    from robo_loaders_plugin.storage.fingerprint import fingerprint

    src = tmp_path / "source.bin"
    src.write_bytes(b"v1" * 100)
    root = cache.cache_root(str(tmp_path / "cache"))

    def source_fp(recorded):
        return fingerprint(str(src), lambda: digest_of(str(src)), recorded)

    def obtain(build):
        return cache.obtain(root, "kind", {"src": str(src)}, source_fp, lambda p: None, os.path.exists, build, "copy")

    def replaced_meanwhile(path, _fp):
        (tmp_path / "v2").write_bytes(b"v2" * 100)
        os.replace(tmp_path / "v2", src)  # the same size: only the inode, ctime and bytes differ
        with open(path, "wb") as f:
            f.write(src.read_bytes())

    with pytest.raises(StaleSourceError, match=r"source\.bin changed while the copy was built from it .*run again"):
        obtain(replaced_meanwhile)
    assert list(cache.entries(root)) == []

    def read_only(path, _fp):
        with open(path, "wb") as f:
            f.write(src.read_bytes())

    entry, _hold, reused, _ = obtain(read_only)  # control
    assert not reused and open(entry.path, "rb").read() == b"v2" * 100
    assert [e.name for e in cache.entries(root)] == [entry.name]

    # changed in place and put back with its mtime while the build read it (cp -p of an edit, then of a backup): the
    # identity after the build was the first version's, and the entry holding the edit was kept (a reviewer's
    # reproduction); the files' ctime tells
    other = cache.cache_root(str(tmp_path / "cache2"))

    def edited_and_restored_meanwhile(path, _fp):
        before = src.stat()
        src.write_bytes(b"v3" * 100)
        with open(path, "wb") as f:
            f.write(src.read_bytes())
        src.write_bytes(b"v2" * 100)
        os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))

    def content_fp(recorded):  # the content digest itself (equal for the put-back bytes)
        return fingerprint(str(src), digest_of(str(src)), recorded)

    def obtain_other(build):
        return cache.obtain(other, "kind", {"src": str(src)}, content_fp, lambda p: None, os.path.exists, build, "copy")

    with pytest.raises(StaleSourceError, match=r"changed while the copy was built from it \(its files were written"):
        obtain_other(edited_and_restored_meanwhile)
    assert list(cache.entries(other)) == []
    kept, _hold, reused, _ = obtain_other(read_only)  # control: the same source read only
    assert not reused and open(kept.path, "rb").read() == b"v2" * 100

    def refused_by_its_own_check(path, _fp):  # a conversion that saw the source change raises before obtain checks
        os.makedirs(path)
        (tmp_path / "marker").write_bytes(b"")
        open(os.path.join(path, "manifest.json"), "w").close()
        raise StaleSourceError("changed while it was converted")

    src.write_bytes(b"v3" * 100)
    with pytest.raises(StaleSourceError, match="changed while it was converted"):
        obtain(refused_by_its_own_check)
    # nothing of it kept (a reviewer's reproduction: datapipe's next run resumed the withdrawn conversion in place)
    assert [e.name for e in cache.entries(root)] == [entry.name] and (tmp_path / "marker").exists()


def test_a_source_looks_only_at_its_own_entries_and_sees_one_written_meanwhile(tmp_path, monkeypatch):
    """Issue 44 item 3: ``obtain`` checked every name in the root (``is_entry``, a stat each) to find its own
    source's entries, so a mixture's components, each obtaining its entry from one root holding every component's,
    made start-up grow with the square of the components. Only the names of the source's own prefix are checked now;
    the directory is listed at every call (never kept), so an entry written meanwhile (by another process) is found
    at the next look. Control: listing without the prefix checks every other source's name."""
    root, built = cache.cache_root(str(tmp_path)), []
    others = [_obtain(root, f"other{k}", "v1", built)[0] for k in range(20)]
    a, _hold_a, *_ = _obtain(root, "a", "v1", built)
    checked, is_entry = [], cache.is_entry
    monkeypatch.setattr(cache, "is_entry", lambda r, n: checked.append(n) or is_entry(r, n))
    again, _hold, reused, _ = _obtain(root, "a", "v1", built)
    prefix = a.name.rsplit("-", 1)[0] + "-"
    assert reused and again.name == a.name and checked and all(n.startswith(prefix) for n in checked)
    b_prefix = others[0].name.rsplit("-", 1)[0] + "-"
    assert [e.name for e in cache.entries(root, prefix)] == [a.name]  # two sources' entries, each found by its own
    assert [e.name for e in cache.entries(root, b_prefix)] == [others[0].name]
    written = cache.Entry(root, prefix + "0123456789abcdef")  # another process's entry of the same source
    with open(written.path, "wb") as f:
        f.write(b"z")
    assert sorted(e.name for e in cache.entries(root, prefix)) == sorted([a.name, written.name])
    checked.clear()
    cache.entries(root)  # control: without the prefix every name is checked
    assert len(checked) >= len(others) + 2


def test_prune_keeps_entries_in_use_and_removes_least_recently_used(tmp_path):
    root, built = cache.cache_root(str(tmp_path)), []
    ea, _ha, *_ = _obtain(root, "a", "v", built)
    eb, hb, *_ = _obtain(root, "b", "v", built)
    ec, hc, *_ = _obtain(root, "c", "v", built)
    del hb, hc
    os.utime(os.path.join(root, ".locks", f"{eb.name}.use"), (time.time() - 100, time.time() - 100))
    removed = cache.prune(root, 2000)
    assert removed == [eb.path]  # b: least recently used and unused; a: in use; c: newer
    assert cache.prune(root, 0) == [ec.path] and os.path.exists(ea.path)


def test_the_build_lock_names_its_holder_without_truncating_a_lock_file_it_reuses(tmp_path, monkeypatch):
    """The holder's record is written in place, padded (truncating a file that holds data makes ext4 flush it, ~2 ms
    at every reused entry of a mixture); a longer record left by another writer is cut, so a waiter reads this
    holder's line, not a mix of both."""
    root = cache.cache_root(str(tmp_path))
    entry = cache.Entry(root, "kind-x-y")
    with entry.building("test"):
        pass
    truncated = []
    real = os.ftruncate
    monkeypatch.setattr(os, "ftruncate", lambda fd, n: (truncated.append(n), real(fd, n)))
    with entry.building("test"), open(entry._lock_path("build"), "rb") as f:
        record = f.read()
    assert truncated == [] and record.strip() == f"pid {os.getpid()} on {socket.gethostname()}".encode()
    with open(entry._lock_path("build"), "wb") as f:  # control: a longer record written otherwise
        f.write(b"pid 1 on another-host " + b"x" * 500)
    with entry.building("test"), open(entry._lock_path("build"), "rb") as f:
        record = f.read()
    assert truncated == [cache._HOLDER_BYTES]
    assert record.strip() == f"pid {os.getpid()} on {socket.gethostname()}".encode()


HOLD_BUILD = """
import sys, time
from robo_loaders_plugin.storage import cache
e = cache.Entry(sys.argv[1], "kind-x-y")
with e.building("test"):
    print("building", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_builder_waits_for_the_first_then_times_out_clearly(tmp_path, monkeypatch, capsys):
    root = cache.cache_root(str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", HOLD_BUILD, root, "3"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "building"
    t = time.monotonic()
    with cache.Entry(root, "kind-x-y").building("test"):
        waited = time.monotonic() - t
    assert waited > 1.0 and "waiting for pid" in capsys.readouterr().out
    p.wait()
    p = subprocess.Popen([sys.executable, "-c", HOLD_BUILD, root, "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "building"
        monkeypatch.setenv("ROBO_LOADERS_LOCK_TIMEOUT", "1")
        with (
            pytest.raises(
                cache.CacheError,
                match=r"timed out after 1 s waiting for pid \d+ .*kind-x-y.*"
                r"ROBO_LOADERS_LOCK_TIMEOUT",
            ),
            cache.Entry(root, "kind-x-y").building("test"),
        ):
            pass
    finally:
        p.kill()
        p.wait()


def test_leftovers_of_killed_builds_are_swept_and_nothing_else(tmp_path):
    """The temporaries a killed build leaves beside its entry (a store file's writer: pid, thread, 8 hex; a build
    directory: pid, 8 hex) go. A reviewer's reproduction: every name holding ``.tmp-`` went, so a user's files in a
    cache_dir holding other files (``draft.tmp-2024.txt``, a ``results.tmp-keep/`` directory) were removed by
    ``cache prune`` and before every build; they are kept now, as are names of no entry."""
    root = cache.cache_root(str(tmp_path))
    entry = "compressed-cache-3-0123456789abcdef-fedcba9876543210"
    leftovers = [tmp_path / f"{entry}.rlc.tmp-123-456-0a1b2c3d", tmp_path / f"{entry}.tmp-9-deadbeef"]
    leftovers[0].write_bytes(b"partial")
    leftovers[1].mkdir()
    users = [tmp_path / "draft.tmp-2024.txt", tmp_path / "results.tmp-keep", tmp_path / "kind-a-b.tmp-9-deadbeef"]
    users[0].write_text("mine")
    users[1].mkdir()
    (users[1] / "model.ckpt").write_text("mine")
    users[2].write_text("not an entry's name")
    assert sorted(cache.sweep_temporary(root)) == sorted(map(str, leftovers))
    assert all(p.exists() for p in users) and not any(p.exists() for p in leftovers)
    assert os.listdir(tmp_path / ".locks") == []  # nor the lock files the sweep opened for them


def _lock_files(root):
    return sorted(os.listdir(os.path.join(root, ".locks")))


def test_a_failed_build_leaves_no_lock_file(tmp_path):
    """Issue 23 B12: every failed build left ``.locks/<entry>.build`` behind (a cache directory of retries filled
    with them). A build that raises and leaves no entry removes its lock file; a retry builds."""
    root, built = cache.cache_root(str(tmp_path)), []
    fp = Fingerprint("/src", (("", 1, 0, 0, 0),), "v1")

    def failing(path, _fp):
        with open(path + ".tmp-1", "wb"):
            pass
        os.unlink(path + ".tmp-1")
        raise RuntimeError("the source is unreadable")

    with pytest.raises(RuntimeError, match="unreadable"):
        cache.obtain(root, "kind", {"src": "a"}, lambda recorded: fp, lambda p: None, lambda p: True, failing, "t")
    assert _lock_files(root) == [] and cache.entries(root) == []
    entry, _holder, reused, _ = _obtain(root, "a", "v1", built)  # the retry
    assert not reused and built == [entry.path]
    assert _lock_files(root) == [f"{entry.name}.build", f"{entry.name}.use"]  # a built entry keeps its locks
    # an entry that exists keeps its build lock whatever happens
    with pytest.raises(KeyboardInterrupt), entry.building("t"):
        raise KeyboardInterrupt
    assert f"{entry.name}.build" in _lock_files(root)


RACE = """
import os, sys, time
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint
root, log = sys.argv[1], sys.argv[2]
fp = Fingerprint("/src", (("", 1, 0, 0, 0),), "v1")

def build(path, _fp):
    with open(log, "a") as f:
        f.write(f"start {os.getpid()} {time.monotonic()}\\n")
    first = not os.path.exists(log + ".failed")
    if first:
        open(log + ".failed", "w").close()
    time.sleep(1.0)
    with open(log, "a") as f:
        f.write(f"end {os.getpid()} {time.monotonic()} {'failed' if first else 'built'}\\n")
    if first:
        raise RuntimeError("first build fails")
    with open(path, "wb") as f:
        f.write(b"z" * 1000)

print("ready", flush=True)
sys.stdin.readline()
try:
    e, h, reused, _ = cache.obtain(root, "kind", {"src": "a"}, lambda r: fp, lambda p: None,
                                   lambda p: os.path.getsize(p) == 1000, build, "race")
    print("reused" if reused else "built", flush=True)
except RuntimeError as exc:
    print("failed:", exc, flush=True)
"""


def test_a_failed_build_removes_its_lock_while_others_wait_and_one_of_them_builds(tmp_path):
    """Three processes obtain one entry at once; the first build fails after 1 s (and removes its lock file) while
    the other two wait on that file. Exactly one of them then builds (on the lock file that now has its name) and
    the last reuses: builds never overlap, and no lock is left for an entry that does not exist."""
    root, log = cache.cache_root(str(tmp_path / "cache")), str(tmp_path / "log")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, root, log], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    try:
        assert all(p.stdout.readline().strip() == "ready" for p in procs)  # imports done: start together
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    results = sorted(o.strip().splitlines()[-1] for o in outs)
    assert results == ["built", "failed: first build fails", "reused"], outs
    spans = {}
    for line in open(log).read().splitlines():
        _what, pid, t, *_rest = line.split()
        spans.setdefault(pid, []).append(float(t))
    intervals = sorted(spans.values())
    assert len(intervals) == 2 and intervals[0][1] <= intervals[1][0], intervals  # one builder at a time
    (entry,) = cache.entries(root)
    assert _lock_files(root) == [f"{entry.name}.build", f"{entry.name}.use"]


def test_a_lock_file_that_lost_its_name_proves_nothing(tmp_path, monkeypatch):
    """A process that opened ``<entry>.build`` just before a failed build removed it can lock that file once the
    failed builder is gone, though another process now builds on the file with that name. Neither the sweep of
    temporary files nor ``remove`` may take that lock for a free entry (they would delete the live build's
    temporary file, or the name of its lock file)."""
    root = cache.cache_root(str(tmp_path))
    entry = cache.Entry(root, "kind-x-y")
    stale = entry._open_lock("build")  # opened before the failed build removed the name
    os.unlink(entry._lock_path("build"))
    opened_before = cache.Entry._open_lock

    def open_lock(self, what):  # every open of the build lock happens "before" the removal: the old file
        if self.name == entry.name and what == "build":
            return os.open(f"/proc/self/fd/{stale}", os.O_RDWR)
        return opened_before(self, what)

    p = subprocess.Popen([sys.executable, "-c", HOLD_BUILD, root, "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "building"  # another process builds on the new file
        (tmp_path / "kind-x-y.tmp-1-2").write_bytes(b"partial")  # its temporary file
        monkeypatch.setattr(cache.Entry, "_open_lock", open_lock)
        assert cache.sweep_temporary(root) == [] and (tmp_path / "kind-x-y.tmp-1-2").exists()
        assert not entry.remove() and os.path.exists(entry._lock_path("build"))
    finally:
        p.kill()
        p.wait()
        os.close(stale)


HOLD_ENTRY = """
import os, sys
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint
fp = Fingerprint("/src", (("", 1, 0, 0, 0),), "v1")

def build(path, _fp):
    os.makedirs(path)
    with open(os.path.join(path, "shard.tar"), "wb") as f:
        f.write(b"x" * 1000)

entry, hold, _, _ = cache.obtain(cache.cache_root(sys.argv[1]), "kind", {"src": "held"}, lambda r: fp,
                                 lambda p: None, os.path.isdir, build, "test")
print(entry.path, flush=True)
sys.stdin.read()  # held until the test closes stdin
"""


def test_prune_leaves_a_cache_dir_nested_in_the_root_and_what_a_run_holds_there(tmp_path):
    """Issue 30 item 9: a run's ``cache_dir`` inside the default root was pruned as one unused entry, with the
    entry the run held in it (the run died). Only the root's own entries are pruned; in the nested root, the held
    entry is kept. Controls: the outer root's unused entry goes; once the run ends the nested entry goes too."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    root, built = cache.cache_root(str(tmp_path / "root")), []
    nested = os.path.join(root, "my-cache_dir")
    unused, _, _, _ = _obtain(root, "a", "v1", built)
    (tmp_path / "root" / "my-notes").mkdir()  # anything else the user keeps there: not an entry either
    run = subprocess.Popen(
        [sys.executable, "-c", HOLD_ENTRY, nested], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        held = run.stdout.readline().strip()
        assert held.startswith(nested + "/kind-") and os.path.isdir(held)
        assert [e.path for e in cache.entries(root)] == [unused.path]
        r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", root, "--max-size", "1"])
        assert r.exit_code == 0 and r.output == f"removed {unused.path}\n", r.output
        r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
        assert r.exit_code == 0 and r.output == "", r.output  # control: no mixture index, nothing more said
        index = os.path.join(root, ".mixture-index")
        os.makedirs(os.path.join(index, "tables"))
        (tmp_path / "root" / ".mixture-index" / "tables" / "t.arrow").write_bytes(b"x")
        r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
        assert r.exit_code == 0 and r.output.startswith(f"removed {index} (the mixture index"), r.output
        assert not os.path.exists(index) and os.path.isdir(held)  # the entry in use is kept
        r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", nested, "--max-size", "1"])
        assert r.exit_code == 0 and r.output == (
            f"[robo-loaders] the cache {nested} holds 1.0 kB, over its limit "
            "of 1 B (--max-size), with entries in use; nothing more can be "
            "removed now\n"
        ), r.output
        assert os.path.exists(os.path.join(held, "shard.tar")) and (tmp_path / "root" / "my-notes").is_dir()
        # clear with the entry in use: said as such, not "over its limit of 0 B (ROBO_LOADERS_CACHE_SIZE)", a limit
        # nobody set (a reviewer's reproduction)
        r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", nested])
        assert r.exit_code == 0 and r.output == (
            f"[robo-loaders] cache clear: the cache {nested} keeps 1.0 kB in entries in use by running processes; "
            "they can be removed once nothing uses them\n"
        ), r.output
    finally:
        run.stdin.close()
        run.wait(timeout=60)
    r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", nested, "--max-size", "1"])
    assert r.output == f"removed {held}\n" and os.path.isdir(nested), r.output


def test_a_size_limit_of_zero_means_no_limit_in_the_variable_and_in_prune(tmp_path, monkeypatch):
    """Issue 30 item 9: ``ROBO_LOADERS_CACHE_SIZE=0`` kept everything, ``cache prune --max-size 0`` removed every
    unused entry. 0 is no limit in both (said in the output); ``cache clear`` empties. Controls: 1 byte prunes;
    a value that is no size is one line naming the option."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    root, built = cache.cache_root(str(tmp_path)), []
    entry, _, _, _ = _obtain(root, "a", "v1", built)
    monkeypatch.setenv(cache.ENV_SIZE, "0")
    assert cache.size_limit() is None and cache.parse_size_limit("0", "--max-size") is None
    assert cache.parse_size_limit("0GB", "--max-size") is None and cache.parse_size_limit("1kB", "x") == 1000
    for args in (["--max-size", "0"], []):  # the option's 0, then the variable's
        r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", root, *args])
        given = "--max-size 0" if args else "ROBO_LOADERS_CACHE_SIZE=0"
        assert r.exit_code == 0 and r.output == (
            f"{root} has no size limit ({given}): no entry removed; "
            "`robo-loaders cache clear` removes every entry nothing uses\n"
        )
        assert os.path.exists(entry.path)
    r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", root, "--max-size", "abc"])
    assert isinstance(r.exception, cache.CacheError)
    assert str(r.exception) == "--max-size: expected a size like 2GB or 512MiB, got 'abc' (0: no limit)"
    r = CliRunner().invoke(main, ["cache", "prune", "--cache-dir", root, "--max-size", "1"])
    assert r.output == f"removed {entry.path}\n" and not os.path.exists(entry.path)


def test_cache_list_shows_leftovers_of_killed_builds_and_unfinished_conversions(tmp_path):
    """A reviewer's reproduction: after a build killed part-way, ``cache list`` printed "(empty)" beside 16 MB of its
    temporary file, and a conversion on first use stopped part-way was listed as any entry. Now the temporary files
    are counted on a line of their own and the conversion is marked unfinished; ``prune`` removes the leftover.
    Control: a finished conversion has no mark, and a user's file named like a temporary one is not counted."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    root = cache.cache_root(str(tmp_path / "root"))
    name = "robomimic-shards-0123456789abcdef-0123456789abcdef"
    for entry, files in (
        (name, ("manifest.json",)),
        (name.replace("shards", "other"), ("manifest.json", "index.json")),
    ):
        os.makedirs(os.path.join(root, entry))
        for f in files:
            open(os.path.join(root, entry, f), "w").write("{}")
    with open(os.path.join(root, f"compressed-cache-3-{'1' * 16}-{'2' * 16}.tmp-999999-0123abcd"), "wb") as f:
        f.write(b"x" * 5000)
    open(os.path.join(root, "notes.tmp-2024"), "w").write("mine")
    out = CliRunner().invoke(main, ["cache", "list", "--cache-dir", root]).output
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("robomimic-", "robomimic-other"))}
    assert "unfinished conversion (the next run resumes it)" in rows[name], out
    assert "unfinished" not in rows[name.replace("shards", "other")], out
    assert out.rstrip().endswith(
        "plus 1 temporary file(s) of builds (5.0 kB): a build running now, or left by a killed one "
        "(`robo-loaders cache prune` removes those nobody builds)"
    ), out
    CliRunner().invoke(main, ["cache", "prune", "--cache-dir", root])
    assert "temporary file" not in CliRunner().invoke(main, ["cache", "list", "--cache-dir", root]).output


def test_the_three_cache_commands_take_cache_dir_alike(tmp_path):
    """``cache list``, ``prune`` and ``clear`` declare ``--cache-dir`` once (``cli._cache_command``): the same option,
    resolved to the same created root, and a bad one refused in one line naming ``--cache-dir`` as typed (was
    ``cache_dir='...'``, the backend option's name). ``list`` shows an entry that ``clear`` then removes. Control:
    the same file given as a backend's cache_dir is named by that setting."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main

    root, built = str(tmp_path / "root"), []
    entry, _, _, _ = _obtain(cache.cache_root(root), "a", "v1", built)
    helps = set()
    for command in ("list", "prune", "clear"):
        r = CliRunner().invoke(main, ["cache", command, "--help"])
        helps.add(next(line for line in r.output.splitlines() if line.lstrip().startswith("--cache-dir")))
    assert len(helps) == 1 and "$ROBO_LOADERS_CACHE or ~/.cache/robo-loaders" in helps.pop()
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", root])
    assert r.exit_code == 0 and os.path.basename(entry.path) in r.output and "in use" in r.output, r.output
    r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
    assert r.exit_code == 0 and r.output == f"removed {entry.path}\n", r.output
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", root])
    assert r.output.endswith("(empty)\n"), r.output
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for command in ("list", "prune", "clear"):
        r = CliRunner().invoke(main, ["cache", command, "--cache-dir", str(a_file)])
        assert isinstance(r.exception, cache.CacheError), r.output
        assert str(r.exception).startswith(f"--cache-dir={str(a_file)!r} is a file, not a directory"), r.exception
    with pytest.raises(cache.CacheError, match=r"^train\.data_backend_kwargs\.cache_dir='"):
        cache.cache_root(str(a_file), "train.data_backend_kwargs.cache_dir")


def test_a_cache_dir_that_does_not_exist_is_refused_not_made_and_clear_removes_stamps(tmp_path, monkeypatch):
    """A reviewer's findings: ``cache list|prune|clear --cache-dir <typo>`` made the directory and listed it as an
    empty cache (so did a mistyped ``$ROBO_LOADERS_CACHE``); refused in one line, nothing made. ``cache clear`` left
    the removed entries' verification stamps in ``.verified/``; removed with them now. Control: an existing
    directory is listed, and an entry in use keeps its stamp."""
    from click.testing import CliRunner

    from robo_loaders_plugin.cli import main
    from robo_loaders_plugin.storage.cached_dir import mark_verified

    typo = tmp_path / "typo_dir"
    for command in ("list", "prune", "clear"):
        r = CliRunner().invoke(main, ["cache", command, "--cache-dir", str(typo)])
        assert r.exit_code == 1 and f"--cache-dir {typo}: no such directory" in r.output, r.output
        assert "Traceback" not in r.output and not typo.exists()
    monkeypatch.setenv(cache.ENV_ROOT, str(typo))
    r = CliRunner().invoke(main, ["cache", "list"])
    assert r.exit_code == 1 and f"$ROBO_LOADERS_CACHE={typo}: no such directory" in r.output and not typo.exists()
    monkeypatch.delenv(cache.ENV_ROOT)
    root, built = cache.cache_root(str(tmp_path / "root")), []
    gone, _, _, _ = _obtain(root, "a", "v1", built)
    kept, hold, _, _ = _obtain(root, "b", "v1", built)
    for e in (gone, kept):
        mark_verified(e.path)
        assert os.path.exists(cache.verified_stamp(e.path))
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", root])
    assert r.exit_code == 0 and gone.name in r.output, r.output
    r = CliRunner().invoke(main, ["cache", "clear", "--cache-dir", root])
    assert r.exit_code == 0 and not os.path.exists(gone.path), r.output
    assert not os.path.exists(cache.verified_stamp(gone.path)) and os.path.exists(cache.verified_stamp(kept.path))
    del hold


def test_earlier_formats_of_a_source_are_retired_in_one_listing_and_nothing_else_is(tmp_path, monkeypatch):
    """``cached_dir.retire_earlier_versions`` looks for every earlier format of one source's entry with one listing
    of the root (it listed the root once per earlier version, for each component of a mixture): the entries of
    versions 0..2 of this source go; the current version's, another source's and an unversioned look-alike stay.
    Control: the same root seen from the current version's key of another source removes nothing of this one."""
    from robo_loaders_plugin.storage.cached_dir import retire_earlier_versions

    root = cache.cache_root(str(tmp_path))
    key, other = {"path": "/a"}, {"path": "/b"}
    h, o = cache.short_hash(key), cache.short_hash(other)
    earlier = [os.path.join(root, f"compressed-cache-{v}-{h}-0123456789abcdef") for v in range(3)]
    kept = [
        os.path.join(root, f"compressed-cache-3-{h}-0123456789abcdef"),  # the current format
        os.path.join(root, f"compressed-cache-1-{o}-0123456789abcdef"),  # another source's earlier format
    ]
    for path in earlier + kept:
        os.makedirs(path)
    listed = []
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listed.append(p) or listdir(p))
    assert retire_earlier_versions(root, "compressed-cache-3", {"path": "/c"}) == []  # control: not this source's
    assert all(os.path.isdir(p) for p in earlier + kept)
    listed.clear()
    assert sorted(retire_earlier_versions(root, "compressed-cache-3", key)) == sorted(earlier)
    assert listed == [root]  # one listing for the three earlier versions
    assert not any(os.path.exists(p) for p in earlier) and all(os.path.isdir(p) for p in kept)
    assert retire_earlier_versions(root, "compressed-cache-0", key) == []  # no earlier version: nothing listed


def test_holds_current_answers_a_placement_once_per_source_inside_a_mixtures_planning_block(tmp_path):
    """``cache.placements_planned_once``: a mixture's plan and build each asked whether a component's store is on
    disk (a stat of its files, a listing, a record read); inside the block a placement's "found" is given again,
    per source, kind and key; "not found" is asked again (a store built meanwhile, a dataset listed twice, is
    found). Controls: a question not for a placement (the shards' disk check) and any question outside the block
    look again."""
    from robo_loaders_plugin.storage.fingerprint import stat_files

    root = cache.cache_root(str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.write_bytes(b"x" * 10)
    files = stat_files(str(src))
    entry = os.path.join(root, f"kind-{cache.short_hash({'k': 1})}-0123456789abcdef")
    os.makedirs(entry)
    looked = []

    def recorded(path):
        looked.append(path)
        return Fingerprint(str(src), files, "c") if os.path.exists(path) else None  # read from the entry, if any

    def holds(key, placement=True):
        return cache.holds_current(root, "kind", {"k": key}, str(src), recorded, for_placement=placement)

    with cache.placements_planned_once():
        assert holds(1)
        shutil.rmtree(entry)  # gone after the plan: the block keeps its "found" (the build checks the entry itself)
        assert holds(1) and len(looked) == 1
        assert not holds(1, placement=False)  # the control: not a placement's question, looked again
        later = os.path.join(root, f"kind-{cache.short_hash({'k': 2})}-0123456789abcdef")
        assert not holds(2)
        os.makedirs(later)  # built meanwhile (the same dataset earlier in the mixture)
        assert holds(2)  # "not found" was not kept
    assert not holds(1)  # the control: outside the block, looked again (the entry is gone)


def test_holds_current_walks_the_source_only_when_the_root_holds_an_entry_of_its_kind_and_key(tmp_path, monkeypatch):
    """A root without an entry of this kind and key (a store kept on disk is also looked for in the RAM root, at
    every plan and build of every component of a mixture) answers without walking the source's files. Control: with
    such an entry, the source's stat is taken and compared (an edited source is not current)."""
    from robo_loaders_plugin.storage import fingerprint

    root = cache.cache_root(str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.write_bytes(b"x" * 10)
    files = fingerprint.stat_files(str(src))
    walked = []
    real = fingerprint.stat_files
    monkeypatch.setattr(fingerprint, "stat_files", lambda path: walked.append(path) or real(path))

    def holds():
        return cache.holds_current(root, "kind", {"k": 1}, str(src), lambda p: Fingerprint(str(src), files, "c"))

    os.makedirs(os.path.join(root, f"kind-{cache.short_hash({'k': 2})}-0123456789abcdef"))  # another key's
    assert not holds() and walked == []
    os.makedirs(os.path.join(root, f"kind-{cache.short_hash({'k': 1})}-0123456789abcdef"))
    assert holds() and walked == [str(src)]
    src.write_bytes(b"y" * 11)  # edited: its recorded stat is not current
    assert not holds() and len(walked) == 2


def test_python_dash_m_cli_gives_the_scripts_one_line_errors(tmp_path):
    """``python -m robo_loaders_plugin.cli`` ran ``main`` without the one-line handling of the ``robo-loaders``
    script: a refusal was a traceback with status 1 (a reviewer's reproduction). It runs the same entry now."""
    a_file = tmp_path / "f"
    a_file.write_text("x")
    p = subprocess.run(
        [sys.executable, "-m", "robo_loaders_plugin.cli", "cache", "list", "--cache-dir", str(a_file)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == [f"error: --cache-dir={str(a_file)!r} is a file, not a directory"] or (
        p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1
    ), p.stderr


def test_another_users_read_only_lock_file_is_locked_read_only_and_an_unopenable_one_is_one_line(tmp_path, monkeypatch):
    """A ``cache_dir`` shared by a group: lock files the first user created 0644 could not be opened read-write by
    the second, a ``PermissionError`` traceback (a reviewer's reproduction, two uids). Lock files are now created
    0666 less the umask, and one that stays read-only is locked through a read-only descriptor (an ``flock`` needs
    no write access; its holder record is left as it is). Root ignores file modes, so the refusal is simulated.
    Control: a lock file that cannot be opened at all is one ``CacheError`` line naming it and the directory."""
    from robo_loaders_plugin.core import files

    root = cache.cache_root(str(tmp_path))
    entry = cache.Entry(root, "kind-x-y")
    with entry.building("test"):
        os.makedirs(entry.path)
    theirs = b"pid 1 on their-host".ljust(cache._HOLDER_BYTES)
    with open(entry._lock_path("build"), "wb") as f:
        f.write(theirs)
    first = entry.hold()  # the use lock file exists now too, held
    real_open = os.open

    def their_files(path, flags, *mode):
        if str(path).startswith(os.path.join(root, cache.LOCKS)) and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *mode)

    monkeypatch.setattr(files.os, "open", their_files)
    with entry.building("test"):  # the build lock taken through a read-only descriptor
        assert entry.in_use()  # the hold above, seen through another read-only descriptor
    hold = entry.hold()
    assert open(entry._lock_path("build"), "rb").read() == theirs  # not written through a read-only descriptor
    hold.release()
    first.release()

    def nothing(path, flags, *mode):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(files.os, "open", nothing)
    refused = r"cannot open the cache's lock file .*kind-x-y\.build \(Permission denied\); the cache directory"
    with (
        pytest.raises(cache.CacheError, match=refused + " .* must be writable by every user of it"),
        entry.building("test"),
    ):
        pass


def test_a_bad_size_limit_is_refused_before_anything_is_built_or_reused(tmp_path, monkeypatch):
    """A reviewer's reproduction: ``ROBO_LOADERS_CACHE_SIZE=lots`` was read only after a build (the entry kept, the
    run refused), and a later run reusing the entry never read it. Control: a size builds."""
    root, built = cache.cache_root(str(tmp_path)), []
    monkeypatch.setenv("ROBO_LOADERS_CACHE_SIZE", "lots")
    with pytest.raises(cache.CacheError, match=r"ROBO_LOADERS_CACHE_SIZE: expected a size like 2GB"):
        _obtain(root, "a", "v1", built)
    assert built == [] and list(cache.entries(root)) == []
    monkeypatch.setenv("ROBO_LOADERS_CACHE_SIZE", "1GB")
    _obtain(root, "a", "v1", built)
    monkeypatch.setenv("ROBO_LOADERS_CACHE_SIZE", "lots")
    with pytest.raises(cache.CacheError, match=r"ROBO_LOADERS_CACHE_SIZE"):  # reusing it too
        _obtain(root, "a", "v1", built)
    assert len(built) == 1


def test_a_bad_lock_timeout_is_refused_before_anything_is_built_or_reused(tmp_path, monkeypatch):
    """A reviewer's reproduction: ``ROBO_LOADERS_LOCK_TIMEOUT=abc`` was read only once a process waited for another's
    build, so the builder ran and the waiting ranks of a torchrun job failed after fingerprinting the source; a
    conversion's plan (``shards.manifest.plan``) refuses it too. Control: a number builds."""
    from robo_loaders_plugin.storage.shards import manifest

    root, built = cache.cache_root(str(tmp_path)), []
    monkeypatch.setenv("ROBO_LOADERS_LOCK_TIMEOUT", "abc")
    with pytest.raises(cache.CacheError, match=r"ROBO_LOADERS_LOCK_TIMEOUT must be a finite number of seconds"):
        _obtain(root, "a", "v1", built)
    assert built == [] and list(cache.entries(root)) == []
    with pytest.raises(cache.CacheError, match=r"ROBO_LOADERS_LOCK_TIMEOUT"):
        manifest.plan(str(tmp_path / "out"), {"content": "c"}, [["demo_0"]], {})
    assert not (tmp_path / "out" / "manifest.json").exists()
    monkeypatch.setenv("ROBO_LOADERS_LOCK_TIMEOUT", "5")
    _obtain(root, "a", "v1", built)
    assert len(built) == 1


def test_a_recorded_fingerprint_with_a_short_file_entry_is_unusable_not_a_crash(tmp_path):
    """A reviewer's reproduction: a mixture index record whose fingerprint had a file entry shortened to
    ``[name, size]`` (still valid JSON) crashed start-up with an ``IndexError`` in the comparison; docs/mixtures.md
    says such a record is read again. Control: the record as written is used."""
    import json

    from robo_loaders_plugin.mixtures.index import _recorded, record_digest
    from robo_loaders_plugin.storage.fingerprint import Fingerprint

    fp = Fingerprint("/src", (("a", 1, 2, 3, 4),), "digest")
    path = tmp_path / "record.json"
    doc = {"fingerprint": fp.as_dict(), "record": {"x": 1}, "record_digest": record_digest({"x": 1})}
    path.write_text(json.dumps(doc))
    assert _recorded(str(path)) == (fp, {"x": 1})
    for files in ([["a", 1]], [[]], [["a", "1", 2, 3, 4]]):
        path.write_text(json.dumps({**doc, "fingerprint": {**fp.as_dict(), "files": files}}))
        assert _recorded(str(path)) == (None, None), files
        with pytest.raises(StaleSourceError, match="malformed source fingerprint"):
            Fingerprint.from_dict({**fp.as_dict(), "files": files})
    path.write_text("[" * 100_000 + "]" * 100_000)  # parses as JSON nested too deep for Python
    assert _recorded(str(path)) == (None, None)


def test_a_mixture_build_lists_each_cache_root_once_and_finds_what_was_written_since(tmp_path, monkeypatch):
    """Inside ``placements_planned_once`` (one mixture's build) a cache root's listing is kept: each component
    looked for its entries (its recorded fingerprint, earlier formats to retire) with a ``listdir`` of the whole
    root, a start-up growing with the square of its components. The kept listing must never hide what matters: an
    entry another process wrote after it is found (a lookup with no name of its prefix lists again), and this
    process's own builds and removals make the root listed again. Control: outside the block every lookup lists."""
    from robo_loaders_plugin.storage.cached_dir import retire_earlier_versions
    from robo_loaders_plugin.storage.fingerprint import stat_files

    root = cache.cache_root(str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.write_bytes(b"x" * 10)
    files = stat_files(str(src))
    for k in range(5):
        os.makedirs(os.path.join(root, f"kind-2-{cache.short_hash({'k': k})}-0123456789abcdef"))
    listed = []
    real_listdir = os.listdir

    def counting(path):
        if os.path.abspath(path) == os.path.abspath(root):
            listed.append(path)
        return real_listdir(path)

    monkeypatch.setattr(cache.os, "listdir", counting)

    def recorded(path):
        return Fingerprint(str(src), files, "c") if os.path.exists(path) else None

    def holds(k):
        return cache.holds_current(root, "kind-2", {"k": k}, str(src), recorded)

    def look_everywhere():
        for k in range(5):
            assert holds(k)
            assert retire_earlier_versions(root, "kind-2", {"k": k}) == []

    look_everywhere()
    assert len(listed) == 10  # the control: outside the block, every lookup lists the root
    listed.clear()
    with cache.placements_planned_once():
        look_everywhere()
        assert len(listed) == 1
        # written by another process after the listing: found, the root listed again
        os.makedirs(os.path.join(root, f"kind-2-{cache.short_hash({'k': 9})}-0123456789abcdef"))
        assert holds(9) and len(listed) == 2
        # an earlier format's entry written since: the kept listing leaves it for a later start
        old = os.path.join(root, f"kind-1-{cache.short_hash({'k': 0})}-0123456789abcdef")
        os.makedirs(old)
        assert retire_earlier_versions(root, "kind-2", {"k": 0}) == [] and os.path.isdir(old)
        # removed by this process: the root is listed again, so the next lookups see it gone
        cache.Entry(root, f"kind-2-{cache.short_hash({'k': 4})}-0123456789abcdef").remove()
        assert not holds(4) and len(listed) >= 3
    listed.clear()
    assert retire_earlier_versions(root, "kind-2", {"k": 0}) == [old]  # outside the block: found and retired
