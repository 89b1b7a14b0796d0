"""A directory a backend builds once from a source and reuses while the source and its options are unchanged: the
cache directory's rules (``storage.cache``: one entry per source and options, build locks, use locks, pruning,
the staleness policy of ``storage.fingerprint``) for any backend that writes its own files, on disk or in RAM.

Why one helper: every backend that persists data must answer the same questions (was it made from this source, with
these options? is it complete and intact? is another process building it right now? may it be pruned while a run
reads it? may it take RAM, and how much?), and neither a built-in nor a third-party backend should answer them
again. The builder writes into a temporary directory that is renamed into place only when complete, so a killed
build leaves nothing that looks finished; beside the data the entry records the source's fingerprint and the size
of every file it wrote (its manifest), both checked before every reuse.

- **On disk** (the cache root, ``storage.cache``): persisted and reused by later runs. The backend's own check
  (``check``: checksums, which may read every byte) runs once per version of the entry's files: a stamp in
  ``<root>/.verified/`` records the files' stat when it passed (or when this process wrote them), and an entry whose
  stat is unchanged since holds the same bytes, as a source with an unchanged stat is not digested again.
- **In RAM** (``in_ram``: ``storage.ramfile``): one copy per host and content, shared by every process that uses
  it, removed with its last user; the check runs at every reuse (another process on the host built it), and
  ``ram_budget`` (a backend's ``max_memory``) refuses a reused entry larger than this run allows.
- **Earlier versions**: a ``kind`` ending in ``-<version>`` (``jpeg-frames-2``) replaces the entries of the same
  source and options written under an earlier version, removed once nothing uses them: a new format never finds
  the old entry, which would otherwise hold its disk until the size limit pruned it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable

from robo_loaders_plugin.core.errors import RoboLoadersError, StaleSourceError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint

logger = get_logger(__name__)

SOURCE_FILE = "robo-loaders-source.json"  # the source's fingerprint, the key and the manifest (every file's size)
_VERSIONED = re.compile(r"^(?P<base>.+)-(?P<version>\d+)$")


def recorded_source(path: str) -> Fingerprint | None:
    """The source fingerprint a complete entry recorded.

    Args:
        path: The entry's directory.

    Returns:
        The :class:`Fingerprint`, or ``None`` when the entry is incomplete, unreadable or of another format.
    """
    try:
        with open(os.path.join(path, SOURCE_FILE)) as f:
            return Fingerprint.from_dict(json.load(f)["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError, StaleSourceError):
        return None


def entry_files(path: str) -> dict[str, int]:
    """Every file of an entry but its record, with its size: what its manifest records.

    Args:
        path: The entry's directory.

    Returns:
        ``{relative name: bytes}``.
    """
    out = {}
    for d, _, files in os.walk(path):
        for n in files:
            rel = os.path.relpath(os.path.join(d, n), path)
            if rel != SOURCE_FILE:
                out[rel] = os.path.getsize(os.path.join(d, n))
    return out


def manifest_problem(path: str) -> str | None:
    """What differs between an entry's files and the sizes its manifest recorded when it was built (a file
    truncated, grown, removed or added since), without reading any data.

    Args:
        path: The entry's directory.

    Returns:
        ``None`` when they agree, else one phrase naming the first file that differs.
    """
    try:
        with open(os.path.join(path, SOURCE_FILE)) as f:
            recorded = json.load(f)["files"]
        now = entry_files(path)
    except (OSError, ValueError, KeyError, TypeError):
        return f"{SOURCE_FILE} records no file sizes (written by an earlier robo-loaders, or damaged)"
    for name in sorted(set(recorded) | set(now)):
        if name not in now:
            return f"{name} is missing"
        if name not in recorded:
            return f"{name} was not written by its build"
        if now[name] != recorded[name]:
            return f"{name} is {now[name]} bytes, {recorded[name]} were written"
    return None


def _stamp(path: str) -> str:
    return cache.verified_stamp(path)


def _stat_doc(path: str) -> list:
    from robo_loaders_plugin.core.files import stat_files

    return [list(f) for f in stat_files(path)]


def verified_before(path: str) -> bool:
    """Whether the entry at ``path`` passed its check (or was written by its build) as its files are now (same
    names, sizes, mtimes, inodes and ctimes: the fingerprints' rule, ``storage.fingerprint``).

    Args:
        path: The entry's directory.

    Returns:
        True when a stamp records this very version of its files.
    """
    try:
        with open(_stamp(path)) as f:
            return json.load(f) == _stat_doc(path)
    except (OSError, ValueError):
        return False


def mark_verified(path: str) -> None:
    """Record that the entry at ``path`` passed its check; never an error (a missing stamp only means the next
    reuse checks again).

    Args:
        path: The entry's directory, as it is now.
    """
    from robo_loaders_plugin.core.files import atomic_write_json

    try:
        os.makedirs(os.path.dirname(_stamp(path)), exist_ok=True)
        atomic_write_json(_stamp(path), _stat_doc(path))
    except OSError:
        pass


def retire_earlier_versions(root: str, kind: str, key: dict, former_keys=()) -> list[str]:
    """Remove the entries of this source and options that an earlier version of ``kind`` wrote and nothing uses.

    Args:
        root: The cache root.
        kind: The entry kind; only a kind ending in ``-<version>`` has earlier versions.
        key: The entry's key (hashed into its name).
        former_keys: Other keys earlier versions named the same entries by (a kind whose key once held its own
            version: every such entry had another hash, so it was never found here and stayed on disk).

    Returns:
        The paths removed (entries in use or being built are kept).
    """
    m = _VERSIONED.match(kind)
    if m is None:
        return []
    hashes = [cache.short_hash(k) for k in (key, *former_keys)]
    # one listing of the root for every earlier version, the mixture build's listing where there is one (a
    # mixture's components each look in one root holding every component's entries; an earlier format's entry
    # written since by an older version's run is retired at a later start)
    earlier = tuple(f"{m['base']}-{old}-{h}-" for h in hashes for old in range(int(m["version"])))
    return [e.path for e in cache.entries(root, earlier, "kept") if e.remove()] if earlier else []


def build_or_reuse(
    *,
    kind: str,
    source,
    key: dict,
    build: Callable[[str], None],
    cache_dir: str | None = None,
    check: Callable[[str], bool] | None = None,
    description: str = "",
    option_prefix: str = "cache_dir",
    in_ram: bool = False,
    ram_budget: int | None = None,
    recheck: bool = False,
    opened: Callable[[str], None] | None = None,
    former_keys=(),
):
    """The entry of ``source`` built with the options in ``key``: reused when complete, intact (its manifest, then
    ``check``) and made from the source as it is now, else (re)built.

    Args:
        kind: Names the backend and format, e.g. ``"jpeg-frames-1"`` (the entry's name starts with it); a trailing
            ``-<version>`` retires the entries of earlier versions (see the module's docstring).
        source: The source: any object with ``fingerprint(recorded=None) -> Fingerprint`` (``RobomimicHdf5``,
            ``LeRobotV3``).
        key: The source's path and every option the content depends on (one entry per distinct value).
        build: ``build(directory)`` writes the entry's files into ``directory`` (which exists and is empty).
        cache_dir: The cache root on disk (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``); ignored
            ``in_ram``.
        check: ``check(path) -> bool``: whether an existing complete entry is intact (e.g. its checksums hold); it
            may raise a ``RoboLoadersError`` saying what is wrong instead of returning ``False``. An entry that fails
            it is rebuilt, with a log line. On disk it runs once per version of the entry's files, the version a build
            writes included (before the entry is renamed into place: files that fail it are refused, not served).
        description: For the log lines ("waiting for ... to finish building ...").
        option_prefix: How the user sets the backend's options (``train.data_backend_kwargs``), for errors.
        in_ram: Keep the entry in this user's RAM directory (``storage.ramfile``), shared by the host's processes
            and removed with its last user, instead of the cache root.
        ram_budget: The most bytes a RAM entry may take (the backend's ``max_memory``; ``None``: no limit): a
            reused entry built by a run with a larger budget is refused.
        recheck: Run ``check`` at every reuse, never trusting an earlier run's verification of the same files: for
            entries whose reads are not checked one by one (a mapped array served where it lies), so that the check
            at the start is the only one; the stamp of the files' version catches edits through the filesystem, not
            a disk's or a network filesystem's silent changes.
        opened: ``opened(path)`` opens what the caller will read of the entry, called under the entry's build lock
            right after it was checked (reused) or built: a run reading the entry's files by path after the lock
            could read those of another run's rebuild of it (one with another memory budget) beside the files it
            checked. ``None``: nothing opened there.
        former_keys: Keys earlier versions of ``kind`` named this entry by (:func:`retire_earlier_versions`).

    Returns:
        ``(path, hold, reused)``: the entry's directory; an object keeping it in use (never pruned; a RAM entry
        removed when the last such object is released) while it lives; whether it was reused.

    Raises:
        CacheError: the cache root cannot be created or is inside the source's directory, or another process's
            build did not finish in time.
        MemoryBudgetExceeded: a reused RAM entry is larger than ``ram_budget``.
        RoboLoadersError: the files ``build`` wrote fail ``check``, or ``build`` wrote a file named as the entry's
            record (``robo-loaders-source.json``), which would be overwritten.
    """
    from robo_loaders_plugin.storage import ramfile

    if in_ram:
        root = ramfile.ram_root()
        ramfile.sweep_stale(root)
    else:
        where = f"{option_prefix}.cache_dir" if option_prefix != "cache_dir" else "cache_dir"
        src = getattr(source, "root", None) or getattr(source, "path", None)
        cache.check_root_outside(cache.location(cache_dir), src, where if cache_dir else None)
        root = cache.cache_root(cache_dir, where)
        for path in retire_earlier_versions(root, kind, key, former_keys):
            logger.info(
                f"removed {path}: the {description or kind} of this source and these options in an earlier format"
            )

    def usable(path: str) -> bool:
        if recorded_source(path) is None:
            return False
        problem = manifest_problem(path)
        if problem is None and check is not None and (in_ram or recheck or not verified_before(path)):
            try:
                problem = None if check(path) else "it failed its integrity check"
            except RoboLoadersError as exc:  # the check says what is wrong
                problem = str(exc)
            if problem is None and not in_ram and not recheck:
                mark_verified(path)
        if problem is not None:
            logger.warning(f"ignoring unusable cache {path} ({problem}); rebuilding")
            return False
        if opened is not None:
            opened(path)
        return True

    def do_build(path: str, fingerprint: Fingerprint) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path)
        # pid for the builder's SIGTERM cleanup (storage.ramfile), random so that a recycled pid (another PID
        # namespace) never shares a temporary directory
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.makedirs(tmp)
        try:
            build(tmp)
            if os.path.exists(os.path.join(tmp, SOURCE_FILE)):  # ours would replace it: the store would lose a file
                raise RoboLoadersError(
                    f"{description or kind}: its build wrote {SOURCE_FILE}, the name of the cache entry's record; "
                    "give that file another name"
                )
            record = {"fingerprint": fingerprint.as_dict(), "key": key, "files": entry_files(tmp)}
            with open(os.path.join(tmp, SOURCE_FILE), "w") as f:
                json.dump(record, f, default=str)
                f.flush()
                os.fsync(f.fileno())
            if check is not None:
                # the files just written pass the check a reuse runs before they are served: a store whose build
                # wrote files its own verify rejects (damaged or cut short after its checksums) was served as built,
                # and the entry, stamped as verified, at every later run (a reviewer's reproduction)
                try:
                    problem = None if check(tmp) else "they fail its integrity check"
                except RoboLoadersError as exc:
                    problem = str(exc)
                if problem is not None:
                    raise RoboLoadersError(
                        f"{description or kind}: the files its build wrote are not served: {problem}"
                    )
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def building(path: str, fingerprint: Fingerprint) -> None:
        if in_ram:
            with ramfile.building(path):
                do_build(path, fingerprint)
        else:
            do_build(path, fingerprint)
        if opened is not None:
            opened(path)

    entry, use, reused, _ = cache.obtain(
        root,
        kind,
        key,
        source.fingerprint,
        recorded_source,
        usable,
        building,
        description or f"{kind} of {key}",
        housekeeping=not in_ram,
    )
    if in_ram:
        hold = ramfile.RamHold(entry, use)
    else:
        hold = use
        if not reused and not recheck:  # just written: the next run need not check it again
            mark_verified(entry.path)
    if reused and in_ram and ram_budget is not None:
        held = cache.path_bytes(entry.path)
        if held > ram_budget:
            # the budget is no part of the key (it does not change the content), so an entry built by a run with a
            # larger one is found here: this run's budget still holds
            hold.release()
            budget, size = format_bytes(ram_budget), format_bytes(held)
            if budget == size:  # rounded alike: the exact counts say which is larger
                budget, size = f"{budget} ({ram_budget} bytes)", f"{size} ({held} bytes)"
            raise ramfile.MemoryBudgetExceeded(
                f"{option_prefix}.max_memory={budget}, but the cache of this source and these options, built by an "
                f"earlier or concurrent run, holds {size} ({entry.path}); raise max_memory (the cache is shared, "
                "not copied), or build a smaller one of its own: fewer fields or episodes, or a stronger codec "
                "where the backend has one"
            )
    return entry.path, hold, reused
