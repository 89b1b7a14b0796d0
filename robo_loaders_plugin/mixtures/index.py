"""The mixture index: what each component's metadata says, read once and kept in the cache root, so a mixture's
start-up on reuse stats its components' metadata files instead of reading them.

Why: a mixture of hundreds of components read every component's metadata at every start (LeRobot: ``info.json``,
``stats.json``, the tasks and episodes parquet files, ~0.1-0.4 s each on a busy machine), so start-up grew
linearly with the components on every run, not only on the first. The index keeps each component's record (what
the framework's checks read from its metadata) beside the :class:`~robo_loaders_plugin.storage.fingerprint.Fingerprint`
of the files it was read from, and serves the record only while the component's files match it under the project's
one staleness policy (``storage.fingerprint``: same names, sizes, mtimes and content digest; an unchanged stat
skips the digest). A component whose files changed (edited, truncated, replaced, renamed onto the path) is re-read
alone; the others are not opened.

Why one small JSON file per component (``<cache root>/.mixture-index/<kind>/<hash of its real path>.json``), not
one per mixture: a component added, removed or renamed re-reads only itself, the records are shared by every
mixture a dataset is in, and two runs writing at once never drop each other's records (each file is replaced
atomically). JSON, never pickle: a record is data the framework's reader gives back, not code. The directory is
hidden, so the cache root's pruning neither counts nor removes it (``storage.cache.is_entry``).

On a first run, the components' metadata is read by a thread pool (the reads are file I/O and parsing in
pyarrow and json, which release the GIL for much of the time). The records whose files' stat is unchanged are
given first, one after another in the caller's thread: a stat and a small JSON file each is Python holding the
GIL, which threads only slow down (400 components: 0.32-0.35 s against 0.57-0.75 s in 8 threads).

A component may be one file (a robomimic HDF5): its record is keyed by the file's stat alone (``by_content=False``:
size, mtime, inode and ctime, the fingerprints' fast path), and any change of it reads the record again. Why not
its content digest: that reads every byte of the file (gigabytes of frames) to save a metadata read of
milliseconds; the kernel sets ctime on every write, so an unchanged stat is unchanged bytes, as the caches trust.
One component may hold several records (a robomimic file's filter keys): ``records(paths, keys)``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tqdm import tqdm

from robo_loaders_plugin.core.errors import RoboLoadersError, StaleSourceError
from robo_loaders_plugin.core.files import atomic_write_json, stat_files
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint, fingerprint, hash_file, new_digest

logger = get_logger(__name__)

INDEX_DIR = ".mixture-index"
READ_THREADS = 8  # metadata reads in flight on a first run (I/O bound; more gain little on local disks)
STAT_METHOD = "stat-v1"  # a record keyed by its files' stat alone (``by_content=False``): any change reads it again


def files_under(path: str, folders: Sequence[str]) -> list[str]:
    """The files under ``path``'s ``folders`` (relative names, sorted): what a component's record is read from.

    Args:
        path: The component's directory.
        folders: Its metadata folders (LeRobot: ``("meta",)``).

    Returns:
        Relative names; an added or removed file changes the list, so the record is read again.
    """
    from robo_loaders_plugin.core import files

    out = []
    for folder in folders:  # folders reached through symbolic links included (core.files.files_under)
        base = os.path.join(path, folder)
        out += [os.path.relpath(os.path.join(base, n), path) for n in files.files_under(base)]
    return sorted(out)


def _digest(path: str, names: list[str]) -> Callable[[], str]:
    def digest() -> str:
        h = new_digest()
        if os.path.isfile(path):  # a component that is one file
            hash_file(h, path)
        for name in names:
            h.update(name.encode() + b"\n")
            hash_file(h, os.path.join(path, name))
        return h.hexdigest()

    return digest


def _by_stat(real: str, names: list[str], recorded: Fingerprint | None) -> Fingerprint:
    """The fingerprint of ``real`` whose content is its files' whole stat (size, mtime, inode, ctime): equal to
    ``recorded`` only while nothing of the stat changed."""
    files = stat_files(real, names)  # a file: its own stat
    if recorded is not None and recorded.path == real and recorded.files == files:
        return recorded
    h = new_digest()
    h.update(json.dumps([list(f) for f in files]).encode())
    return Fingerprint(real, files, h.hexdigest(), STAT_METHOD)


def _record_path(root: str, kind: str, real: str, key: str | None = None) -> str:
    name = real if key is None else f"{real}\n{key}"
    return os.path.join(root, INDEX_DIR, kind, cache.short_hash(name) + ".json")


def record_digest(record) -> str:
    """The digest a record is kept with: SHA-256 of its canonical JSON (keys sorted, no spaces).

    Why: the fingerprint says the component's files are unchanged, not that the record is what was read from them;
    a record edited by hand or bit-flipped on disk that still parses would be served (a wrong size, rate or shape
    for the checks and the padding). A record whose digest differs is read again from the component's files.

    Args:
        record: The record (JSON-able).

    Returns:
        The hex digest.
    """
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _recorded(path: str) -> tuple[Fingerprint | None, dict | None]:
    """The fingerprint and the record kept at ``path``; ``(None, None)`` when there is none, or it cannot be read,
    or its record's digest differs from the one it was kept with (edited, damaged)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        record = doc["record"]
        if doc["record_digest"] != record_digest(record):
            logger.info(f"mixture index: {path} does not hold the record it was written with; read again")
            return None, None
        return Fingerprint.from_dict(doc["fingerprint"]), record
    except (OSError, ValueError, KeyError, TypeError, RecursionError, StaleSourceError):  # deeply nested JSON too
        return None, None


_MISS = object()  # :meth:`ComponentIndex._one` with ``only_kept``: no record kept for these files' stat


class _Unread(Exception):
    """Raised for a content digest asked for while only kept records are given (``only_kept``)."""


def _unread() -> str:
    raise _Unread


# what :meth:`ComponentIndex.records` said, per kind and components: robomimic asks for a mixture's records once per
# split and check (2-3 times a start), and the line repeated said nothing new
_SAID: set[tuple] = set()


def tqdm_lock_made() -> None:
    """Make tqdm's class-wide lock before components' metadata is read in threads.

    Why: reading a LeRobot component's ``meta/`` goes through HF ``datasets``, whose parquet loading calls tqdm's
    ``thread_map``; that wraps its work in ``ensure_lock``, which, when ``tqdm._lock`` does not exist yet, creates it
    and deletes it at the end. Two threads doing so at once both delete it and the second dies with
    ``AttributeError: type object 'tqdm' has no attribute '_lock'`` (it failed a ``lerobot-train`` start in CI).
    With the lock made here (``tqdm.get_lock()``, public), every ``ensure_lock`` finds it and puts it back.
    """
    tqdm.get_lock()


class ComponentIndex:
    """Per-component records of a mixture's metadata, reused while each component's files are unchanged.

    Args:
        kind: Names the framework and the record's format (``"lerobot-meta-1"``): a new format never reads an old
            record.
        folders: Each component's metadata folders, relative to its directory: what its fingerprint covers.
        read: ``read(k) -> dict``: component ``k``'s record, read from its files (JSON-able).
        cache_dir: The cache root (``None``: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``); one that cannot
            be written keeps no index (every component read, with a log line).
        where: How the user sets ``cache_dir``, for the cache root's errors.
        threads: Reads in flight on a first run.
        by_content: Whether a component whose stat changed keeps its record when its content digest is unchanged
            (``True``: small metadata files, a ``touch`` or ``cp -p`` reads nothing again); ``False``: any change of
            the stat reads the component again (one large file, whose digest would read every byte).
        parse: ``parse(record) -> value``: what :meth:`records` gives for a record (default: the record itself). A
            kept record it refuses (``KeyError``, ``TypeError``, ``ValueError``, ``IndexError``, ``AttributeError``:
            a record of another shape) is read again from the component's files, never a failed start; a record
            just read is given through JSON first, so a first run and a reuse give the same values.
    """

    def __init__(
        self,
        kind: str,
        folders: Sequence[str],
        read: Callable[[int], dict],
        cache_dir: str | None = None,
        where: str = "cache_dir",
        threads: int = READ_THREADS,
        by_content: bool = True,
        parse: Callable[[dict], Any] | None = None,
    ):
        self.kind, self.folders, self.read = kind, tuple(folders), read
        self.by_content = by_content
        self.parse = parse if parse is not None else (lambda record: record)
        try:
            self.root: str | None = cache.cache_root(cache_dir, where)
        except RoboLoadersError as exc:  # slower, never wrong: every component read, as before the index
            logger.info(f"mixture index: not kept ({exc}); every component's metadata is read")
            self.root = None
        self.threads = max(1, int(threads))
        self.reread: list[int] = []  # the components the last :meth:`records` read from their files

    def _one(self, k: int, path: str, key: str | None = None, only_kept: bool = False) -> Any:
        """Component ``k``'s record: the index's while its files match, else read (and kept for the next run).

        Why the fingerprint is taken before the read: a file changed during the read then no longer matches what
        was recorded, so the next run reads it again (never the other way round). A component whose files cannot
        be stat-ed (removed meanwhile) is read without keeping anything: ``read`` says what is wrong.

        ``only_kept``: give the kept record only where the files' stat is the one recorded (no digest, no read,
        nothing written), else :data:`_MISS`, which :meth:`records` then reads in its threads.
        """
        if self.root is None:
            if only_kept:
                return _MISS
            self.reread.append(k)
            return self._parsed(self.read(k))
        real = os.path.realpath(path)
        names = [] if os.path.isfile(real) else files_under(real, self.folders)
        stored = _record_path(self.root, self.kind, real, key)
        recorded, record = _recorded(stored)
        if only_kept and recorded is None:
            return _MISS
        try:
            if self.by_content:
                now = fingerprint(real, _unread if only_kept else _digest(real, names), recorded, names)
            else:
                now = _by_stat(real, names, recorded)
        except _Unread:  # the stat changed: its content's digest is the threads' to take
            return _MISS
        except OSError:
            if only_kept:
                return _MISS
            self.reread.append(k)
            return self._parsed(self.read(k))
        if recorded is not None and record is not None and not recorded.differences(now):
            try:
                value = self.parse(record)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                if only_kept:
                    return _MISS
                logger.info(f"mixture index: {stored} holds a record of another shape ({exc!r}); read again")
            else:
                if now is not recorded:  # same content under a new stat (a touch, cp -p): keep the new stat
                    self._write(stored, now, record)
                return value
        if only_kept:
            return _MISS
        record = json.loads(json.dumps(self.read(k)))  # as a kept one comes back (tuples as lists)
        self._write(stored, now, record)
        self.reread.append(k)
        return self.parse(record)

    def _parsed(self, record: dict):
        """A record just read, given as a kept one would be: through JSON, then :attr:`parse`."""
        return self.parse(json.loads(json.dumps(record)))

    def _write(self, stored: str, now: Fingerprint, record: dict) -> None:
        try:
            os.makedirs(os.path.dirname(stored), exist_ok=True)
            doc = {"fingerprint": now.as_dict(), "record": record, "record_digest": record_digest(record)}
            atomic_write_json(stored, doc)
        except OSError as exc:  # the next run reads the component again; never an error of this one
            logger.info(f"mixture index: could not write {stored} ({exc.strerror}); read again next run")

    def records(self, paths: Sequence[str], keys: Sequence[str | None] | None = None) -> list:
        """Every component's record, in order: from the index where its files are unchanged, else read, in
        parallel.

        Args:
            paths: Each component's directory (or file).
            keys: Which of a component's records each is (a robomimic file's filter key), kept apart; ``None``:
                one record per component.

        Returns:
            The records (as ``parse`` gives them); :attr:`reread` lists the components read from their files.

        Raises:
            Whatever ``read`` raises for a component (its own one-line error), after the reads in flight end.
        """
        self.reread = []
        given = keys or [None] * len(paths)
        # the records whose files' stat is unchanged first, one after another: a stat and a small JSON file each,
        # Python holding the GIL, which threads only slow down (400 components: 0.35 s here against 0.57-0.75 s
        # in 8 threads); the others (a first start, an edited component) read in threads, whose I/O overlaps
        out = [self._one(k, path, key, only_kept=True) for k, (path, key) in enumerate(zip(paths, given))]
        missing = [k for k, value in enumerate(out) if value is _MISS]
        if missing:
            tqdm_lock_made()
            with ThreadPoolExecutor(min(self.threads, len(missing)), thread_name_prefix="robo-loaders-index") as ex:
                for k, value in zip(missing, ex.map(lambda k: self._one(k, paths[k], given[k]), missing)):
                    out[k] = value
        self.reread.sort()
        said = (self.kind, self.root, tuple(paths), tuple(keys or ()))
        if paths and self.root is not None and (self.reread or said not in _SAID):  # a read is always said
            _SAID.add(said)
            logger.info(
                f"mixture index: {len(paths) - len(self.reread)} of {len(paths)} components' metadata reused, "
                f"{len(self.reread)} read ({os.path.join(self.root, INDEX_DIR, self.kind)})"
            )
        return out
