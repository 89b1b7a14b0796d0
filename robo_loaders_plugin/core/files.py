"""Files written so that no reader ever sees half of one, and file locks tried without waiting.

Why atomic writes: index, manifest, sidecar and result files are read by other processes while they are rewritten
(a second training run opening the same cache, a resumed conversion), and a process can be killed mid-write. A
temporary file in the same directory (so the rename never crosses filesystems), flushed to disk, then renamed over
the old name is atomic on POSIX filesystems: a reader opens the old file or the new one, and a crash leaves the old
one (and at worst a ``<name>.tmp-<pid>-<random>`` leftover, which the cache and shard sweeps recognise by
``.tmp-``). The random part keeps two threads of one process writing the same file apart.

Why one non-blocking flock: whether a lock is free is how the caches, the RAM stores and the conversion leases tell
a live holder from a dead one (the kernel drops a dead process's locks), so "held by someone else" must be told apart
from a real error the same way everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import uuid
from collections.abc import Iterable

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


def try_flock(fd: int, mode: int = fcntl.LOCK_EX) -> bool:
    """Take an ``flock`` on the open file ``fd`` without waiting.

    Args:
        fd: an open file descriptor (another descriptor of the same file, even in this process, is another holder).
        mode: ``fcntl.LOCK_EX`` or ``fcntl.LOCK_SH``.

    Returns:
        True when the lock is now held through ``fd``; False when another open file holds a conflicting one.

    Raises:
        OSError: any other failure (a bad descriptor, a filesystem without locks).
    """
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise


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


def stat_files(path: str, names: Iterable[str] | None = None) -> tuple:
    """The stat of ``path`` itself (a file: name ``""``) or of every file under it.

    Args:
        path: A file or directory (symbolic links resolved).
        names: For a directory, the relative names to stat (default: every file under it).

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
        names = [os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files]
    out = []
    for n in sorted(names):
        st = os.stat(os.path.join(path, n))
        out.append((n, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
    return tuple(out)
