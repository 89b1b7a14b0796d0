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
