"""The read-through file cache with a server that does not say a file's size (an HTTP server without
Content-Length): the copy is checked against the size it had when copied, and reused."""

import os

from fsspec.implementations.local import LocalFileSystem

from robo_loaders_plugin.sources.file_cache import FileCache


class NoSize(LocalFileSystem):
    """A filesystem whose ``info`` gives an ETag-like version but no size."""

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        info.pop("size", None)
        info["ETag"] = "v1"
        return info


def test_a_file_of_unknown_size_is_cached_and_reused(tmp_path):
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"abc" * 1000)
    cache = FileCache(NoSize(), str(tmp_path / "cache"), log=lambda *a: None)
    local = cache.get(str(src))
    assert open(local, "rb").read() == src.read_bytes() and cache.downloads == 1
    again = FileCache(NoSize(), str(tmp_path / "cache"), log=lambda *a: None)
    assert again.get(str(src)) == local and again.downloads == 0  # reused: it was "truncated" every time before
    with open(local, "r+b") as f:  # negative control: a truncated copy is still seen and copied again
        f.truncate(100)
    third = FileCache(NoSize(), str(tmp_path / "cache"), log=lambda *a: None)
    assert open(third.get(str(src)), "rb").read() == src.read_bytes() and third.downloads == 1
    assert os.path.getsize(local) == 3000


class NoVersion(LocalFileSystem):
    """A filesystem whose ``info`` gives a size but no version (an HTTP server without ETag and Last-Modified)."""

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        for key in ("mtime", "created", "ETag", "LastModified"):
            info.pop(key, None)
        return info


def test_a_copy_of_a_file_whose_store_gives_no_version_is_not_reused_by_a_later_process(tmp_path):
    """A reviewer's reproduction: with neither ETag nor Last-Modified, a copy's identity was its size alone, so a
    remote file replaced by one of the same size was served stale by every later run, without a word. Such a copy
    is now reused only within the process that made it; a later one downloads again and says why. Control: a store
    that gives a version reuses the copy (the test above)."""
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"A" * 3000)
    said = []
    first = FileCache(NoVersion(), str(tmp_path / "cache"), log=said.append)
    local = first.get(str(src))
    assert first.get(str(src)) == local and first.downloads == 1  # reused within the process
    src.write_bytes(b"B" * 3000)  # replaced: the same name and size
    later = FileCache(NoVersion(), str(tmp_path / "cache"), log=said.append)
    assert open(later.get(str(src)), "rb").read() == b"B" * 3000 and later.downloads == 1
    assert any("gives no version for it (no ETag or Last-Modified)" in line for line in said), said


def test_what_a_killed_download_left_is_removed_when_the_file_is_next_copied(tmp_path):
    """A download killed midway (a preempted job) left ``<copy>.tmp-<pid>-<thread>-<hex>``, a whole video, which
    nothing removed. The next process that takes the copy's lock removes such leftovers of that file (no one else can
    be writing them). Control: another file's leftover and a user's file of a like name stay."""
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"abc" * 1000)
    cache = FileCache(NoSize(), str(tmp_path / "cache"), log=lambda *a: None)
    local = cache.local_path(str(src))
    os.makedirs(os.path.dirname(local))
    leftover, other, user = local + ".tmp-4242-1-0123abcd", local + "x.tmp-4242-1-0123abcd", local + "-notes.txt"
    for p in (leftover, other, user):
        with open(p, "wb") as f:
            f.write(b"partial")
    assert cache.get(str(src)) == local and open(local, "rb").read() == src.read_bytes()
    assert not os.path.exists(leftover) and os.path.exists(other) and os.path.exists(user)
