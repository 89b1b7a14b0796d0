"""The cache directory (storage.cache) and the staleness policy (storage.fingerprint): unit tests."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from robo_loaders_plugin import StaleSourceError
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint, check_same_source, fingerprint, hash_file, new_digest


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


def test_cache_root_default_env_and_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_LOADERS_CACHE", str(tmp_path / "home"))
    assert cache.cache_root() == str(tmp_path / "home") and os.path.isdir(tmp_path / "home" / ".locks")
    monkeypatch.delenv("ROBO_LOADERS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_root() == str(tmp_path / "xdg" / "robo-loaders")
    (tmp_path / "f").write_text("x")
    with pytest.raises(cache.CacheError, match=r"cache_dir=.*/f' is a file"):
        cache.cache_root(str(tmp_path / "f"))


def _obtain(root, key, content, built):
    fp = Fingerprint("/src", (("", 1, 0, 0, 0),), content)

    def build(path, _fp):
        built.append(path)
        with open(path, "wb") as f:
            f.write(b"z" * 1000)

    return cache.obtain(root, "kind", {"src": key}, lambda recorded: fp, lambda p: None,
                        lambda p: os.path.getsize(p) == 1000, build, "test")


def test_obtain_reuses_rebuilds_on_change_and_retires_the_old_copy(tmp_path):
    root, built = cache.cache_root(str(tmp_path)), []
    e1, h1, reused, _ = _obtain(root, "a", "v1", built)
    assert not reused and len(built) == 1
    e1b, h1b, reused, _ = _obtain(root, "a", "v1", built)
    assert reused and e1b.name == e1.name and len(built) == 1
    e2, h2, reused, _ = _obtain(root, "a", "v2", built)  # the source changed
    assert not reused and e2.name != e1.name
    assert os.path.exists(e1.path)  # still in use (h1, h1b): kept
    del h1, h1b
    eb, hb, *_ = _obtain(root, "b", "v1", built)  # another source and key: not a sibling of 'a'
    assert cache.retire_siblings(e2) == [e1.path] and not os.path.exists(e1.path)
    assert sorted(e.name for e in cache.entries(root)) == sorted([e2.name, eb.name])


def test_prune_keeps_entries_in_use_and_removes_least_recently_used(tmp_path):
    root, built = cache.cache_root(str(tmp_path)), []
    ea, ha, *_ = _obtain(root, "a", "v", built)
    eb, hb, *_ = _obtain(root, "b", "v", built)
    ec, hc, *_ = _obtain(root, "c", "v", built)
    del hb, hc
    os.utime(os.path.join(root, ".locks", f"{eb.name}.use"), (time.time() - 100, time.time() - 100))
    removed = cache.prune(root, 2000)
    assert removed == [eb.path]  # b: least recently used and unused; a: in use; c: newer
    assert cache.prune(root, 0) == [ec.path] and os.path.exists(ea.path)


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
        with pytest.raises(cache.CacheError, match=r"timed out after 1 s waiting for pid \d+ .*kind-x-y.*"
                                                   r"ROBO_LOADERS_LOCK_TIMEOUT"):
            with cache.Entry(root, "kind-x-y").building("test"):
                pass
    finally:
        p.kill()
        p.wait()


def test_leftovers_of_killed_builds_are_swept(tmp_path):
    root = cache.cache_root(str(tmp_path))
    (tmp_path / "kind-a-b.rlc.tmp-123-456").write_bytes(b"partial")
    (tmp_path / "kind-c-d.tmp-9").mkdir()
    assert sorted(cache.sweep_temporary(root)) == sorted([str(tmp_path / "kind-a-b.rlc.tmp-123-456"),
                                                          str(tmp_path / "kind-c-d.tmp-9")])
