"""Where a non-persistent store lives and who deletes it.

A RAM-only store (``/dev/shm/robo-loaders-<pid>-<fingerprint>-<random>.rlc``) belongs to the process that built
it. Its ownership is a shared ``flock`` held on the file for its whole life: by the builder from the creation of the
temporary file (``StoreWriter``), then by the owner's :class:`RamFile` and by every process mapping it
(``EpisodeStore``; forked workers inherit both). A process that ends in any way, even SIGKILL, drops its locks, so
:func:`sweep_stale` removes exactly the files nobody holds. The pid in the name is only for humans: ``/proc/<pid>``
cannot tell whether a process lives (one in another PID namespace sharing ``/dev/shm``, as with Docker
``--ipc=host`` or pods, or behind a ``hidepid`` ``/proc``, looks dead; a recycled pid looks alive), a lock on the
file itself is seen across namespaces.

The owner deletes its files when its :class:`RamFile` is collected, at exit, and on SIGTERM (how schedulers and
``kill`` stop jobs), after which the process still dies of SIGTERM.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import os
import signal
import threading
import uuid
import weakref

from robo_loaders_plugin.storage.store import default_shm_dir, drop_publish_lock, names_file, open_locked, try_flock

_PATTERN = "robo-loaders-*.rlc*"  # stores and their temporary files (<store>.tmp-<pid>-...)

# RAM stores of this process, built or being built: path -> pid of the owner (forked children inherit the dict,
# and must not delete what their parent owns)
_owned: dict[str, int] = {}
_cleanup_pid: int | None = None  # the process whose SIGTERM handler is installed
_previous_handler = None


def sweep_stale(shm_dir: str) -> list[str]:
    """Remove RAM stores and temporary files that no process holds (their owner died without cleaning up);
    returns their paths. Never blocks: a file whose lock cannot be taken at once is in use (or being removed by
    another sweep)."""
    removed = []
    for p in glob.glob(os.path.join(glob.escape(shm_dir), _PATTERN)):
        try:  # O_NONBLOCK: even a FIFO someone named like a store cannot make this wait
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # gone already, or not ours to read
        try:
            if try_flock(fd, fcntl.LOCK_EX) and names_file(fd, p):
                os.unlink(p)
                removed.append(p)
        except OSError:
            pass  # e.g. another user's file in the sticky /dev/shm
        finally:
            os.close(fd)
    return removed


def new_ram_path(fingerprint: str, shm_dir: str | None = None) -> str:
    """A fresh path for a RAM-only store, owned by this process from now on (its temporary files too)."""
    shm = shm_dir or default_shm_dir()
    sweep_stale(shm)
    path = os.path.join(shm, f"robo-loaders-{os.getpid()}-{fingerprint}-{uuid.uuid4().hex[:8]}.rlc")
    _own(path)
    return path


class RamFile:
    """Owns a non-persistent store file: holds its lock and deletes it when the dataset is collected, the owner
    exits or gets SIGTERM. Forked DataLoader workers inherit this object; only the owning process deletes the
    file. Spawned workers get a handle that neither locks nor deletes (their ``EpisodeStore`` locks the file)."""

    def __init__(self, path):
        self.path = path
        fd = open_locked(path)
        drop_publish_lock(path)
        self._pid = os.getpid()
        _own(path)
        self._finalizer = weakref.finalize(self, _release, path, fd, self._pid)

    def __getstate__(self):  # spawn workers get a harmless handle that never deletes
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._pid, self._finalizer = state["path"], None, None


def _release(path, fd, pid):
    if os.getpid() == pid:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still locked: a sweep never sees it free
        _owned.pop(path, None)
    with contextlib.suppress(OSError):
        os.close(fd)  # a forked child closes only its copy; the lock stays with the parent's


def _own(path: str) -> None:
    _owned[path] = os.getpid()
    _install_sigterm_cleanup()


def _remove_owned_files() -> None:
    """Delete this process's RAM stores and the temporary files of its unfinished builds."""
    pid = os.getpid()
    for path, owner in list(_owned.items()):
        if owner == pid:
            for p in [path, *glob.glob(glob.escape(path) + f".tmp-{pid}-*")]:
                with contextlib.suppress(OSError):
                    os.unlink(p)
            _owned.pop(path, None)


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
    """Remove this process's RAM stores, then die of SIGTERM as if no handler were installed.

    A Python handler that was installed before ours decides alone: many stop training gracefully or requeue the job
    and let the process end normally (atexit then removes the files), and while it runs on its files must stay.
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
