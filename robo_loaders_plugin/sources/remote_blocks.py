"""Remote video files read through one shared block cache.

Why: a pass decodes each episode's segment of a (multi-episode) video file once, in shuffled episode order, from
several threads, each with its own decoder. Read directly, every decoder re-reads the file's header, and
neighbouring segments overlap by the decoder's read size, so a pass reads the videos several times over when
segments are small. Through a cache of fixed blocks shared by all threads, each block is fetched once (while it
stays cached) and every read is served from memory: a pass reads about the videos' size. Only blocks a decode
touches are fetched; nothing is downloaded whole.

A read the remote store fails (a dropped connection, an endpoint gone) raises inside the decoder, which reports
only that it could not read its input; a :class:`BlockFile` therefore counts each failure of its file with the
store's exception (:class:`ReadFailures`), so that the caller says "the connection failed" with the URL instead of
calling an intact file corrupt.
"""

from __future__ import annotations

import functools
import io
import threading

from robo_loaders_plugin.core.lru import LoadOnceLRU

BLOCK = 256 * 1024
DEFAULT_CACHE_BYTES = 512 << 20


class RangeIgnored(OSError):
    """A block read answered with another number of bytes than asked for: the file changed while read, or the
    server ignores HTTP Range requests. Not a broken connection: the advice to check the network does not apply."""


class BlockCache:
    """Blocks of remote files, least recently used evicted beyond ``max_bytes``; each block is fetched once even
    when several threads want it at the same time (:class:`~robo_loaders_plugin.core.lru.LoadOnceLRU`).

    Args:
        fs: The fsspec filesystem the files are on.
        block: Block size in bytes.
        max_bytes: How many bytes of blocks are kept (at least two blocks).

    Attributes:
        fetched: Bytes read from the remote store.
    """

    def __init__(self, fs, block: int = BLOCK, max_bytes: int = DEFAULT_CACHE_BYTES):
        self.fs, self.block, self.max_blocks = fs, int(block), max(2, int(max_bytes) // int(block))
        self._blocks = LoadOnceLRU(self._fetch, self.max_blocks)
        self._count = threading.Lock()
        self._sizes: dict[str, int] = {}
        self.fetched = 0

    def size(self, path: str) -> int:
        """The remote file's size in bytes (one request per file, then remembered).

        Args:
            path: The file's path on the filesystem.
        """
        if path not in self._sizes:
            self._sizes[path] = int(self.fs.size(path))
        return self._sizes[path]

    def get(self, path: str, i: int) -> bytes:
        """Block ``i`` of ``path`` (the last block of a file may be shorter), fetched once while it stays cached.

        Args:
            path: The file's path on the filesystem.
            i: The block's index (offset ``i * block``).

        Returns:
            The block's bytes.
        """
        return self._blocks.get((path, i))

    def _fetch(self, key: tuple) -> bytes:
        path, i = key
        start = i * self.block
        end = min(start + self.block, self.size(path))
        data = self.fs.cat_file(path, start=start, end=end)
        if len(data) != end - start:  # a server ignoring Range answers the whole file: it was kept as this block,
            # and decoding said the file was truncated or corrupt (a reviewer's reproduction)
            raise RangeIgnored(
                f"{path}: the server answered {len(data)} bytes for bytes {start}-{end} of the file (it changed "
                "while being read, or the server ignores HTTP Range requests: serve it from one that answers them, "
                "or set local_cache_dir to copy each video whole)"
            )
        with self._count:
            self.fetched += len(data)
        return data

    def open(self, path: str) -> BlockFile:
        """A :class:`BlockFile` reading ``path`` through this cache (no failure counting).

        Args:
            path: The file's path on the filesystem.
        """
        return BlockFile(self, path)


class ReadFailures:
    """Reads of remote files the store failed, per file: (how many, the last exception). Shared by the
    :class:`BlockFile` objects of a source (its decoders' files, in any thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_path: dict[str, tuple[int, BaseException]] = {}

    def __getstate__(self):  # a copy in another process counts its own reads
        return {}

    def __setstate__(self, state):
        self.__init__()

    def record(self, path: str, exc: BaseException) -> None:
        """Count a failed read of ``path``, keeping ``exc`` as its last failure.

        Args:
            path: The file's path.
            exc: The store's exception.
        """
        with self._lock:
            self._by_path[path] = (self._by_path.get(path, (0, None))[0] + 1, exc)

    def of(self, path: str) -> tuple[int, BaseException | None]:
        """How many reads of ``path`` failed, and the last exception.

        Args:
            path: The file's path.

        Returns:
            ``(count, last exception)``; ``(0, None)`` when none failed.
        """
        with self._lock:
            return self._by_path.get(path, (0, None))


class BlockFile(io.RawIOBase):
    """A seekable, read-only file whose bytes come from a :class:`BlockCache` (one per decoder and thread).

    Args:
        cache: The shared block cache.
        path: The remote file's path (its size is read on construction).
        failures: Where reads the remote store fails are counted, or ``None``.
    """

    def __init__(self, cache: BlockCache, path: str, failures: ReadFailures | None = None):
        super().__init__()
        self.cache, self.path, self.pos, self.failures = cache, path, 0, failures
        self.length = self._remote(lambda: cache.size(path))

    def _remote(self, call):
        try:
            return call()
        except Exception as exc:
            if self.failures is not None:
                self.failures.record(self.path, exc)
            raise

    def readable(self) -> bool:
        """Always true."""
        return True

    def seekable(self) -> bool:
        """Always true."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position (never below 0; past the end is allowed, and reads there return nothing).

        Args:
            offset: Bytes relative to ``whence``.
            whence: ``io.SEEK_SET``, ``io.SEEK_CUR`` or ``io.SEEK_END``.

        Returns:
            The new position.
        """
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer) -> int:
        """Read up to ``len(buffer)`` bytes at the position into ``buffer``, from the cached blocks.

        Args:
            buffer: A writable buffer.

        Returns:
            The bytes read: 0 at the end of the file.

        Raises:
            Exception: the store's error for a block it failed to fetch (counted in ``failures`` first).
        """
        view = memoryview(buffer).cast("B")
        n = min(len(view), max(0, self.length - self.pos))
        done = 0
        while done < n:
            i, off = divmod(self.pos + done, self.cache.block)
            data = self._remote(functools.partial(self.cache.get, self.path, i))
            take = min(n - done, len(data) - off)
            if take <= 0:  # the remote file is shorter than when it was opened: no progress is possible
                raise OSError(
                    f"{self.path}: block {i} ends at byte {i * self.cache.block + len(data)}, before the "
                    f"{self.length} bytes the file had when it was opened (it changed while being read)"
                )
            view[done : done + take] = data[off : off + take]
            done += take
        self.pos += done
        return done
