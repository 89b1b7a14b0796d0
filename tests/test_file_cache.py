"""The read-through file cache with servers that do not say a file's size (an HTTP server without
Content-Length) or its version: copies that cannot be shown to be the remote file are reused within a process only."""

import hashlib
import os

from fsspec.implementations.local import LocalFileSystem

from robo_loaders_plugin.sources.file_cache import FileCache, remote_identity


class NoSize(LocalFileSystem):
    """A filesystem whose ``info`` gives an ETag-like version but no size."""

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        info.pop("size", None)
        info["ETag"] = "v1"
        return info


def test_a_copy_of_a_file_of_unknown_size_is_not_reused_by_a_later_process(tmp_path):
    """A reviewer's reproduction: a server without Content-Length that closed a download halfway left a copy of half
    the file, recorded with its own size and SHA-256 and reused by every later run, each failing to decode it while
    naming the intact remote file. A copy of a file of unknown size cannot be shown complete: it is reused within
    the process that made it, and a later one copies it again and says why. Control: a store that gives the size
    reuses its copy (tests below)."""
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"abc" * 1000)
    said = []
    cache = FileCache(NoSize(), str(tmp_path / "cache"), log=said.append)
    local = cache.get(str(src))
    assert open(local, "rb").read() == src.read_bytes() and cache.downloads == 1
    assert cache.get(str(src)) == local and cache.downloads == 1  # reused within the process
    with open(local, "r+b") as f:  # a download cut short, as the server without Content-Length left it
        f.truncate(100)
    again = FileCache(NoSize(), str(tmp_path / "cache"), log=said.append)
    assert open(again.get(str(src)), "rb").read() == src.read_bytes() and again.downloads == 1
    assert any("gives no size for it (no Content-Length)" in line for line in said), said


class NoVersion(LocalFileSystem):
    """A filesystem whose ``info`` gives a size but no version (an HTTP server without ETag and Last-Modified)."""

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        for key in ("mtime", "created", "ETag", "LastModified"):
            info.pop(key, None)
        return info


def _copied_once(tmp_path, fs):
    """A remote file of 3000 bytes copied once by a first process through ``fs``: ``(src, said, first, local)``."""
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"A" * 3000)
    said = []
    first = FileCache(fs, str(tmp_path / "cache"), log=said.append)
    return src, said, first, first.get(str(src))


def test_a_copy_of_a_file_whose_store_gives_no_version_is_not_reused_by_a_later_process(tmp_path):
    """A reviewer's reproduction: with neither ETag nor Last-Modified, a copy's identity was its size alone, so a
    remote file replaced by one of the same size was served stale by every later run, without a word. Such a copy
    is now reused only within the process that made it; a later one downloads again and says why. Control: a store
    that gives a version reuses the copy (the test above)."""
    src, said, first, local = _copied_once(tmp_path, NoVersion())
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


class HubLike(LocalFileSystem):
    """A filesystem whose ``info`` has the Hub's shape (``HfFileSystem.info``): a content hash, no time, no ETag."""

    protocol = "hf"

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        for key in ("mtime", "created", "ETag", "LastModified"):
            info.pop(key, None)
        with open(path, "rb") as f:
            info["blob_id"] = hashlib.sha1(f.read()).hexdigest()
        return info


def test_a_copy_of_a_hub_file_is_reused_by_its_blob_id_and_a_replaced_one_is_copied_again(tmp_path):
    """A reviewer's finding: none of the keys the Hub's ``info`` gives was taken as a version, so every ``hf://``
    copy (videos under ``local_cache_dir``, the mirrored tables) was downloaded again by every run. Its blob id, a
    content hash, is the version now. Control: a file replaced with one of the same size is copied again."""
    src, said, _first, local = _copied_once(tmp_path, HubLike())
    later = FileCache(HubLike(), str(tmp_path / "cache"), log=said.append)
    assert later.get(str(src)) == local and later.downloads == 0 and not said
    assert not remote_identity(HubLike(), str(src), None)["by_time"]
    src.write_bytes(b"B" * 3000)
    third = FileCache(HubLike(), str(tmp_path / "cache"), log=said.append)
    assert open(third.get(str(src)), "rb").read() == b"B" * 3000 and third.downloads == 1
    assert any("the remote file changed since it was copied (version blob_id=" in line for line in said), said


class HttpLike(LocalFileSystem):
    """A filesystem whose ``info`` has an HTTP server's shape: an ETag made of the modification time and size."""

    protocol = ("http", "https")

    def info(self, path, **kwargs):
        info = dict(super().info(path, **kwargs))
        info["ETag"] = f'"{int(info.pop("mtime")):x}-{info["size"]:x}"'
        return info


def test_copies_reused_by_modification_time_say_what_is_not_noticed(tmp_path):
    """A reviewer's reproduction: an HTTP file replaced with one of the same size and modification time (rsync -t,
    cp -p) was served from the old copy by later runs, and the docs said no copy is served stale. Such a store
    gives nothing that tells the two apart, so the copies are reused and a run says so once, with what to do.
    Control: a store whose version changes at every write (S3's ETag) says nothing."""
    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"A" * 3000)
    said = []
    FileCache(HttpLike(), str(tmp_path / "cache"), log=said.append).get(str(src))
    later = FileCache(HttpLike(), str(tmp_path / "cache"), log=said.append)
    later.get(str(src))
    later.get(str(src))
    other = src.parent / "other.mp4"
    other.write_bytes(b"C" * 10)
    later.get(str(other))
    later.get(str(other))  # copied by the later run, reused by it: nothing more is said
    lines = [line for line in said if "is not noticed" in line]
    assert len(lines) == 1 and "ETag: the store gives no content version" in lines[0], said
    assert f"remove {tmp_path / 'cache'}" in lines[0]
    assert remote_identity(HttpLike(), str(src), None)["by_time"]
    assert remote_identity(LocalFileSystem(), str(src), None)["by_time"]  # an mtime
    said.clear()
    FileCache(ContentVersion(), str(tmp_path / "etag"), log=said.append).get(str(src))
    FileCache(ContentVersion(), str(tmp_path / "etag"), log=said.append).get(str(src))
    assert not said and not remote_identity(ContentVersion(), str(src), None)["by_time"]


class ContentVersion(LocalFileSystem):
    """A filesystem whose ``info`` gives the size and a content version (S3's ETag)."""

    def info(self, path, **kwargs):
        return dict(super().info(path, **kwargs), ETag="v1")


class CutShort(LocalFileSystem):
    """A server whose GET sends half of every file while its HEAD reports the whole size (a truncated response)."""

    def get_file(self, rpath, lpath, **kwargs):
        with open(rpath, "rb") as src, open(lpath, "wb") as dst:
            dst.write(src.read()[: os.path.getsize(rpath) // 2])


def test_a_response_cut_short_is_called_so_not_a_file_that_kept_changing(tmp_path):
    """A reviewer's reproduction: a server sending half of a file it reports whole was said to have a file that
    "kept changing while it was copied", sending the user to wait for a writer that did not exist. The same file
    each time, cut short: the message says so, with the bytes. Control: a file replaced during every copy is still
    one that kept changing."""
    import pytest

    from robo_loaders_plugin.core.errors import SourceError

    src = tmp_path / "remote" / "video.mp4"
    src.parent.mkdir()
    src.write_bytes(b"A" * 3000)
    cache = FileCache(CutShort(), str(tmp_path / "cache"), log=lambda *a: None)
    with pytest.raises(SourceError, match=r"the server sent 1500 of the 3000 bytes it reports for it \(a truncated"):
        cache.get(str(src))

    class Rewritten(LocalFileSystem):
        def get_file(self, rpath, lpath, **kwargs):
            super().get_file(rpath, lpath, **kwargs)
            with open(rpath, "ab") as f:  # the remote file grows during every copy
                f.write(b"B")

    with pytest.raises(SourceError, match="kept changing while it was copied"):  # control
        FileCache(Rewritten(), str(tmp_path / "cache2"), log=lambda *a: None).get(str(src))
