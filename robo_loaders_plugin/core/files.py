"""Files written so that no reader ever sees half of one, and file locks tried without waiting.

Why atomic writes: index, manifest, sidecar and result files are read by other processes while they are rewritten
(a second training run opening the same cache, a resumed conversion), and a process can be killed mid-write. A
temporary file in the same directory (so the rename never crosses filesystems), flushed to disk, then renamed over
the old name is atomic on POSIX filesystems: a reader opens the old file or the new one, and a crash leaves the old
one (and at worst a ``<name>.tmp-<pid>-<random>`` leftover, which the cache and shard sweeps recognise by
``.tmp-``). The random part keeps two threads of one process writing the same file apart.

Why every file lock is taken here, one way: whether a lock is free is how the caches, the RAM stores and the
conversion leases tell a live holder from a dead one (the kernel drops a dead process's locks), so "held by someone
else" must be told apart from a real error the same way everywhere, and every lock of a file must exclude the
others. They are all ``flock`` locks on the whole file: exclusive ones through ``filelock`` (its Unix
``FileLock`` and ``lock_descriptor`` are ``flock(LOCK_EX)``), shared ones with ``fcntl.flock(LOCK_SH)``, because
``filelock`` has no shared ``flock`` (its ``ReadWriteLock`` is SQLite's, another lock that an ``flock`` on the
same file does not see: a store or cache entry in use would look free to the sweep that deletes it). No other
module imports ``fcntl`` or ``filelock`` (``tests/test_files.py``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import uuid
from collections.abc import Iterable

import filelock

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)  # EACCES: what some systems return for a conflicting lock


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, fsynced, renamed over ``path``.

    Args:
        path: the file to create or replace.
        data: its whole content.

    Raises:
        OSError: the directory cannot be written (full disk, permissions); the temporary file is removed and
            ``path`` is left as it was.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, doc, **dump_options) -> None:
    """Write ``doc`` as JSON (UTF-8) to ``path`` atomically (:func:`atomic_write_bytes`).

    Args:
        path: the file to create or replace.
        doc: any JSON-serialisable value.
        **dump_options: passed to :func:`json.dumps` (``indent``, ``sort_keys``, ``ensure_ascii``, ...), so each
            file keeps its own layout.

    Raises:
        OSError: as :func:`atomic_write_bytes`.
        TypeError, ValueError: ``doc`` is not JSON-serialisable (nothing is written).
    """
    atomic_write_bytes(path, json.dumps(doc, **dump_options).encode("utf-8"))


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Take a lock on the open file ``fd`` without waiting.

    Args:
        fd: an open file descriptor (another descriptor of the same file, even in this process, is another holder).
        shared: a shared lock (several holders at once, none exclusive), else an exclusive one.

    Returns:
        True when the lock is now held through ``fd``; False when another open file holds a conflicting one.

    Raises:
        OSError: any other failure (a bad descriptor, a filesystem without locks).
    """
    if not shared:
        return filelock.lock_descriptor(fd, blocking=False)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise


def open_lock_file(path: str) -> int:
    """Open (create if missing) a lock file, read-write where this user may, else read-only.

    Why: a ``cache_dir`` shared by a group (setgid, group-writable) held lock files created with mode 0644 by the
    first user, so the second one's read-write open was a ``PermissionError`` traceback (a reviewer's reproduction).
    New files are created 0666 less the umask, as the directories around them are, and an ``flock`` needs no write
    access, so another user's file that stays read-only to this one is locked through a read-only descriptor (its
    holder record is then not written: ``os.pwrite`` on it raises ``OSError``).

    Args:
        path: The lock file.

    Returns:
        Its descriptor.

    Raises:
        OSError: it cannot be opened either way (its directory cannot be written to create it, or it is not
            readable).
    """
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def lock_shared(fd: int) -> None:
    """Take a shared lock on the open file ``fd``, waiting while another holds an exclusive one.

    Args:
        fd: an open file descriptor.

    Raises:
        OSError: the lock cannot be taken (a bad descriptor, a filesystem without locks).
    """
    fcntl.flock(fd, fcntl.LOCK_SH)


def unlock(fd: int) -> None:
    """Release the lock held through ``fd`` (the descriptor stays open).

    Args:
        fd: the descriptor holding the lock.

    Raises:
        OSError: a bad descriptor.
    """
    filelock.unlock_descriptor(fd)


def path_lock(path: str) -> filelock.FileLock:
    """An exclusive lock on the file ``path`` (created if missing, kept on release), taken by ``with``, waiting
    for other holders (other processes, and other threads of this one: each lock object is its own holder).

    Args:
        path: the lock file.

    Returns:
        A ``filelock.FileLock``: ``with path_lock(p): ...``.
    """
    return filelock.FileLock(path)


def sha256_file(path: str) -> str:
    """The SHA-256 of a file's bytes, read in blocks (hex).

    Args:
        path: The file.

    Returns:
        The hex digest.
    """
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def files_under(path: str) -> list[str]:
    """Every file under a directory, as names relative to it, directories reached through symbolic links included
    (each real directory once: a link back up the tree is not followed twice).

    Why links are followed: a dataset whose ``videos/`` or ``data/`` is a link to another disk was fingerprinted
    without the files under it, so editing them left its caches and shards in use, serving the old frames (a
    reviewer's reproduction).

    A real directory is known by its device and inode (one ``stat``), not by ``os.path.realpath`` (an ``lstat`` per
    component of its path, in Python): the walk runs for every component of a mixture, several times per start, and
    took ~0.6 ms a small LeRobot dataset against ~0.3 ms (the pretraining benchmark's 400 components, the same names
    in the same order).

    Args:
        path: The directory.

    Returns:
        The relative names, in walk order.
    """
    seen: set = set()
    out: list[str] = []
    for d, dirs, files in os.walk(path, followlinks=True):
        try:
            st = os.stat(d)
            real: object = (st.st_dev, st.st_ino)
        except OSError:  # listed by the walk, gone since: known by its path
            real = os.path.realpath(d)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        where = os.path.relpath(d, path)
        out.extend(files if where == os.curdir else (os.path.join(where, f) for f in files))
    return out


def stat_files(path: str, names: Iterable[str] | None = None) -> tuple:
    """The stat of ``path`` itself (a file: name ``""``) or of every file under it.

    Args:
        path: A file or directory (symbolic links resolved).
        names: For a directory, the relative names to stat (default: every file under it, :func:`files_under`).

    Returns:
        ``((name, size, mtime_ns, inode, ctime_ns), ...)``, sorted by name.

    Raises:
        OSError: a file cannot be stat-ed (e.g. one of ``names`` does not exist).
    """
    path = os.path.realpath(path)
    if os.path.isfile(path):
        st = os.stat(path)
        return (("", st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns),)
    if names is None:
        names = files_under(path)
    out = []
    for n in sorted(names):
        st = os.stat(os.path.join(path, n))
        out.append((n, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
    return tuple(out)
