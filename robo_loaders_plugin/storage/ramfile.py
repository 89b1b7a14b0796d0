"""RAM caches (a backend without ``cache_dir``): one per host and content, shared by every process that uses it,
gone with the last of them.

Why shared: ``lerobot-train`` under accelerate or torchrun starts one process per GPU, each building the same
dataset; one copy per rank would multiply the RAM by the number of GPUs, and build it that many times. A file in
``/dev/shm`` mapped read-only is shared by every process that maps it, so the ranks of a host (and any other run
of the same user on the same source and options) build it once and map the same pages.

- **Where**: ``<shm>/robo-loaders-<uid>/`` (``/dev/shm`` when writable, else the temp dir; a directory of our own,
  mode 0700: the sticky, world-writable ``/dev/shm`` cannot be used to hand us someone else's file), entries named
  like the cache directory's (``storage.cache``): ``<kind>-<source key>-<content key>``, each a directory
  (``storage.cached_dir``). The content key is the source's fingerprint (``storage.fingerprint``), so an edited
  source gets a new entry and never the old data.
- **How much**: a backend's ``max_memory`` bounds what its entry may take (:class:`MemoryBudgetExceeded`).
- **Built once**: ``storage.cache.obtain``'s build lock; the other processes wait for it (``ROBO_LOADERS_LOCK_TIMEOUT``
  seconds, default 2 h, then a clear error) and then check the finished entry before they map it. A builder that
  dies, even by SIGKILL, drops its lock: the next waiter removes its temporary directory and builds.
- **Lifetime**: each user holds the entry's ``use`` lock (shared) through a :class:`RamHold`; forked DataLoader
  workers inherit it. When a hold ends (its dataset is collected, the process exits, or gets SIGTERM, after which it
  still dies of SIGTERM) it removes the entry if no other process uses or builds it (exclusive locks taken without
  waiting). A process killed by SIGKILL cannot; the next process opening a RAM cache on the host removes every
  entry that nobody holds (:func:`sweep_stale`). Locks, not pids, decide: a pid cannot tell whether a process in
  another PID namespace sharing ``/dev/shm`` lives, a lock on the file is seen across namespaces.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import stat
import threading
import weakref

from robo_loaders_plugin.core.paths import ENV_RAM_DIR, default_shm_dir
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.integrity import StoreError


class MemoryBudgetExceeded(StoreError):
    """A store needs more than the backend's ``max_memory``: raised while it is built, or when a reused one built by
    a run with a larger budget is larger than this run's."""


# builds in progress in this process: entry path -> pid (forked children inherit the dict and must not touch them)
_building: dict[str, int] = {}
# finalizers of this process's live holds (SIGTERM runs them; at exit weakref.finalize does)
_holds: set = set()
_cleanup_pid: int | None = None  # the process whose SIGTERM handler is installed
_previous_handler = None


def ram_root_path(shm_dir: str | None = None) -> str:
    """Where :func:`ram_root` keeps this user's RAM caches, without creating or checking it.

    Args:
        shm_dir: Where RAM caches live (default: ``/dev/shm`` when writable, else the temp dir).

    Returns:
        ``<shm_dir>/robo-loaders-<uid>``.
    """
    return os.path.join(shm_dir or default_shm_dir(), f"robo-loaders-{os.getuid()}")


def ram_root(shm_dir: str | None = None) -> str:
    """This user's directory of RAM caches (created), refused when it is not a private directory of ours.

    Args:
        shm_dir: Where RAM caches live (default: ``/dev/shm`` when writable, else the temp dir).

    Returns:
        ``<shm_dir>/robo-loaders-<uid>``, with its ``.locks/``.

    Raises:
        StoreError: the path is not a directory owned by this user with mode 0700.
        CacheError: it cannot be created.
    """
    root = ram_root_path(shm_dir)
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:  # a $ROBO_LOADERS_RAM_DIR that does not exist, or is not writable: a traceback before
        where = f"${ENV_RAM_DIR}={os.environ[ENV_RAM_DIR]!r}" if os.environ.get(ENV_RAM_DIR) else repr(shm_dir)
        raise cache.CacheError(
            f"the RAM cache directory {root} cannot be created ({exc.strerror}); point {where} at an existing "
            "writable tmpfs directory, or set the backend option cache_dir to keep the cache on disk"
        ) from None
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise StoreError(
            f"{root} must be a directory owned by you (uid {os.getuid()}) with mode 0700, to hold the "
            "RAM caches of your runs; it is not (made by another user?). Remove it, or set the backend "
            "option cache_dir to keep the cache on disk instead"
        )
    return cache.cache_root(root, "the RAM cache directory")


def remove_if_unused(entry: cache.Entry) -> bool:
    """Delete a RAM entry unless a process uses or builds it (never waits).

    Args:
        entry: The entry.

    Returns:
        Whether it was removed.
    """
    return entry.remove()


def sweep_stale(root: str) -> list[str]:
    """Remove the RAM entries nobody holds and the temporary files of builds nobody runs (their processes died).
    Never blocks.

    Args:
        root: This user's RAM cache directory (:func:`ram_root`).

    Returns:
        The paths removed.
    """
    removed = [e.path for e in cache.entries(root) if remove_if_unused(e)]
    return removed + cache.sweep_temporary(root)


@contextlib.contextmanager
def building(path: str):
    """Mark a build of ``path`` in progress in this process: SIGTERM (or exit) removes its temporary files.

    Args:
        path: The entry being built; its temporaries (files or directories) are ``<path>.tmp-<pid>-*``.

    Yields:
        Nothing; the mark is dropped when the block ends.
    """
    _building[path] = os.getpid()
    _install_sigterm_cleanup()
    try:
        yield
    finally:
        _building.pop(path, None)


class RamHold:
    """One process's use of a RAM entry: holds its ``use`` lock, and removes the entry if it was the last user when
    the dataset is collected, the process exits or gets SIGTERM.

    Forked DataLoader workers inherit this object and never remove anything; spawned workers get a handle that
    neither locks nor removes (their parent holds the lock for the run).

    Args:
        entry: The RAM entry.
        held: The ``use`` lock's holder (``Entry.hold()``), released with this object.
    """

    def __init__(self, entry: cache.Entry, held):
        self.path = entry.path
        self._finalizer = weakref.finalize(self, _release, entry, held, os.getpid())
        _holds.add(self._finalizer)
        _install_sigterm_cleanup()

    def release(self) -> None:
        """End the hold now: release the ``use`` lock and remove the entry if no other process uses it. Idempotent;
        for the process that made the hold (an unpickled copy has nothing to release).
        """
        if self._finalizer is not None:
            self._finalizer()

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._finalizer = state["path"], None


def _release(entry: cache.Entry, held, pid: int) -> None:
    held.release()  # in a forked child this closes only its copy: the parent's lock stays
    if os.getpid() == pid:
        remove_if_unused(entry)


def _remove_owned_files() -> None:
    """End this process's holds (removing entries nobody else uses) and remove its unfinished builds' files."""
    pid = os.getpid()
    for fin in list(_holds):
        if fin.alive:
            fin()
    _holds.clear()
    for path, owner in list(_building.items()):
        if owner == pid:
            for p in glob.glob(glob.escape(path) + f".tmp-{pid}-*"):
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(p)
            _building.pop(path, None)


atexit.register(_remove_owned_files)  # also covers builds still running in other threads at exit


def _install_sigterm_cleanup() -> None:
    """Install :func:`_on_sigterm`, once per process. Only the main thread may (``signal.signal``): a call from
    another thread leaves it to a later one. A SIGTERM that is ignored, or handled outside Python, is left alone."""
    global _cleanup_pid, _previous_handler
    if _cleanup_pid == os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    _cleanup_pid = os.getpid()
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm or not (current is signal.SIG_DFL or callable(current)):
        return
    _previous_handler = current
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame):
    """End this process's holds and builds, then die of SIGTERM as if no handler were installed.

    A Python handler that was installed before ours decides alone: many stop training gracefully or requeue the job
    and let the process end normally (atexit then cleans up), and while it runs on its files must stay.
    When a handler installed after ours calls ours (chaining to what it replaced), ours does nothing either: without
    us it would have found SIG_DFL, which it cannot call, and would have decided alone."""
    if _previous_handler is not signal.SIG_DFL:
        return _previous_handler(signum, frame)
    if signal.getsignal(signum) is not _on_sigterm:
        return None
    _remove_owned_files()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return None
