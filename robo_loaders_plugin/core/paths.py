"""What is wrong with a path an option names, found when the options are resolved (on LeRobot, at argument parsing),
before any data is read.

Why here and not where the path is used: an unwritable ``cache_dir`` or a ``shards`` directory that does not exist
used to surface after the dataset had loaded, as a traceback (``CacheError`` at the end of ~25 lines), and a
missing ``shards`` directory was blamed on "an interrupted conversion". Each check returns one sentence (or
``None``) that the option's declaration turns into the one line naming the option. Cheap and light: they run at
argument parsing, so they import nothing beyond the standard library.
"""

from __future__ import annotations

import errno
import os
import tempfile

# robo-shards' documents (storage.shards.format, storage.shards.manifest): named here so that checking a directory
# at argument parsing does not import the shard reader (numpy, Blosc2)
SHARDS_INDEX, SHARDS_MANIFEST = "index.json", "manifest.json"


def writable_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be a directory this process writes in (``None``: it can). A missing directory is created,
    as its first writer would; then a probe file is written in it and removed.

    Why a probe and not ``os.access``: as root ``os.access`` says yes to directories nobody can write in (``/proc``),
    and a read-only mount or a full disk only shows when something is written.

    Args:
        path: The directory (``~`` expanded).

    Returns:
        ``None``, or one sentence: the path is a file, cannot be created, or cannot be written in (with the reason).
    """
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{path!r} is a file, not a directory"
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return f"cannot create {path!r} ({_reason(exc)})"
    try:
        fd, probe = tempfile.mkstemp(prefix=".robo-loaders-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write in {path!r} ({_reason(exc)})"
    return None


def writable_parent_problem(path: str) -> str | None:
    """Why the file ``path`` cannot be written where it is named (``None``: its directory takes files): its
    directory as :func:`writable_dir_problem` checks it, before a command draws, converts or measures anything.

    Args:
        path: A file to be written (``~`` expanded).

    Returns:
        ``None``, or one sentence about its directory.
    """
    return writable_dir_problem(os.path.dirname(os.path.abspath(os.path.expanduser(path))))


def shards_dir_problem(path: str) -> str | None:
    """Why ``path`` is not a robo-shards directory a backend can read (``None``: it has its ``index.json``; the
    reader checks the rest when it opens it).

    A directory holding a conversion's ``manifest.json`` but no ``index.json`` is a conversion that has not finished
    (it was stopped, or another process is running it): the same ``convert`` command resumes it. Any other directory
    without ``index.json`` was not written by ``convert`` at all, and is not called an interrupted conversion.

    Args:
        path: The directory (``~`` expanded).

    Returns:
        ``None``, or one sentence saying what the path is and what to do.
    """
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        return f"{path!r} does not exist"
    if not os.path.isdir(path):
        return f"{path!r} is a file, not a robo-shards directory"
    if os.path.exists(os.path.join(path, SHARDS_INDEX)):
        return None
    return f"{path!r} {missing_index_reason(path)}"


def missing_index_reason(path: str) -> str:
    """What a directory without robo-shards' ``index.json`` is, in words that follow its path: a conversion that
    has not finished (its ``manifest.json`` is there), with what to do, or not a robo-shards directory at all.

    Args:
        path: The directory.

    Returns:
        The phrase.
    """
    if os.path.exists(os.path.join(path, SHARDS_MANIFEST)):
        return (
            f"holds a conversion that has not finished ({SHARDS_MANIFEST} but no {SHARDS_INDEX}: it was stopped, "
            "or is still running); run the same 'robo-loaders convert' command again to finish it"
        )
    return f"has no {SHARDS_INDEX}: it is not a robo-shards directory"


def existing_dir_problem(path: str) -> str | None:
    """Why ``path`` is not an existing directory (``None``: it is one).

    Args:
        path: The directory (``~`` expanded).

    Returns:
        ``None``, or one sentence.
    """
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        return f"{path!r} does not exist"
    if not os.path.isdir(path):
        return f"{path!r} is a file, not a directory"
    return None


def _reason(exc: OSError) -> str:
    """The error in words, with the clearer name for the cases a user meets (a parent that is a file)."""
    if exc.errno == errno.ENOTDIR:
        return "a parent of it is a file"
    return exc.strerror or str(exc)


ENV_RAM_DIR = "ROBO_LOADERS_RAM_DIR"


def default_shm_dir() -> str:
    """RAM-backed directory for caches that do not persist: ``$ROBO_LOADERS_RAM_DIR`` (another tmpfs, say), else
    ``/dev/shm``, else the temp dir."""
    if os.environ.get(ENV_RAM_DIR):
        return os.path.expanduser(os.environ[ENV_RAM_DIR])
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()
