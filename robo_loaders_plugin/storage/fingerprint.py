"""The one staleness policy: when persisted data (a backend's cache file, converted shards) may be served for a
source (a robomimic HDF5 file, a LeRobot v3 directory).

A source's :class:`Fingerprint` records its path, every file's relative name, size, mtime, inode and ctime, and a
*content digest*: a SHA-256 over every byte of the source (each source format says how its files are fed in:
``robo_loaders_plugin.sources``). Persisted data records the fingerprint of the source it was made from, and is
served only while the source still has the **same file names, sizes, mtimes and content digest**:

- the content digest catches what mtime cannot: ``cp -p``, ``rsync -t`` and archive extraction restore the mtime
  of a changed file; the mtime is conservative on top: a ``touch`` or a copy that does not keep mtimes counts as a
  change (rebuild, or for explicitly given shards the ``check_source: false`` opt-out);
- the path is not compared, so a dataset moved, or copied with its mtimes kept (``cp -p``, ``rsync -a``), still
  matches its shards; a cache directory keys its entries by path, so it never mixes two sources;
- fast path: when every file still has the recorded (size, mtime, inode, ctime), the digest is not recomputed and
  the recorded fingerprint is returned. The kernel sets ctime on every write and no user tool can set it back, so
  an equal ctime means unchanged bytes. Otherwise the whole source is read once: the digest is only ever computed
  when something about the files changed (or on a first build, which reads the source in full anyway), and one
  read of the source costs less than training on stale data. (Before :data:`DIGEST_METHOD`, the digest read a
  sample of large files, so an edit confined to unsampled bytes with the mtime restored was served.)

Why a fingerprint records its digest's ``method``: fingerprints recorded by earlier versions hold a sampled digest.
Two digests of different methods are never compared: an identical stat still takes the fast path (the source is
unchanged since it was recorded, whatever the method), any other stat is a difference ("computed by another
method"), so caches are rebuilt and explicitly given shards are refused until converted again. New digests also
start with the method's name, so they never equal an old one where only ``content`` is compared (a conversion's
resume state).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterable

from robo_loaders_plugin.core.errors import StaleSourceError
from robo_loaders_plugin.core.files import stat_files

DIGEST_METHOD = "sha256-all-bytes-v2"  # the content digest reads every byte of the source
LEGACY_METHOD = "sha256-sampled-v1"  # recorded without a method: large files were sampled (16 blocks, 3 frames)


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """What persisted data records about the source it was made from (see the module's docstring).

    Attributes:
        path: The source's real path (not compared: a moved source still matches).
        files: ``((relative name, size, mtime_ns, inode, ctime_ns), ...)`` sorted by name; name ``""`` for a
            source that is one file.
        content: SHA-256 hex of the source's content.
        method: How ``content`` was computed (:data:`DIGEST_METHOD`, or :data:`LEGACY_METHOD` for fingerprints
            recorded without one): digests of different methods are never compared.
    """

    path: str
    files: tuple  # ((relative name, size, mtime_ns, inode, ctime_ns), ...), sorted by name
    content: str  # SHA-256 hex of the content check
    method: str = DIGEST_METHOD  # how ``content`` was computed: digests of different methods are never compared

    def as_dict(self) -> dict:
        """The fingerprint as a JSON-able dict (what entries and shards record; :meth:`from_dict` reads it back)."""
        return {
            "path": self.path,
            "files": [list(f) for f in self.files],
            "content": self.content,
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Fingerprint:
        """A fingerprint recorded by :meth:`as_dict` (one recorded without ``method`` is :data:`LEGACY_METHOD`).

        Args:
            d: The recorded dict.

        Returns:
            The :class:`Fingerprint`.

        Raises:
            StaleSourceError: ``d`` is malformed (written by another version: the data must be rebuilt).
        """
        try:
            files = tuple(tuple(f) for f in d["files"])
            # every entry (name, size, mtime_ns, inode, ctime_ns): a shorter one that still parsed crashed the
            # comparison of the mixture index with an IndexError (a reviewer's reproduction)
            if not all(
                len(f) == 5
                and isinstance(f[0], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in f[1:])
                for f in files
            ):
                raise TypeError("a file entry is not (name, size, mtime_ns, inode, ctime_ns)")
            return cls(str(d["path"]), files, str(d["content"]), str(d.get("method", LEGACY_METHOD)))
        except (KeyError, TypeError, AttributeError) as exc:
            raise StaleSourceError(
                f"malformed source fingerprint ({exc!r}); the data was written by another "
                "version of robo-loaders and must be rebuilt"
            ) from None

    def identity(self) -> list:
        """What must stay equal for data made from this source to be served: names, sizes, mtimes, digest (and the
        digest's method, left out for the legacy one so that entries recorded before it keep their names)."""
        base = [[f[0], f[1], f[2]] for f in self.files] + [self.content]
        return base if self.method == LEGACY_METHOD else base + [self.method]

    def differences(self, current: Fingerprint) -> list[str]:
        """What makes data made from ``self`` unusable for ``current``.

        Files removed, added, resized or with another mtime; else, when the digests are of different methods, that the
        content cannot be shown to be the same; else a content digest that differs.

        Args:
            current: The source's fingerprint now.

        Returns:
            One line per difference; empty when it is the same source.
        """
        mine = {f[0]: f for f in self.files}
        theirs = {f[0]: f for f in current.files}
        both = sorted(set(mine) & set(theirs))
        out = [f"{n or 'the file'}: removed" for n in sorted(set(mine) - set(theirs))]
        out += [f"{n or 'the file'}: added" for n in sorted(set(theirs) - set(mine))]
        out += [f"{n or 'the file'}: size {mine[n][1]} -> {theirs[n][1]}" for n in both if mine[n][1] != theirs[n][1]]
        out += [
            f"{n or 'the file'}: modified (mtime changed)"
            for n in both
            if mine[n][1] == theirs[n][1] and mine[n][2] != theirs[n][2]
        ]
        if not out and self.method != current.method:
            out.append(
                f"the files are not the ones recorded (another path, inode or ctime: moved, copied or "
                f"rewritten) and the recorded content digest was computed by another robo-loaders "
                f"({self.method}; this one computes {current.method}), so the content cannot be shown to be "
                "the same"
            )
        elif not out and self.content != current.content:
            out.append("same files, sizes and mtimes, but the content digest differs (data changed in place)")
        return out

    def shown_differences(self, current: Fingerprint, first: int = 3) -> str:
        """:meth:`differences` as one phrase for a message: the first ``first`` of them and how many more.

        Why one place: every refusal of data made from another version of a source (a cache entry, a conversion,
        shards) names what changed the same way.

        Args:
            current: The source's fingerprint now.
            first: How many differences to name.

        Returns:
            ``"a; b; c; and 2 more"``; ``"its files were replaced"`` when no difference is recorded (a source
            replaced by one with the same files' stats and digest method, seen only by its identity).
        """
        diff = self.differences(current) or [
            "its files were written (another inode or ctime) and hold the same bytes again"
            if self.rewritten(current)
            else "its files were replaced"
        ]
        return "; ".join(diff[:first]) + (f"; and {len(diff) - first} more" if len(diff) > first else "")

    def rewritten(self, current: Fingerprint) -> bool:
        """Whether a file was written (or replaced) between the two stats, though its name, size, mtime and the
        content digest are the same again: another inode or ctime.

        Why: a build reads the source between two fingerprints; a source changed in place during it and put back
        with its mtime (``cp -p`` of a backup) has the first version's identity after the build, while the build
        read the other version's bytes (a reviewer's reproduction: kept and reused by every later run). The kernel
        moves ctime at every write, and nothing sets it back.

        Args:
            current: The source's fingerprint now (a stat taken after the other's).

        Returns:
            True when the files' full stats differ.
        """
        return [list(f) for f in self.files] != [list(f) for f in current.files]


def fingerprint(
    path: str, digest: Callable[[], str], recorded: Fingerprint | None = None, names: Iterable[str] | None = None
) -> Fingerprint:
    """The fingerprint of the source at ``path``.

    The content digest is skipped when ``recorded`` is of the same real path and has the same stat of every file:
    then ``recorded`` itself is returned, whatever its method (see the module's docstring).

    Args:
        path: The source's file or directory.
        digest: ``digest()`` computes the content digest (every byte, as :data:`DIGEST_METHOD` says).
        recorded: The fingerprint data made from this source recorded, for the fast path.
        names: The files of a directory source that count (default: every file under it).

    Returns:
        ``recorded``, or a new :class:`Fingerprint` with :data:`DIGEST_METHOD`.
    """
    real = os.path.realpath(path)
    files = stat_files(real, names)
    if recorded is not None and recorded.path == real and recorded.files == files:
        return recorded
    return Fingerprint(real, files, digest(), DIGEST_METHOD)


def check_same_source(recorded: Fingerprint, current: Fingerprint, what: str, fix: str) -> None:
    """Refuse data made from ``recorded`` when it no longer fits the source as it is now.

    Args:
        recorded: The fingerprint the data recorded.
        current: The source's fingerprint now.
        what: Names the data in the message ("the shards in ...").
        fix: What the user can do, appended to the message.

    Raises:
        StaleSourceError: naming both sources and the first five differences (:meth:`Fingerprint.differences`).
    """
    if recorded.differences(current):
        raise StaleSourceError(
            f"{what} was made from {recorded.path}, which does not match {current.path} now "
            f"({recorded.shown_differences(current, 5)}). {fix}"
        )


def hash_file(h, path: str, size: int | None = None) -> None:
    """Feed a whole file to ``h`` (its size first), in 1 MiB reads.

    Args:
        h: A hashlib object (:func:`new_digest`).
        path: The file.
        size: The size already known from a stat (a file that is no longer that size changed meanwhile: the
            caller's stat check refuses it later); default: stat it now.
    """
    size = os.path.getsize(path) if size is None else size
    h.update(f"{size}:".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def new_digest():
    """A SHA-256 for a content digest, started with :data:`DIGEST_METHOD` (so no digest of another method can
    equal it)."""
    h = hashlib.sha256()
    h.update(DIGEST_METHOD.encode() + b"\n")
    return h
