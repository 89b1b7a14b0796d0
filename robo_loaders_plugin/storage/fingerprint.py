"""The one staleness policy: when persisted data (a compressed_cache file, converted shards) may be served for a
source (a robomimic HDF5 file, a LeRobot v3 directory).

A source's :class:`Fingerprint` records its path, every file's relative name, size, mtime, inode and ctime, and a
*content digest*: a SHA-256 over the parts of the source that are cheap to read in full and a sample of the rest
(each source format says which: ``robo_loaders_plugin.sources``). Persisted data records the fingerprint of the
source it was made from, and is served only while the source still has the **same file names, sizes, mtimes and
content digest**:

- the content digest catches what mtime cannot: ``cp -p``, ``rsync -t`` and archive extraction restore the mtime
  of a changed file; the mtime catches changes in bytes the digest does not sample, and is conservative: a ``touch``
  or a copy that does not keep mtimes counts as a change (rebuild, or for explicitly given shards the
  ``check_source: false`` opt-out);
- the path is not compared, so a dataset moved, or copied with its mtimes kept (``cp -p``, ``rsync -a``), still
  matches its shards; a cache directory keys its entries by path, so it never mixes two sources;
- fast path: when every file still has the recorded (size, mtime, inode, ctime), the digest is not recomputed. The
  kernel sets ctime on every write and no user tool can set it back, so an equal ctime means unchanged bytes.

What the digest samples is documented beside each source; a change confined to bytes it does not read (say, one
pixel of one frame of a large video) is not seen by this check; ``robo-loaders verify --source`` compares every
byte of converted shards with their source.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, Iterable

from robo_loaders_plugin.core.errors import StaleSourceError

BLOCK = 64 * 1024
SAMPLED_BLOCKS = 16          # a large file's digest reads this many evenly spaced blocks (first and last included)
FULL_HASH_BELOW = 1 << 20    # files smaller than this are hashed whole


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    path: str
    files: tuple            # ((relative name, size, mtime_ns, inode, ctime_ns), ...), sorted by name
    content: str            # SHA-256 hex of the content check

    def as_dict(self) -> dict:
        return {"path": self.path, "files": [list(f) for f in self.files], "content": self.content}

    @classmethod
    def from_dict(cls, d: dict) -> "Fingerprint":
        try:
            return cls(str(d["path"]), tuple(tuple(f) for f in d["files"]), str(d["content"]))
        except (KeyError, TypeError) as exc:
            raise StaleSourceError(f"malformed source fingerprint ({exc!r}); the data was written by another "
                                   "version of robo-loaders and must be rebuilt") from None

    def identity(self) -> list:
        """What must stay equal for data made from this source to be served: names, sizes, mtimes, digest."""
        return [[f[0], f[1], f[2]] for f in self.files] + [self.content]

    def differences(self, current: "Fingerprint") -> list[str]:
        """What makes data made from ``self`` unusable for ``current`` (empty: the same source)."""
        mine = {f[0]: f for f in self.files}
        theirs = {f[0]: f for f in current.files}
        both = sorted(set(mine) & set(theirs))
        out = [f"{n or 'the file'}: removed" for n in sorted(set(mine) - set(theirs))]
        out += [f"{n or 'the file'}: added" for n in sorted(set(theirs) - set(mine))]
        out += [f"{n or 'the file'}: size {mine[n][1]} -> {theirs[n][1]}" for n in both if mine[n][1] != theirs[n][1]]
        out += [f"{n or 'the file'}: modified (mtime changed)" for n in both
                if mine[n][1] == theirs[n][1] and mine[n][2] != theirs[n][2]]
        if not out and self.content != current.content:
            out.append("same files, sizes and mtimes, but the content digest differs (data changed in place)")
        return out


def stat_files(path: str, names: Iterable[str] | None = None) -> tuple:
    """(name, size, mtime_ns, inode, ctime_ns) of ``path`` itself (a file: name "") or of every file under it."""
    path = os.path.realpath(path)
    if os.path.isfile(path):
        st = os.stat(path)
        return (("", st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns),)
    if names is None:
        names = [os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files]
    out = []
    for n in sorted(names):
        st = os.stat(os.path.join(path, n))
        out.append((n, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
    return tuple(out)


def fingerprint(path: str, digest: Callable[[], str], recorded: Fingerprint | None = None,
                names: Iterable[str] | None = None) -> Fingerprint:
    """The fingerprint of the source at ``path``; ``digest()`` computes its content digest, skipped when
    ``recorded`` has the same stat of every file (see the module docstring)."""
    real = os.path.realpath(path)
    files = stat_files(real, names)
    if recorded is not None and recorded.path == real and recorded.files == files:
        return recorded
    return Fingerprint(real, files, digest())


def check_same_source(recorded: Fingerprint, current: Fingerprint, what: str, fix: str) -> None:
    """Raise :class:`StaleSourceError` naming both sources when data made from ``recorded`` no longer fits."""
    diff = recorded.differences(current)
    if diff:
        shown = "; ".join(diff[:5]) + (f"; and {len(diff) - 5} more" if len(diff) > 5 else "")
        raise StaleSourceError(f"{what} was made from {recorded.path}, which does not match {current.path} now "
                               f"({shown}). {fix}")


def hash_file(h, path: str, size: int | None = None) -> None:
    """Feed a file to ``h``: whole when small, else ``SAMPLED_BLOCKS`` evenly spaced blocks and the size."""
    size = os.path.getsize(path) if size is None else size
    with open(path, "rb") as f:
        if size < FULL_HASH_BELOW:
            h.update(f.read())
            return
        h.update(str(size).encode())
        step = (size - BLOCK) / (SAMPLED_BLOCKS - 1)
        for i in range(SAMPLED_BLOCKS):
            f.seek(int(i * step))
            h.update(f.read(BLOCK))


def new_digest():
    return hashlib.sha256()
