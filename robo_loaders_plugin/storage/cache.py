"""Where persisted data (compressed caches, converted shards) lives, how it is shared, and how much is kept.

- **Root**: the backend's ``cache_dir`` option, else ``$ROBO_LOADERS_CACHE``, else ``$XDG_CACHE_HOME/robo-loaders``,
  else ``~/.cache/robo-loaders``.
- **Entries** are files or directories named ``<kind>-<source key>-<content key>[.rlc]``: the source key hashes
  the source's path and every option the content depends on, the content key the source's content identity
  (``storage.fingerprint``). A changed source therefore gets a new entry; the entries it replaces (same source key)
  are removed as soon as no process uses them, so a source edited ten times does not leave ten copies behind.
- **Locks** (``<root>/.locks/``): a builder holds ``<entry>.build`` exclusively, so two runs started together
  build once (the second waits, then reuses); a dataset holds ``<entry>.use`` shared for its lifetime, so pruning
  never removes data a run (or its DataLoader workers) still reads. Waiting has a timeout
  (``$ROBO_LOADERS_LOCK_TIMEOUT`` seconds, default 7200) and says which lock it waits for.
- **Size limit**: ``$ROBO_LOADERS_CACHE_SIZE`` (default 50GB; 0 = no limit, as ``cache prune --max-size 0``:
  :func:`parse_size_limit`). After an entry is built, the least recently used entries not in use are removed until
  the root fits. ``robo-loaders cache list|prune|clear``.
- **Only entries are pruned**: names made by :func:`obtain` (and the mirrored tables of remote datasets); anything
  else in the root, above all another cache root nested in it (a run's ``cache_dir`` under the default root, whose
  entries that run holds), is neither counted nor removed (:func:`is_entry`).
- **Leftovers**: temporary files of builds that were killed (``*.tmp-*`` whose build lock is free) are removed,
  with their lock files, before a new build; a build that fails removes its own lock file (``Entry.building``).
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import socket
import time
import weakref

from robo_loaders_plugin.core.errors import RoboLoadersError, StaleSourceError
from robo_loaders_plugin.core.files import lock_shared, open_lock_file, try_lock, unlock
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes, parse_bytes

logger = get_logger(__name__)

ENV_ROOT = "ROBO_LOADERS_CACHE"
VERIFIED = ".verified"  # <root>/.verified/<entry>.json: an entry's files when its check passed (storage.cached_dir)
ENV_SIZE = "ROBO_LOADERS_CACHE_SIZE"
ENV_LOCK_TIMEOUT = "ROBO_LOADERS_LOCK_TIMEOUT"
DEFAULT_SIZE = "50GB"
DEFAULT_LOCK_TIMEOUT_S = 7200.0
LOCKS = ".locks"
RECORDS = ".validated"


class CacheError(RoboLoadersError):
    """The cache directory cannot be used: not a directory, not writable, a bad size limit or lock timeout, or a
    lock not obtained in time.
    """


def default_root() -> str:
    """The cache root when no ``cache_dir`` is given: ``$ROBO_LOADERS_CACHE``, else ``$XDG_CACHE_HOME/robo-loaders``,
    else ``~/.cache/robo-loaders`` (not created here: :func:`cache_root` creates it).
    """
    if os.environ.get(ENV_ROOT):
        return os.path.expanduser(os.environ[ENV_ROOT])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "robo-loaders")


def location(option: str | None = None) -> str:
    """The cache root's path, not created: the backend's ``cache_dir`` (``~`` expanded, made absolute), else
    :func:`default_root`. Everything a backend writes goes under it (entries, their locks, the records of checks).

    Args:
        option: The backend's ``cache_dir`` option (``None``: not given).

    Returns:
        The absolute path.
    """
    return os.path.abspath(os.path.expanduser(option)) if option else default_root()


def records_dir(option: str | None = None) -> str:
    """Where the records of checks made once per version of a file go (a robomimic file's validation, a backend's
    comparison of its LeRobot rows): ``<cache root>/.validated/`` (hidden: not an entry), under the backend's
    ``cache_dir`` like everything else it writes.

    Args:
        option: The backend's ``cache_dir`` option (``None``: :func:`default_root`).

    Returns:
        The directory's path (not created: its writer creates it).
    """
    return os.path.join(location(option), RECORDS)


def cache_root(cache_dir: str | None = None, where: str = "cache_dir") -> str:
    """The cache root a backend writes under, created (with its ``.locks/``) after a probe file was written in it
    (``core.paths.writable_dir_problem``): ``cache_dir``, else ``$ROBO_LOADERS_CACHE``, else
    ``$XDG_CACHE_HOME/robo-loaders`` or ``~/.cache/robo-loaders`` (:func:`default_root`).

    Args:
        cache_dir: The backend's ``cache_dir`` option (``~`` expanded), or ``None`` for :func:`default_root`.
        where: How the user set it, for the errors (``train.data_backend_kwargs.cache_dir``).

    Returns:
        Its absolute path.

    Raises:
        RoboLoadersError: (a ``CacheError``) the path is a file, or the directory cannot be created or written in.
    """
    from robo_loaders_plugin.core.paths import writable_dir_problem

    root = location(cache_dir)
    default = f"the cache directory {root!r} (${ENV_ROOT}, else ~/.cache/robo-loaders)"
    named = f"{where}={root!r}" if cache_dir else default
    if os.path.exists(root) and not os.path.isdir(root):
        raise CacheError(f"{named} is a file, not a directory; point it at a directory (it is created if missing)")
    probed = _PROBED.get()
    if probed is not None and root in probed and os.path.isdir(os.path.join(root, LOCKS)):
        return root  # written in moments ago, by this build (placements_planned_once)
    problem = writable_dir_problem(root)
    try:
        if problem is None:
            os.makedirs(os.path.join(root, LOCKS), exist_ok=True)
    except OSError as exc:
        problem = f"cannot create {os.path.join(root, LOCKS)!r} ({exc.strerror})"
    if problem:
        raise CacheError(f"{named}: {problem}; choose a directory you can write to, or set {ENV_ROOT}")
    if probed is not None:
        probed.add(root)
    return root


def check_root_outside(root: str, source, where: str | None) -> None:
    """Refuse a cache root inside a dataset's directory (a LeRobot root), before anything is written there.

    Why: the cache's own files (an entry's lock, its record, its store) are then files of the dataset, so every
    build saw its source "changed while built", removed what it built and asked to run again, at every run, leaving
    its locks in the dataset (a reviewer's reproduction); a conversion refuses an output inside its source the same
    way (``shards.format.check_output_dir``).

    Args:
        root: The cache root (:func:`location`; not created).
        source: The dataset's path (a file cannot hold a cache: not compared), or ``None``.
        where: The option that set the root (``None``: ``$ROBO_LOADERS_CACHE`` or the default).

    Raises:
        CacheError: the root is the dataset's directory or inside it.
    """
    if source is None or not os.path.isdir(source):
        return
    real, inside = os.path.realpath(source), os.path.realpath(root)
    if inside == real or inside.startswith(real + os.sep):
        named = f"{where}={root!r}" if where else f"the cache directory {root!r} (${ENV_ROOT})"
        raise CacheError(
            f"{named} is inside the dataset {source}: the cache's files would change the dataset's fingerprint, so "
            "nothing built there could be kept; choose a directory outside the dataset"
        )


def parse_size_limit(value, where: str) -> int | None:
    """A cache size limit as given by the user: one meaning wherever it is given (``$ROBO_LOADERS_CACHE_SIZE``,
    ``robo-loaders cache prune --max-size``), 0 being no limit (as ccache's ``max_size``). Why one rule: the two
    disagreed (the variable's 0 kept everything, ``--max-size 0`` removed every entry nothing used); emptying the
    cache is ``robo-loaders cache clear``.

    Args:
        value: A size (``50GB``, ``512MiB``, a number of bytes); 0: no limit.
        where: The setting that gave it, for the error.

    Returns:
        The limit in bytes, or ``None`` for no limit.

    Raises:
        CacheError: ``value`` is not a size.
    """
    try:
        n = parse_bytes(value, where)
    except ValueError as exc:
        raise CacheError(f"{exc} (0: no limit)") from None
    return n or None


def size_limit() -> int | None:
    """The cache's size limit in bytes, from ``$ROBO_LOADERS_CACHE_SIZE`` (default 50GB; :func:`parse_size_limit`).

    Returns:
        The limit, or ``None`` for no limit (the variable set to 0).

    Raises:
        CacheError: the variable is not a size.
    """
    return parse_size_limit(os.environ.get(ENV_SIZE, DEFAULT_SIZE), ENV_SIZE)


def short_hash(desc) -> str:
    """16 hex digits of the SHA-256 of ``desc``'s canonical JSON: the source and content keys of entry names.

    Args:
        desc: Any JSON-able value (keys sorted; values JSON cannot hold are written with ``str``).

    Returns:
        The hash.
    """
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def lock_timeout() -> float:
    """Seconds a process waits for another's lock (a build here, conversion leases in ``shards.manifest``)."""
    try:
        seconds = float(os.environ.get(ENV_LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT_S))
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:  # nan: no deadline ever passed, a wait never ended
        raise CacheError(
            f"{ENV_LOCK_TIMEOUT} must be a finite number of seconds >= 0, got {os.environ[ENV_LOCK_TIMEOUT]!r}"
        )
    return seconds


_HOLDER_BYTES = 200  # the build lock file's record of its holder, padded to this size


def _record_holder(fd: int) -> None:
    """Write who holds the build lock into its file (``pid <pid> on <host>``), for a waiting process's line.

    Why padded to a fixed size, truncating only a longer file: truncating a file that holds data makes ext4 flush it
    (its ``auto_da_alloc`` rule for files replaced by truncation), 1-4 ms a call, and every entry a run reuses takes
    its build lock once: 400 components spent ~1.4 s of a mixture's start-up there.
    """
    record = f"pid {os.getpid()} on {socket.gethostname()}".encode()[:_HOLDER_BYTES].ljust(_HOLDER_BYTES)
    try:
        os.pwrite(fd, record, 0)
        if os.fstat(fd).st_size > _HOLDER_BYTES:  # a lock file written otherwise (a longer record)
            os.ftruncate(fd, _HOLDER_BYTES)
    except OSError:  # another user's lock file, read-only to this one (core.files.open_lock_file): no record
        pass


class EntryHold:
    """A cache entry's shared ``use`` lock (an flock), held as long as this object lives: while any process holds
    one, pruning never removes the entry. Released by :meth:`release` or garbage collection.

    Args:
        fd: The locked lock file's descriptor (closed on release).
    """

    def __init__(self, fd: int):
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)
        _live_holds.add(self)

    def release(self) -> None:
        """Release the lock now (idempotent)."""
        self._finalizer()

    def _forget_in_child(self) -> None:
        """In a forked child: close the inherited copy of the descriptor, so the parent alone holds the lock."""
        if self._finalizer.detach() is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = -1

    def __getstate__(self):  # a spawned worker gets no lock: its parent holds it for the run
        return {}

    def __setstate__(self, state):
        self.fd, self._finalizer = -1, lambda: None


# every EntryHold of this process, so that a forked child can drop its copies (_forget_holds_in_child)
_live_holds: weakref.WeakSet = weakref.WeakSet()


def _forget_holds_in_child() -> None:
    """After a fork, in the child: close the inherited ``use`` lock descriptors, as a spawned worker holds none.

    Why: an flock belongs to the open file, which a forked child's copy of the descriptor keeps open; a persistent
    DataLoader worker (forked) outlived its parent's exit handlers, so the parent's last-user check found the RAM
    cache still locked and left it in ``/dev/shm`` (a whole dataset) after a normal exit (a reviewer's
    reproduction). The parent holds the lock for the run, as it does for spawned workers."""
    for hold in list(_live_holds):
        hold._forget_in_child()


os.register_at_fork(after_in_child=_forget_holds_in_child)


@dataclasses.dataclass
class Entry:
    """One entry of a cache root: a file or directory named ``<kind>-<source key>-<content key>[suffix]``, and its
    lock files in ``<root>/.locks/`` (``<name>.build``, ``<name>.use``).

    Attributes:
        root: The cache root.
        name: The entry's file or directory name.
    """

    root: str
    name: str

    @property
    def path(self) -> str:
        """The entry's file or directory."""
        return os.path.join(self.root, self.name)

    def _lock_path(self, what: str) -> str:
        return os.path.join(self.root, LOCKS, f"{self.name}.{what}")

    def _open_lock(self, what: str) -> int:
        path = self._lock_path(what)
        try:
            return open_lock_file(path)
        except OSError as exc:
            raise CacheError(
                f"cannot open the cache's lock file {path} ({exc.strerror or exc}); the cache directory "
                f"{self.root} must be writable by every user of it (a shared one: group-writable, setgid, umask 002)"
            ) from None

    def _locked_current(self, fd: int, what: str) -> bool:
        """Whether the lock file ``fd`` (locked by the caller) is still the one named ``<entry>.<what>``. :meth:`remove`
        unlinks the lock files it held: a process that opened one just before and locked it just after holds a lock
        on a file nobody else will ever open again, so it must open the new one and lock again."""
        try:
            st = os.stat(self._lock_path(what))
        except FileNotFoundError:
            return False
        fst = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)

    @contextlib.contextmanager
    def building(self, description: str):
        """Exclusive build lock: waits (with a timeout and a message) while another process builds this entry.

        The lock file records who holds it (pid and host), which a waiting process prints. A build that fails (raises)
        and leaves no entry removes its lock file while still holding the lock, so failed builds leave nothing in
        ``.locks/``. Safe with other processes: whoever waits on the removed file finds, once it gets the lock, that the
        file is no longer the one named ``<entry>.build`` (:meth:`_locked_current`) and locks the file that now has its
        name, as after :meth:`remove`.

        Args:
            description: What is built, for the "waiting for ..." line and the timeout error.

        Yields:
            The entry itself, with the build lock held.

        Raises:
            CacheError: another process held the lock longer than ``$ROBO_LOADERS_LOCK_TIMEOUT`` seconds.
        """
        fd = self._open_lock("build")
        try:
            deadline, builder = None, "another process"
            while not (try_lock(fd) and self._locked_current(fd, "build")):
                if not self._locked_current(fd, "build"):  # removed meanwhile: lock the file that now has its name
                    os.close(fd)
                    fd = self._open_lock("build")
                    continue
                if deadline is None:
                    builder = os.pread(fd, _HOLDER_BYTES, 0).decode(errors="replace").strip() or builder
                    logger.info(f"waiting for {builder} to finish building {self.path} ({description})")
                    deadline = time.monotonic() + lock_timeout()
                if time.monotonic() > deadline:
                    raise CacheError(
                        f"timed out after {lock_timeout():.0f} s waiting for {builder} to finish "
                        f"building {self.path} (lock {self._lock_path('build')}). If no such "
                        f"process runs, delete the lock file; raise {ENV_LOCK_TIMEOUT} to wait longer"
                    )
                time.sleep(0.2)
            _record_holder(fd)
            try:
                yield self
            except BaseException:
                if not os.path.exists(self.path) and self._locked_current(fd, "build"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._lock_path("build"))
                raise
        finally:
            os.close(fd)

    def hold(self) -> EntryHold:
        """Mark the entry in use (shared lock) for as long as the returned object lives, and as recently used."""
        while True:
            fd = self._open_lock("use")
            lock_shared(fd)
            if self._locked_current(fd, "use"):
                break
            os.close(fd)
        with contextlib.suppress(PermissionError):  # another user's lock file, read-only to this one
            os.utime(self._lock_path("use"))
        return EntryHold(fd)

    def in_use(self) -> bool:
        """Whether some process holds the entry's ``use`` lock (takes no lock of its own beyond a test)."""
        if not os.path.exists(self._lock_path("use")):
            return False
        fd = self._open_lock("use")
        try:
            if try_lock(fd):
                unlock(fd)
                return False
            return True
        finally:
            os.close(fd)

    def last_used(self) -> float:
        """When the entry was last used: the mtime of its ``use`` lock file (:meth:`hold`
        touches it), else of the entry, else 0.
        """
        for p in (self._lock_path("use"), self.path):
            if os.path.exists(p):
                return os.path.getmtime(p)
        return 0.0

    def nbytes(self) -> int:
        """The entry's size on disk (every file, for a directory)."""
        return path_bytes(self.path)

    def remove(self) -> bool:
        """Delete the entry unless a process uses or builds it; returns whether it was removed."""
        use = self._open_lock("use")
        build = self._open_lock("build")
        try:
            if not (try_lock(use) and try_lock(build)):
                return False
            if not (self._locked_current(use, "use") and self._locked_current(build, "build")):
                return False  # a lock file removed meanwhile: the one named now may be held (try again later)
            _forget_listing(self.root)
            if os.path.isdir(self.path):
                shutil.rmtree(self.path, ignore_errors=True)
            elif os.path.exists(self.path):
                os.unlink(self.path)
            # its verification stamp too (it could never match another entry's files, but it piled up beside the
            # entries: a reviewer's finding)
            for gone in (self._lock_path("use"), self._lock_path("build"), verified_stamp(self.path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(gone)
            return True
        finally:
            os.close(use)
            os.close(build)


def verified_stamp(path: str) -> str:
    """Where the record that an entry's files passed their check lies (``storage.cached_dir``).

    Args:
        path: The entry's path.

    Returns:
        ``<root>/.verified/<entry name>.json``.
    """
    return os.path.join(os.path.dirname(os.path.abspath(path)), VERIFIED, os.path.basename(path) + ".json")


def path_bytes(path: str) -> int:
    """Bytes of a file, or of every file under a directory (files that vanish while counted are skipped).

    Args:
        path: A file or directory.

    Returns:
        The total size; 0 when ``path`` does not exist.
    """
    if os.path.isdir(path):
        return sum(_size(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return _size(path)


def _size(path: str) -> int:
    """A file's bytes, 0 when it is gone (another process may remove a file between the listing and the stat: a
    check-then-stat raced with a writability probe removed meanwhile)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


# what this project names in a cache root: <kind>-<source key>-<content key>[suffix] (obtain), and the
# mirrored tables of a remote dataset, remote-tables-<key> (lerobot.integration)
# a temporary file or directory a build writes beside its entry (storage.cached_dir, core.files' atomic writes, a
# store file's writer): what sweep_temporary removes of a build that was killed
_TMP_NAME = re.compile(r"(?P<entry>.+)\.tmp-\d+(?:-\d+)?-[0-9a-f]{8}")
_ENTRY_NAME = re.compile(r"(?:.+-[0-9a-f]{16}-[0-9a-f]{16}|remote-tables-[0-9a-f]{16})(?:\.[A-Za-z0-9]+)?")


def is_entry(root: str, name: str) -> bool:
    """Whether ``name`` in ``root`` is an entry of that root, which pruning may count and remove.

    Why not everything in the root: a run's ``cache_dir`` may be a directory inside another cache root (the default
    one); pruning that root removed it as one unused entry, with the entries the run held inside it, and the run
    died. Only the names this project gives entries count, and never a directory that is itself a cache root (it
    has ``.locks/``: its own entries are held and pruned there).

    Args:
        root: A cache root.
        name: A name in it.

    Returns:
        True for an entry (temporary files of builds, hidden files and other directories are not).
    """
    if name.startswith(".") or ".tmp-" in name or not _ENTRY_NAME.fullmatch(name):
        return False
    return not os.path.isdir(os.path.join(root, name, LOCKS))


def entries(root: str, prefix: str | tuple[str, ...] = "", listing: str = "now") -> list[Entry]:
    """Every entry under ``root`` (:func:`is_entry`: temporary files, locks and what the project did not name as
    an entry, such as a cache root nested in it, left out), sorted by name; with ``prefix``, only those whose name
    starts with it.

    Why the prefix is applied to the names before :func:`is_entry`: that check costs a ``stat`` per name, and a
    mixture's components each look for their own entries (``obtain``, ``holds_current``) in one root holding every
    component's, so checking every name made a mixture's start-up grow with the square of its components. The
    directory itself is listed at every call (one ``listdir``, names only) unless ``listing`` says otherwise: a
    listing kept between calls would hide an entry another process wrote meanwhile, and a root's mtime is too coarse
    to say when to list it again. Inside a :func:`placements_planned_once` block (one mixture's build) a root's
    listing is kept for callers whose answer stays right when the listing is old (:func:`_listed`).

    Args:
        root: A cache root; one that does not exist holds no entries.
        prefix: Only names starting with it, or with one of a tuple of prefixes (``""``: every entry).
        listing: ``"now"``: listed now; ``"kept"``: the block's listing of ``root`` answers (listed now when the
            block has none); ``"kept-unless-missing"``: the same, listed again when it holds no name with
            ``prefix``.

    Returns:
        The entries.
    """
    if listing == "now":
        names = sorted(n for n in _list(root) if n.startswith(prefix))
    else:
        names = _listed(root, prefix, again_when_missing=listing == "kept-unless-missing")
    return [Entry(root, n) for n in names if is_entry(root, n)]


def _list(root: str) -> list[str]:
    try:
        return os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _starting_with(names: list[str], prefix: str | tuple[str, ...]) -> list[str]:
    """The names of a sorted list that start with ``prefix`` (or one of a tuple), sorted: found by bisection, not
    by testing every name (a mixture's root holds every component's entries)."""
    out: set[str] = set()
    for p in (prefix,) if isinstance(prefix, str) else prefix:
        i = bisect.bisect_left(names, p)
        while i < len(names) and names[i].startswith(p):
            out.add(names[i])
            i += 1
    return sorted(out)


def _listed(root: str, prefix: str | tuple[str, ...], again_when_missing: bool) -> list[str]:
    """``root``'s names starting with ``prefix``, sorted, from the :func:`placements_planned_once` block's listing;
    with ``again_when_missing``, listed again when it holds none (an entry written since, by this process or
    another, is then found); outside a block, listed now.

    Why kept: each component of a mixture looked for its entries (its newest recorded fingerprint, earlier formats to
    retire) in one root holding every component's, one ``listdir`` of the whole root each time: ~0.4 ms at 800
    entries on a quiet machine, up to five times per component, a start-up growing with the square of its
    components. Old names are safe for what asks this way: an entry gone since reads as unreadable and is passed
    over (``obtain``'s recorded fingerprint only speeds the fingerprint up; an earlier format's entry removed by
    another run is not removed twice), and a missing one makes the root listed again. This process forgets a root's
    listing when it builds or removes an entry in it (:func:`_forget_listing`).
    """
    kept = _LISTINGS.get()
    if kept is None:
        return sorted(n for n in _list(root) if n.startswith(prefix))
    names = kept.get(root)
    found = None if names is None else _starting_with(names, prefix)
    if found is None or (again_when_missing and not found):
        names = kept[root] = sorted(_list(root))
        found = _starting_with(names, prefix)
    return found


def _forget_listing(root: str) -> None:
    """This process changed ``root``'s entries: the block's listing of it is listed again at the next ask."""
    kept = _LISTINGS.get()
    if kept is not None:
        kept.pop(root, None)


# holds_current's "found" answers for placements, and the roots' listings (_listed), kept inside a
# placements_planned_once() block
_PLANNED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("placements_planned", default=None)
_LISTINGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("roots_listed", default=None)
# the cache roots cache_root probed (a file written and removed) inside the block: probed once per build
_PROBED: contextvars.ContextVar[set | None] = contextvars.ContextVar("roots_probed", default=None)


@contextlib.contextmanager
def placements_planned_once():
    """While active, :func:`holds_current` asked with ``for_placement=True`` gives the block's first "found" answer
    for each (root, kind, key, source) again instead of looking again.

    Why: a mixture plans every component's footprint from metadata, then builds each one moments later; both ask
    whether the component's store is on disk (a stat of the source's files, a listing of the root and a read of the
    entry's record, ~1 ms a component, twice). Only a placement's answer is kept (``sdk.serve``: it sizes the
    footprint, a store found needing no disk; finding or building the store, :func:`obtain`, checks the entry
    itself, and a store placed as found that turns out unusable is placed again as new, its disk checked, before
    it is built). Only "found" is kept: a store not found is looked for again, so one built meanwhile (a dataset
    listed twice) is found. The block spans one mixture's build, in its thread (a context variable). The cache
    roots' listings are kept in it too (:func:`_listed`), and :func:`cache_root` probes each root once in it (a
    probe file written and removed, ~0.7 ms: each component of a mixture asked for the same root several times; a
    disk that fills meanwhile still fails the write that meets it, which every store writes atomically).
    """
    token, listings, probed = _PLANNED.set({}), _LISTINGS.set({}), _PROBED.set(set())
    try:
        yield
    finally:
        _PROBED.reset(probed)
        _LISTINGS.reset(listings)
        _PLANNED.reset(token)


def holds_current(
    root: str,
    kind: str,
    key_desc: dict,
    source_path: str,
    recorded_of,
    suffix: str = "",
    for_placement: bool = False,
) -> bool:
    """Whether ``root`` holds an entry of this kind and key whose recorded source fingerprint has the source's
    current file stats: it will be reused, so nothing new is written. A stat-only check (no byte of the source is
    read), made before a footprint counts the disk a new entry would take.

    Args:
        root: A cache root.
        kind: The entry kind.
        key_desc: The cache key (as :func:`obtain` gets it).
        source_path: The source file or directory.
        recorded_of: ``recorded_of(entry path)`` returns the fingerprint the entry recorded, or ``None``.
        suffix: Only entries whose name ends so (``""``: any).
        for_placement: The answer only sizes a store's placement, which its build checks again
            (:func:`placements_planned_once` may answer it).

    Returns:
        True when such an entry exists.
    """
    prefix = f"{kind}-{short_hash(key_desc)}-"
    kept = _PLANNED.get() if for_placement else None
    asked = (root, prefix, os.path.realpath(source_path), recorded_of, suffix)
    if kept is not None and kept.get(asked):
        return True
    found = _holds(root, prefix, asked[2], recorded_of, suffix)
    if kept is not None and found:
        kept[asked] = True
    return found


def _holds(root: str, prefix: str, source_path: str, recorded_of, suffix: str) -> bool:
    """Whether an entry under ``root`` recorded the source's current file stats.

    Why the entries are listed before the source is stat-ed: a root holding no entry of this kind and key (a
    store kept on disk by the SDK is also looked for in the RAM root, at every plan and build) answered after
    walking the source's files, ~0.7 ms a component of a mixture, for nothing.
    """
    from robo_loaders_plugin.storage.fingerprint import stat_files

    files = None
    for listing in ("kept-unless-missing", "now"):  # the block's listing first; listed again when none matches
        candidates = [e for e in entries(root, prefix, listing) if e.name.endswith(suffix)]
        if not candidates:
            return False
        if files is None:
            try:
                files = stat_files(source_path)
            except OSError:
                return False
        for e in candidates:
            recorded = recorded_of(e.path)
            if recorded is not None and recorded.files == files:
                return True
        if _LISTINGS.get() is None:
            break  # listed now already
    return False


def siblings(entry: Entry) -> list[Entry]:
    """Entries of the same kind and source key as ``entry`` (older versions of the same source and options).

    Args:
        entry: The entry whose siblings are wanted.

    Returns:
        The other entries whose names differ from it only in the content key.
    """
    prefix = entry.name.rsplit("-", 1)[0] + "-"
    return [e for e in entries(entry.root, prefix) if e.name != entry.name]


def retire_siblings(entry: Entry) -> list[str]:
    """Remove the entries ``entry`` replaces (same source and options, older content) that nothing uses.

    Args:
        entry: The entry just built.

    Returns:
        The paths removed (siblings in use or being built are kept).
    """
    return [e.path for e in siblings(entry) if e.remove()]


def temporary_files(root: str) -> list[str]:
    """The temporary files and directories of builds under ``root`` (``<entry>.tmp-<pid>-*``): a build running now,
    or the leftovers of a killed one, which :func:`sweep_temporary` removes once nobody builds that entry.

    Args:
        root: The cache root.

    Returns:
        Their paths, sorted.
    """
    out = []
    for n in os.listdir(root) if os.path.isdir(root) else []:
        leftover = _TMP_NAME.fullmatch(n)
        if not n.startswith(".") and leftover is not None and _ENTRY_NAME.fullmatch(leftover["entry"]):
            out.append(os.path.join(root, n))
    return sorted(out)


def sweep_temporary(root: str, owned: str | None = None) -> list[str]:
    """Remove ``*.tmp-*`` leftovers of killed builds under ``root``.

    Removed: those whose entry's build lock is free (their builder is gone; their lock file goes too), and those of
    ``owned``, an entry whose build lock this process holds, so their writer is gone. Never waits for a lock.

    Args:
        root: The cache root.
        owned: The name of the entry this process is about to build, if any.

    Returns:
        The paths removed.
    """
    removed = []
    for p in temporary_files(root):
        # only what a build of this project writes (``<entry>.tmp-<pid>[-<thread>]-<8 hex>`` of a name it gives an
        # entry, temporary_files' filter): a user's ``notes.tmp-2024`` in a cache_dir holding other files was
        # removed as a leftover
        leftover = _TMP_NAME.fullmatch(os.path.basename(p))
        assert leftover is not None  # temporary_files matched it
        entry = Entry(root, leftover["entry"])
        fd = entry._open_lock("build")
        try:
            # a file that lost its name (a failed build removes its lock) locks nothing: the builder, if any, holds
            # the one named now
            if entry.name == owned or (try_lock(fd) and entry._locked_current(fd, "build")):
                if os.path.isdir(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):  # another process swept it first
                        os.unlink(p)
                removed.append(p)
                if entry.name != owned and not os.path.exists(entry.path):  # the killed build's lock file too
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry._lock_path("build"))
        finally:
            os.close(fd)
    return removed


def prune(root: str, limit: int | None, keep: tuple[str, ...] = (), where: str = ENV_SIZE) -> list[str]:
    """Remove least recently used entries that nothing uses until ``root`` holds at most ``limit`` bytes.

    Entries in use or being built are skipped; when they alone keep the root over its limit, a line says so. Only
    the root's entries are counted and removed (:func:`entries`): a cache root nested in it is left alone.

    Args:
        root: The cache root.
        limit: The size limit in bytes (0: remove every entry nothing uses, as ``cache clear``); ``None``: no limit
            (nothing is removed).
        keep: Names of entries never removed (the one just built).
        where: The setting the limit came from, for the line.

    Returns:
        The paths removed.
    """
    if limit is None:
        return []
    all_entries = sorted(entries(root), key=lambda e: e.last_used())
    sizes = {e.name: e.nbytes() for e in all_entries}
    total = sum(sizes.values())
    removed = []
    for e in all_entries:
        if total <= limit:
            break
        if e.name in keep:
            continue
        if e.remove():
            total -= sizes[e.name]
            removed.append(e.path)
    if total > limit and limit == 0:  # remove everything unused (cache clear): what stays is in use, no limit
        logger.warning(
            f"{where}: the cache {root} keeps {format_bytes(total)} in entries in use by running processes; they "
            "can be removed once nothing uses them"
        )
    elif total > limit:
        logger.warning(
            f"the cache {root} holds {format_bytes(total)}, over its limit of {format_bytes(limit)} "
            f"({where}), with entries in use; nothing more can be removed now"
        )
    return removed


def after_build(entry: Entry) -> None:
    """Housekeeping once ``entry`` is complete: retire what it replaces, then keep the root within its limit
    (:func:`size_limit`). Prints a line per removed entry.

    Args:
        entry: The entry just built.

    Raises:
        CacheError: ``$ROBO_LOADERS_CACHE_SIZE`` is not a size.
    """
    for p in retire_siblings(entry):
        logger.info(f"removed {p} (made from an earlier version of the same source)")
    for p in prune(entry.root, size_limit(), keep=(entry.name,)):
        logger.info(f"removed {p} (least recently used; cache limit {ENV_SIZE})")


def content_key(fingerprint) -> str:
    """Short hash of a source's identity (``Fingerprint.identity``: file names, sizes, mtimes, content digest).

    Args:
        fingerprint: The source's :class:`~robo_loaders_plugin.storage.fingerprint.Fingerprint`.

    Returns:
        16 hex digits (:func:`short_hash`).
    """
    return short_hash(fingerprint.identity())


def obtain(
    root: str,
    kind: str,
    key_desc: dict,
    fingerprint,
    recorded_of,
    usable,
    build,
    description: str,
    suffix: str = "",
    housekeeping: bool = True,
):
    """Find or build the entry of a source.

    The fingerprint is computed once, with the stat fast path of the newest readable entry of the same source and
    options; the entry it names is reused when it exists and is usable, else built under its build lock (after
    removing leftovers of killed builds).

    Args:
        root: The cache root.
        kind: Names the backend and format (the entry's name starts with it).
        key_desc: The source path and the options the content depends on (hashed into the source key).
        fingerprint: ``fingerprint(recorded)`` computes the source's fingerprint (``recorded``: the one an earlier
            entry of the same source recorded, for the stat fast path; ``None`` when there is none).
        recorded_of: ``recorded_of(path)`` reads the fingerprint an entry recorded (``None`` if unreadable).
        usable: ``usable(path)`` says whether an existing entry is complete and intact.
        build: ``build(path, fingerprint)`` (re)builds it, resuming whatever partial state it finds.
        description: What is built, for the lock's messages.
        suffix: Appended to the entry's name (``.rlc``).
        housekeeping: After a build, retire older versions and prune to the size limit (not for RAM entries,
            ``storage.ramfile``, which go when their last user does).

    Returns:
        ``(entry, hold, reused, fingerprint)``: the :class:`Entry`; an object holding its ``use`` lock, which keeps
        it from being pruned while it lives; whether it was reused rather than built; the source's fingerprint.

    Raises:
        CacheError: ``$ROBO_LOADERS_CACHE_SIZE`` is not a size or ``$ROBO_LOADERS_LOCK_TIMEOUT`` not a number of
            seconds (before anything is read), or another process's build did not finish within the lock timeout.
        StaleSourceError: the source changed while the entry was built from it (the entry is removed).
    """
    if housekeeping:
        # the limit read before anything is built or reused: a bad value was refused only after a whole build
        # (kept), and a later run reusing the entry never read it (a reviewer's reproduction)
        size_limit()
    # the lock timeout too, before the source is fingerprinted: read only once a wait began, a bad value let the
    # process that builds run and failed the others after their digest (a torchrun job's other ranks; a reviewer's
    # reproduction)
    lock_timeout()
    prefix = f"{kind}-{short_hash(key_desc)}-"
    recorded = None
    for e in sorted(entries(root, prefix, "kept-unless-missing"), key=lambda e: -e.last_used()):
        recorded = recorded_of(e.path)
        if recorded is not None:
            break
    fp = fingerprint(recorded)
    entry = Entry(root, prefix + content_key(fp) + suffix)
    with entry.building(description):
        reused = os.path.exists(entry.path) and usable(entry.path)
        if not reused:
            sweep_temporary(root, owned=entry.name)
            try:
                build(entry.path, fp)
            except StaleSourceError:
                # the build saw the source change (a conversion's own check): nothing of it is kept, or the next
                # run resumed it once the first version was back with its mtime (a reviewer's reproduction)
                _remove_entry_path(entry)
                raise
            _forget_listing(root)
            _source_kept_while_built(entry, fp, fingerprint(fp), description)
        hold = entry.hold()
    if not reused and housekeeping:
        after_build(entry)
    return entry, hold, reused, fp


def _remove_entry_path(entry: Entry) -> None:
    """Remove what a build left at the entry's path (a directory or a file), under its build lock."""
    if os.path.isdir(entry.path):
        shutil.rmtree(entry.path, ignore_errors=True)
    elif os.path.lexists(entry.path):
        os.unlink(entry.path)


def _source_kept_while_built(entry: Entry, before, after, description: str) -> None:
    """Remove what was just built and refuse it when the source changed while it was read.

    Why: the entry is named after the fingerprint taken before the build and records it, but the build reads the
    source as it is during the build; a source replaced meanwhile (``mv``, a copy finishing) left an entry named
    for the first version holding the second's data, reused without a word once the first version came back with
    its mtime (``cp -p``, ``rsync -t``, an archive). The fingerprint again after the build is a stat of the files
    when nothing changed (its fast path). Called under the entry's build lock, so no other process has used it.

    Args:
        entry: The entry just built.
        before: The source's fingerprint the build was given.
        after: The source's fingerprint now (``fingerprint(before)``).
        description: What was built, for the message.

    Raises:
        StaleSourceError: the source's files or content differ from ``before``'s.
    """
    if after.identity() == before.identity() and not before.rewritten(after):
        return
    _remove_entry_path(entry)
    raise StaleSourceError(
        f"{before.path} changed while the {description} was built from it ({before.shown_differences(after)}); "
        "nothing built from it was kept: run again once the source no longer changes"
    )
