"""Parallel, resumable conversion into robo-shards.

Why a manifest of work units: a conversion of a large dataset can be killed, or run by several processes on a
shared folder (two training runs started together on one cache directory). ``manifest.json`` lists units (a run
of episodes that becomes one shard) as planned / leased / done; a process leases a unit under an ``flock`` on
``manifest.lock``, writes its shard atomically, then records it as done with its index entries. The index is
published only when every unit is done, and only with exactly the planned episodes.

Why a lease is a lock: the process holding a lease also holds an ``flock`` on ``locks/unit-<id>.lock`` until it
records the unit done or gives it back, and a lease is stale exactly when that lock can be taken. The kernel drops
the lock however the process ends, so a killed conversion resumes where it stopped; unlike a PID check this holds
across PID namespaces (containers sharing a filesystem) and with PID reuse, and it works across hosts wherever
``flock`` does (local filesystems, NFSv4), which ``manifest.lock`` requires anyway. ``lease_s`` is therefore no
longer an expiry: a lease whose holder is alive is never taken over, however long the unit takes (taking it over
would only convert it twice); the parameter is kept so callers' signatures stay valid.

What resuming repairs (under the manifest lock): a unit whose conversion failed is given back at once (a retry in
the same process converts it); done units whose shard is missing or resized, or whose recorded index does not hold
exactly their episodes, are planned again (and ``index.json`` withdrawn until they are rewritten); temporary
files of writers that are gone (their unit's lock is free) are removed, so a killed conversion does not keep the
disk full. :func:`run` waits (``ROBO_LOADERS_LOCK_TIMEOUT`` seconds, default 2 h) while another live process
converts units, then publishes.

Units whose output is a plain file (``robo-loaders transcode``: one re-encoded video per unit) use the same
planning, leasing, resuming and executors: their worker calls :func:`lease` / :func:`complete` / :func:`release`
itself, records each output (a path relative to ``out_dir``, and its size) where a shard is recorded, so a missing
or resized output is planned again like a shard, and passes a :class:`Publisher` where a :class:`FrameCodec` is
expected (:func:`run`, :func:`finish`, ``executors.execute``): publishing is then its ``publish``, not index.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from tqdm.auto import tqdm

from robo_loaders_plugin.core.files import open_lock_file, path_lock, sha256_file, try_lock
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.progress import inner_bars_quiet
from robo_loaders_plugin.storage.cache import ENV_LOCK_TIMEOUT, lock_timeout
from robo_loaders_plugin.storage.codec import FrameCodec
from robo_loaders_plugin.storage.integrity import json_checksum, with_checksum
from robo_loaders_plugin.storage.shards.format import JSON_TMP_RE as _JSON_TMP_RE
from robo_loaders_plugin.storage.shards.format import ShardError, _atomic_json
from robo_loaders_plugin.storage.shards.worker_pool import run_workers
from robo_loaders_plugin.storage.shards.writer import ShardWriter, publish

logger = get_logger(__name__)

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2  # 2: leases are locks; index entries carry CRC32s (format version 2)
CHECK_BAR_FROM_BYTES = 1 << 30  # the done shards' check (every byte hashed) shows a bar from 1 GiB of shards
POLL_S = 0.5
_UNIT_TMP_RE = re.compile(r"^unit-(\d+)-\d+\.tar\.tmp-\d+$")


class _Lease(NamedTuple):
    fd: int  # holds the unit's flock
    token: str  # identifies this lease in manifest.json


_HELD: dict[tuple[str, int], _Lease] = {}  # (realpath of out_dir, unit id) -> lease this process holds


@dataclasses.dataclass(frozen=True)
class Converted:
    """What :func:`run` published: ``units`` planned (one shard each), ``shards`` and ``episodes`` in index.json."""

    units: int
    shards: int
    episodes: int


class Publisher:
    """Publishes a conversion whose units are not robo-shards. Passed in place of the shards' :class:`FrameCodec`
    (and pickled with it for Slurm tasks), its :meth:`publish` runs under the manifest lock once every unit is done
    and intact, with every unit's recorded index entries in plan order, and the ``metadata`` and
    ``source`` given to :func:`run`; it must be idempotent (a later :func:`finish` publishes again)."""

    unit = "unit"  # what the progress bar counts

    def publish(self, out_dir: str, entries: list[dict], metadata: Mapping, source: Mapping) -> None:
        """Publish the finished conversion (called under the manifest lock once every unit is done and intact).

        Must be idempotent: a later :func:`finish` publishes again.

        Args:
            out_dir: The conversion's output directory.
            entries: Every unit's recorded index entries, in plan order.
            metadata: As given to :func:`run`.
            source: As given to :func:`run`.
        """
        raise NotImplementedError


def _locked(out_dir: str):
    return path_lock(os.path.join(out_dir, "manifest.lock"))


def _read(out_dir: str) -> dict:
    """The manifest, checked against the checksum it holds of itself (one written before it held one is read as it
    is).

    Why the checksum: the manifest's recorded units become ``index.json`` when a conversion finishes; one flipped
    bit that kept it valid JSON was published again at every run (refused by readers, blaming the shard) or crashed
    the finish with a ``KeyError`` (a reviewer's 60 random flips).

    Raises:
        ShardError: it is not JSON, not an object, or does not match its checksum.
    """
    path = os.path.join(out_dir, MANIFEST)
    try:
        with open(path) as f:
            m = json.load(f)
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not an object")
        if "checksum" in m and m["checksum"] != json_checksum(m):
            raise ValueError("it does not match its checksum")
        m.pop("checksum", None)
        return m
    except ValueError as exc:
        raise ShardError(f"{path} is damaged ({exc}); delete it and run the conversion again") from None


def _write(out_dir: str, m: dict) -> None:
    _atomic_json(os.path.join(out_dir, MANIFEST), with_checksum(m))


def _normalized(value):
    """``value`` as it reads back from JSON, so a tuple and the list it was saved as compare equal."""
    return json.loads(json.dumps(value))


# ---- unit locks: only ever opened under the manifest lock -------------------------------------------------------


def _lock_path(out_dir: str, unit_id: int) -> str:
    return os.path.join(out_dir, "locks", f"unit-{unit_id:06d}.lock")


def _try_lock(out_dir: str, unit_id: int) -> int | None:
    """The unit's lock, taken (its descriptor), or None while another holder (any process, or this one through
    another descriptor) has it."""
    os.makedirs(os.path.join(out_dir, "locks"), exist_ok=True)
    fd = open_lock_file(_lock_path(out_dir, unit_id))
    try:
        if try_lock(fd):
            return fd
    except OSError:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _lease_is_live(out_dir: str, unit_id: int) -> bool:
    fd = _try_lock(out_dir, unit_id)
    if fd is None:
        return True
    os.close(fd)
    return False


def _available(out_dir: str, u: dict) -> bool:
    """Whether a unit can be leased: not done, and no live process holds its lock (planned, or leased by a
    process that is gone; the same test :func:`lease` makes)."""
    return u["state"] != "done" and not _lease_is_live(out_dir, u["id"])


# ---- repairs on resume ------------------------------------------------------------------------------------------


def _shard_intact(out_dir: str, shard: dict) -> bool:
    """Whether a done unit's shard is the one its unit recorded: its size, then its SHA-256 (every byte read).

    Why every byte: a member damaged in place (one flipped bit) keeps the shard's size; readers refuse it and say to
    convert again, and a conversion run again that checked sizes only published the same damaged shard again."""
    path = os.path.join(out_dir, shard["name"])
    try:
        if os.path.getsize(path) != shard["bytes"]:
            return False
        return shard.get("sha256") is None or sha256_file(path) == shard["sha256"]
    except OSError:
        return False


def _replan_damaged(out_dir: str, m: dict) -> list[int]:
    """Plan again the done units whose shards are missing, resized or changed (their SHA-256), or whose recorded
    index entries are not exactly their episodes; withdraw index.json meanwhile (it would list shards being
    rewritten)."""
    replanned = []
    done = [u for u in m["units"] if u["state"] == "done"]
    total = sum(int(s.get("bytes", 0)) for u in done for s in u.get("shards", []))
    # every byte is read (SHA-256): minutes at hundreds of GB, so shown where it is long (before a resume's bar and
    # between the conversion's bar and its publication: a silent wait otherwise)
    bar = tqdm(
        total=total,
        desc="check converted shards",
        unit="B",
        unit_scale=True,
        disable=total < CHECK_BAR_FROM_BYTES or inner_bars_quiet(),
    )
    for u in done:
        names = [e.get("name") for e in u.get("index", [])]
        intact = names == u["episodes"]
        for shard in u.get("shards", []) if intact else ():
            intact = _shard_intact(out_dir, shard)
            bar.update(int(shard.get("bytes", 0)))
            if not intact:
                break
        if not intact:
            u["state"] = "planned"
            u.pop("index", None)
            u.pop("shards", None)
            replanned.append(u["id"])
    bar.close()
    if replanned:
        logger.warning(
            f"{out_dir}: converting unit(s) {_ids(replanned)} again (their shard is missing, changed or "
            "does not match manifest.json)"
        )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out_dir, "index.json"))
    return replanned


def _stamp_unstamped(m: dict) -> None:
    """Give the done units an earlier robo-loaders recorded without a stat (no per-unit stat then) the stat of the
    source's files now: they are trusted as that version trusted them (the content digest, which :func:`plan` has
    just found unchanged).

    Why: without a stat they never matched the files' stat, so a conversion or transcode made by the earlier version
    was converted again whole on its next run, warning of a change that never happened (a reviewer's
    reproduction)."""
    now = _source_stat(m)
    if now is None:
        return
    for u in m["units"]:
        if u["state"] == "done" and "source_stat" not in u:
            u["source_stat"] = now


def _replan_read_elsewhen(out_dir: str, m: dict) -> list[int]:
    """Plan again the done units read under another stat of the source's files than theirs now (``plan``'s
    ``source_files``); returns their ids.

    Why: a source edited while it was converted and restored with its mtime (``cp -p``) gave a conversion of two
    versions that the end-of-run check passed (the restored file's content and mtime are the first's), published
    and served (a reviewer's reproduction); nor did a run resumed after such an edit see the units done before it.
    The restore leaves another ctime (and often inode), which each unit's recorded stat shows. A unit whose stat
    changed while it was read records none that matches."""
    now = _source_stat(m)
    if now is None:
        return []
    stale = [u["id"] for u in m["units"] if u["state"] == "done" and u.get("source_stat") != now]
    for i in stale:
        u = m["units"][i]
        u["state"] = "planned"
        for key in ("index", "shards", "source_stat"):
            u.pop(key, None)
    if stale:
        key = os.path.realpath(out_dir)
        _STAT_REPLANS[key] = _STAT_REPLANS.get(key, 0) + 1
        logger.warning(
            f"{out_dir}: unit(s) {_ids(stale)} were read while the source's files had another stat (size, mtime, "
            "inode or ctime) than now: converting them again"
        )
    return stale


# how many times this process planned units of an output directory again because the source's stat changed: a
# source that keeps changing ends the run after MAX_STAT_REPLANS rounds (it looped converting them again and again,
# or said the workers had left them: a reviewer's reproduction)
_STAT_REPLANS: dict[str, int] = {}
MAX_STAT_REPLANS = 3


def _sweep_leftovers(out_dir: str, m: dict) -> list[str]:
    """Remove temporary files of writers that are gone: shards of units whose lock is free, and JSON files (only
    ever written under the manifest lock, which the caller holds)."""
    units = {u["id"] for u in m["units"]}
    removed = []
    shards_dir = os.path.join(out_dir, "shards")
    for name in os.listdir(shards_dir) if os.path.isdir(shards_dir) else []:
        match = _UNIT_TMP_RE.match(name)
        if match and (int(match.group(1)) not in units or not _lease_is_live(out_dir, int(match.group(1)))):
            removed.append(os.path.join(shards_dir, name))
    removed += [os.path.join(out_dir, n) for n in os.listdir(out_dir) if _JSON_TMP_RE.match(n)]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return removed


def _ids(ids: Iterable[int], limit: int = 10) -> str:
    ids = list(ids)
    return ", ".join(map(str, ids[:limit])) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _what_differs(m: dict, fingerprint, options: dict) -> str:
    """What a resumed conversion's source or options change, for the refusal (a reviewer's finding: "another source
    or with other options" said neither). A source given as its content beside the options it is read with
    (LeRobot's ``tolerance_s``) is compared by its content; those options are shown with the others (another
    ``--tolerance-s`` was called another version of the source)."""
    old_src, new_src = m["source"], fingerprint
    old, new = dict(m["options"]), dict(options)
    if isinstance(old_src, dict) and isinstance(new_src, dict):
        old.update((k, v) for k, v in old_src.items() if k != "content")
        new.update((k, v) for k, v in new_src.items() if k != "content")
        old_src, new_src = old_src.get("content"), new_src.get("content")
    if old_src != new_src:
        return "another source, or another version of this one (its content differs from the one converted)"
    keys = sorted(set(old) | set(new), key=str)
    shown = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return f"this source with other options ({'; '.join(shown)})"


def _source_stat(m: dict) -> str | None:
    """A digest of the stat of the source's files the manifest names (``plan``'s ``source_files``); ``None`` when it
    names none; ``"gone"`` when a file cannot be stat-ed (then no unit's recorded stat matches).

    Why a digest: a LeRobot source is hundreds of files, and the manifest, read and written whole at every lease and
    completion, held every file's stat in every unit (units x files entries: a reviewer measured 300 x 300 going
    from 6.5 s to 162 s of manifest work)."""
    from robo_loaders_plugin.core.files import stat_files

    files = m.get("source_files")
    if not files:
        return None
    try:
        return stat_digest(stat_files(files["path"], files["names"]))
    except OSError:
        return "gone"


def stat_digest(files) -> str:
    """A short digest of files' stats (``core.files.stat_files``' tuples: name, size, mtime, inode, ctime).

    Args:
        files: The stat tuples.

    Returns:
        A hex digest, equal for equal stats.
    """
    import hashlib

    return hashlib.sha256(json.dumps([list(f) for f in files]).encode()).hexdigest()[:32]


def source_stat_digest(out_dir: str) -> str | None:
    """The digest of the stat of the source's files a planned conversion names, now: what a worker that reads the
    source before its first unit (LeRobot's tables) gives :func:`work` as ``since``.

    Args:
        out_dir: The conversion's output directory, planned.

    Returns:
        :func:`stat_digest` of the files now, ``"gone"``, or ``None`` when the manifest names no files.
    """
    return _source_stat(_read(out_dir))


def withdraw_if_source_changed(out_dir: str, before, after, source_path: str) -> None:
    """Withdraw a finished conversion whose source changed while it was converted.

    Why: the shards record the fingerprint taken before the conversion read the source; a source replaced during it
    (``mv`` of another version) left shards recording the first version and holding the second's arrays, served as
    the first once it came back with its mtime (``cp -p``, ``rsync -t``; a reviewer's reproduction).

    Args:
        out_dir: The conversion's output directory (``index.json`` and ``dataset.json`` published).
        before: The source's fingerprint the conversion recorded.
        after: Its fingerprint now (``source.fingerprint(before)``: a stat when unchanged).
        source_path: The source, for the message.

    Raises:
        StaleSourceError: the source's files or content differ from ``before``'s; ``index.json`` and
            ``dataset.json`` are removed first, so no reader opens the shards, and every unit is planned again, so
            no later run resumes what was read from two versions.
    """
    from robo_loaders_plugin.core.errors import StaleSourceError

    # not Fingerprint.rewritten: each unit is checked against the files' full stat when it is published
    # (_replan_read_elsewhen), so a unit read while a file was written is converted again, not the run refused
    if after.identity() == before.identity():
        return
    with _locked(out_dir):
        for name in ("index.json", "dataset.json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out_dir, name))
        # every unit planned again: kept done, the next run of the same command resumed them and published the two
        # versions' arrays once the first version was back with its mtime (cp -p; a reviewer's reproduction)
        with contextlib.suppress(FileNotFoundError, ShardError):
            m = _read(out_dir)
            for u in m["units"]:
                if u["state"] == "done":
                    u["state"] = "planned"
                    u.pop("index", None)
                    u.pop("shards", None)
            _write(out_dir, m)
    raise StaleSourceError(
        f"{source_path} changed while it was converted into {out_dir} ({before.shown_differences(after)}); the "
        "conversion is withdrawn (no reader opens it): convert again into an empty directory once the source no "
        "longer changes"
    )


def withdraw_if_source_stat_changed(out_dir: str, source: Mapping) -> None:
    """:func:`withdraw_if_source_changed` where the source's content digest cannot be taken (a datatrove-slurm task
    publishing the conversion: the framework's source is not at hand): its files' names, sizes and mtimes against
    those recorded.

    Why: a conversion run as a job array was published by its last task without the source being looked at again,
    so a source edited while the job ran gave shards holding two versions (a reviewer's reading; the launching
    process checks the content when it publishes itself).

    Args:
        out_dir: The conversion's output directory.
        source: What the conversion records of its source (``{"path", "fingerprint"}``; without a fingerprint,
            nothing is checked).

    Raises:
        StaleSourceError: a recorded file is gone, resized or has another mtime (the conversion is withdrawn).
    """
    from robo_loaders_plugin.core.files import stat_files
    from robo_loaders_plugin.storage.fingerprint import Fingerprint

    recorded = source.get("fingerprint")
    if not isinstance(recorded, Mapping):
        return
    before = Fingerprint.from_dict(dict(recorded))
    names = None if [f[0] for f in before.files] == [""] else [f[0] for f in before.files]
    try:
        files = stat_files(before.path, names)
    except OSError:
        files = ()
    # the same digest claimed only so that identities compare the stats: a changed stat is a changed identity
    withdraw_if_source_changed(
        out_dir, before, Fingerprint(before.path, files, before.content, before.method), before.path
    )


# ---- the manifest's life cycle ----------------------------------------------------------------------------------


def plan(
    out_dir: str, source_fingerprint, units: list[list[str]], options: Mapping, source_files: Mapping | None = None
) -> dict:
    """Create the manifest, or check that an existing one is for the same source and options (resume) and repair
    it (see the module's docstring).

    A manifest of an earlier format version is discarded (with ``index.json``) and the conversion starts over.

    Args:
        out_dir: The conversion's output directory (created, with ``shards/``).
        source_fingerprint: Any JSON value identifying the source, compared with ``==`` after a JSON round trip.
        units: The episodes of each unit, in order (one shard each).
        options: Everything the output depends on (codec, shard size, ...), compared the same way.
        source_files: ``{"path", "names"}`` of the source's files (``core.files.stat_files``'s arguments;
            ``names`` ``None`` for one file): each unit records their stat (size, mtime, inode, ctime) as it read
            them, and a unit read under another stat than the source's when publishing is converted again
            (:func:`work`, :func:`_finish`). ``None``: not recorded.

    Returns:
        The manifest as a dict.

    Raises:
        ShardError: an episode planned twice; the directory holds a conversion of another source or with other
            options; or its manifest.json is damaged.
        CacheError: ``$ROBO_LOADERS_LOCK_TIMEOUT`` is not a number of seconds (read here, before any unit is
            converted: read only when a wait began, it failed the processes that waited after their work).
    """
    lock_timeout()
    names = [n for unit in units for n in unit]
    if len(set(names)) != len(names):
        raise ShardError(f"{out_dir}: the planned units list some episodes twice")
    fingerprint, options = _normalized(source_fingerprint), _normalized(dict(options))
    os.makedirs(os.path.join(out_dir, "shards"), exist_ok=True)
    with _locked(out_dir):
        path = os.path.join(out_dir, MANIFEST)
        try:
            m = _read(out_dir) if os.path.exists(path) else None
        except ShardError as exc:  # damaged: what it recorded cannot be trusted, so nothing done is kept
            logger.warning(f"{exc}: converting again from the start")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out_dir, "index.json"))
            m = None
        if m is not None and m.get("version") != MANIFEST_VERSION:
            logger.info(f"{out_dir}: conversion state from an earlier robo-loaders; converting again")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(out_dir, "index.json"))
            m = None
        if m is not None:
            if m["source"] != fingerprint or m["options"] != options:
                what = _what_differs(m, fingerprint, options)
                same = " (or the options it was converted with)" if what.startswith("this source") else ""
                raise ShardError(f"{out_dir} holds a conversion of {what}; use an empty output directory{same}")
            changed = bool(_replan_damaged(out_dir, m))
            if source_files is not None and m.get("source_files") != _normalized(dict(source_files)):
                m["source_files"], changed = _normalized(dict(source_files)), True
                _stamp_unstamped(m)
        else:
            m = {
                "version": MANIFEST_VERSION,
                "source": fingerprint,
                "options": options,
                "units": [{"id": i, "episodes": list(eps), "state": "planned"} for i, eps in enumerate(units)],
            }
            if source_files is not None:
                m["source_files"] = _normalized(dict(source_files))
            changed = True
        _sweep_leftovers(out_dir, m)
        if changed:
            _write(out_dir, m)
        return m


def lease(out_dir: str, lease_s: float = 3600.0) -> dict | None:
    """Lease the next unit that is planned or whose holder is gone.

    The caller then holds the unit's lock until :func:`complete` or :func:`release`.

    Args:
        out_dir: The conversion's output directory.
        lease_s: Unused (see the module's docstring); kept so callers' signatures stay valid.

    Returns:
        The unit (``id``, ``episodes``, ...), or ``None`` when no unit can be leased.
    """
    with _locked(out_dir):
        m = _read(out_dir)
        for u in m["units"]:
            if u["state"] == "done":
                continue
            fd = _try_lock(out_dir, u["id"])
            if fd is None:
                continue  # leased by a live process
            token = uuid.uuid4().hex
            u["state"] = "leased"
            u["lease"] = {"token": token, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
            try:
                _write(out_dir, m)
            except BaseException:
                os.close(fd)
                raise
            _HELD[(os.path.realpath(out_dir), u["id"])] = _Lease(fd, token)
            return u
    return None


def _owned(u: dict, held: _Lease | None) -> bool:
    return held is not None and u["state"] == "leased" and u.get("lease", {}).get("token") == held.token


def complete(
    out_dir: str, unit_id: int, episodes: list[dict], shards: list[dict], source_stat: str | None = None
) -> None:
    """Record a leased unit as done with its index entries, and let go of its lock.

    Args:
        out_dir: The conversion's output directory.
        unit_id: The unit, leased by this process.
        episodes: The unit's index entries, one per planned episode, in plan order.
        shards: The unit's outputs (shards: name and size).
        source_stat: The digest of the stat of the source's files it was read under (``None``: the manifest names
            no files).

    Raises:
        ShardError: the unit is not leased by this process, or the entries are not its planned episodes.
    """
    key = (os.path.realpath(out_dir), unit_id)
    with _locked(out_dir):
        m = _read(out_dir)
        u = m["units"][unit_id]
        if not _owned(u, _HELD.get(key)):
            raise ShardError(
                f"{out_dir}: unit {unit_id} is not leased by this process (taken over while it was written?)"
            )
        names = [e["name"] for e in episodes]
        if names != u["episodes"]:
            raise ShardError(
                f"{out_dir}: unit {unit_id} was written with episodes {names[:3]}... "
                f"({len(names)}), planned {u['episodes'][:3]}... ({len(u['episodes'])})"
            )
        u.update(state="done", index=episodes, shards=shards)
        if source_stat is not None:
            u["source_stat"] = source_stat
        u.pop("lease", None)
        _write(out_dir, m)
    os.close(_HELD.pop(key).fd)


def release(out_dir: str, unit_id: int) -> None:
    """Give a leased unit back (planned again), e.g. after its conversion failed.

    The lock goes in any case, so even if manifest.json cannot be updated the lease is stale and the unit is taken
    over. A unit this process does not hold is left alone.

    Args:
        out_dir: The conversion's output directory.
        unit_id: The unit.
    """
    held = _HELD.pop((os.path.realpath(out_dir), unit_id), None)
    if held is None:
        return
    try:
        with _locked(out_dir):
            m = _read(out_dir)
            u = m["units"][unit_id]
            if _owned(u, held):
                u["state"] = "planned"
                u.pop("lease", None)
                _write(out_dir, m)
    finally:
        os.close(held.fd)


def work(
    out_dir: str,
    codec: FrameCodec,
    read_episode: Callable[[str], tuple[dict, set]],
    lease_s: float = 3600.0,
    since: str | None = None,
) -> int:
    """Lease and convert units until none is left, each into one shard (the shards' worker).

    A unit that fails is given back before the error propagates.

    Args:
        out_dir: The conversion's output directory, planned.
        codec: The shards' frame codec.
        read_episode: ``read_episode(name) -> (fields, compressed)``: the episode's arrays (or encoded
            ``VideoSegment`` s), and the names of the fields stored as lossless frames (``ShardWriter.add_episode``).
        lease_s: Unused (see :func:`lease`).
        since: The source's stat digest (:func:`source_stat_digest`) taken before ``read_episode`` read anything it
            serves units from (LeRobot's tables, read once before the first unit); ``None``: each unit's own start.

    Returns:
        How many units this process converted.
    """
    with _locked(out_dir):
        planned = _read(out_dir)
        _sweep_leftovers(out_dir, planned)
    done = 0
    while (unit := lease(out_dir)) is not None:
        writer = None
        try:
            before = since if since is not None else _source_stat(planned)
            writer = ShardWriter(out_dir, codec, {}, shard_bytes=2**62, shard_prefix=f"unit-{unit['id']:06d}")
            for name in unit["episodes"]:
                fields, compressed = read_episode(name)
                writer.add_episode(name, fields, compressed)
            episodes, shards = writer.finish_shards()
            after = _source_stat(planned)
            # the stat the unit was read under; changed while it was read: none matches (_finish converts it again)
            complete(out_dir, unit["id"], episodes, shards, before if before == after else "changed")
        except BaseException:
            if writer is not None:
                writer.abort()
            with contextlib.suppress(Exception):  # the original error matters; the lock is gone anyway
                release(out_dir, unit["id"])
            raise
        done += 1
    return done


def _finish(out_dir: str, codec: FrameCodec | Publisher, metadata: Mapping, source: Mapping) -> tuple[int, int] | None:
    """Publish if every unit is done and intact: (shards, episodes) published, else None. ``codec`` a
    :class:`Publisher`: it publishes instead of index.json/dataset.json."""
    with _locked(out_dir):
        m = _read(out_dir)
        if any(u["state"] != "done" for u in m["units"]):
            # the done units' shards are hashed once every unit is done, just before publishing: a run waiting for
            # another process polls here, and hashed every finished shard at each poll, under the manifest's lock
            # (~1 h a poll for 1 TB; a reviewer's measurement); the source's stat is cheap and checked at each
            if _replan_read_elsewhen(out_dir, m):
                _write(out_dir, m)
            return None
        if _replan_damaged(out_dir, m) or _replan_read_elsewhen(out_dir, m):
            _write(out_dir, m)
            return None
        episodes = [e for u in m["units"] for e in u["index"]]
        shards = [s for u in m["units"] for s in u["shards"]]
        planned = [n for u in m["units"] for n in u["episodes"]]
        if [e["name"] for e in episodes] != planned:  # _replan_damaged makes this impossible; never publish it
            raise ShardError(
                f"{out_dir}: the converted episodes differ from the planned ones; delete the directory "
                "and convert again"
            )
        if isinstance(codec, Publisher):
            codec.publish(out_dir, episodes, metadata, source)
        else:
            publish(out_dir, episodes, shards, codec, metadata, source)
        return len(shards), len(episodes)


def finish(out_dir: str, codec: FrameCodec, metadata: Mapping, source: Mapping) -> bool:
    """Publish index.json/dataset.json (or the :class:`Publisher`'s output) if every unit is done and intact.

    Done units whose output is damaged are planned again instead (and nothing is published).

    Args:
        out_dir: The conversion's output directory.
        codec: The shards' frame codec, or a :class:`Publisher`.
        metadata: The framework's metadata, published in ``dataset.json``.
        source: The source (its path and fingerprint), published in ``dataset.json``.

    Returns:
        Whether it published.

    Raises:
        ShardError: the converted episodes differ from the planned ones (never published).
    """
    return _finish(out_dir, codec, metadata, source) is not None


def unit_bytes(total_bytes: int, target_bytes: int, num_workers: int) -> int:
    """Source bytes per work unit: about ``target_bytes`` (one shard each), but small enough that every worker of a
    parallel conversion gets several units.

    Why: a dataset smaller than ``4 x num_workers`` shards is split into smaller shards rather than converted by one
    worker while the others wait.

    Args:
        total_bytes: The source's size.
        target_bytes: The shard size asked for.
        num_workers: Processes or tasks converting.

    Returns:
        The bytes per unit (at least 1).
    """
    if num_workers <= 1:
        return target_bytes
    return max(1, min(target_bytes, -(-total_bytes // (4 * num_workers))))


def units_by_size(names: Iterable[str], sizes: Mapping[str, int], target_bytes: int) -> list[list[str]]:
    """Consecutive episodes grouped into units of about ``target_bytes`` (one shard each).

    A unit is closed before the episode that would take it past ``target_bytes``; an episode larger than that is a
    unit of its own.

    Args:
        names: The episodes, in order.
        sizes: Each episode's size in bytes.
        target_bytes: The size of a unit (:func:`unit_bytes`).

    Returns:
        The units, each a list of episode names.
    """
    units, cur, acc = [], [], 0
    for n in names:
        if cur and acc + sizes[n] > target_bytes:
            units.append(cur)
            cur, acc = [], 0
        cur.append(n)
        acc += sizes[n]
    if cur:
        units.append(cur)
    return units


def _pending(out_dir: str) -> tuple[list[int], list[dict]]:
    """(ids of units this process could lease now, units leased by live processes)."""
    with _locked(out_dir):
        m = _read(out_dir)
        available, held = [], []
        for u in m["units"]:
            if _available(out_dir, u):
                available.append(u["id"])
            elif u["state"] != "done":
                held.append(u)
        return available, held


def progress(out_dir: str) -> tuple[int, int] | None:
    """How far a conversion into ``out_dir`` got: what an interrupted command says it kept.

    Args:
        out_dir: The robo-shards directory.

    Returns:
        ``(units done, units planned)``; ``None`` when no conversion was planned there, or its manifest cannot be
        read.
    """
    try:
        units = _read(out_dir)["units"]
        return sum(u["state"] == "done" for u in units), len(units)
    except (OSError, ShardError, KeyError, TypeError):
        return None


def _holders(units: list[dict]) -> str:
    who = sorted({f"pid {u['lease'].get('pid')} on {u['lease'].get('host')}" for u in units if "lease" in u})
    return f"unit(s) {_ids(u['id'] for u in units)} (leased by {', '.join(who) or 'another process'})"


def _show_progress(out_dir: str, bar) -> None:
    bar.n = sum(u["state"] == "done" for u in _read(out_dir)["units"])
    bar.refresh()


def run(
    out_dir: str,
    worker: Callable,
    args: tuple,
    num_workers: int,
    codec: FrameCodec,
    metadata: Mapping,
    source: Mapping,
    desc: str,
    progress: bool = True,
    timeout_s: float | None = None,
) -> Converted:
    """Convert every planned unit, wait for other processes converting into the same directory, then publish.

    ``worker(args)`` (which calls :func:`work`) runs in this process or in ``num_workers`` spawned ones, with a
    progress bar over units; then, while other live processes still hold leases (another run converting into the
    same directory), this waits for them, converting any unit they give back. Spawned, not forked: workers open
    decoders and HDF5 files of their own.

    Args:
        out_dir: The conversion's output directory, planned.
        worker: Leases and converts units until none is left (picklable when ``num_workers > 1``).
        args: ``worker``'s one argument.
        num_workers: Worker processes (1: a thread of this process).
        codec: The shards' frame codec, or a :class:`Publisher`.
        metadata: Published in ``dataset.json``.
        source: Published in ``dataset.json``.
        desc: The progress bar's label.
        progress: Whether to show the progress bar.
        timeout_s: How long to wait for other processes' leases (default :func:`lock_timeout`).

    Returns:
        :class:`Converted`: units planned, shards and episodes published.

    Raises:
        ShardError: a worker failed or died; the workers returned with units left; or the wait timed out.
    """
    timeout = lock_timeout() if timeout_s is None else float(timeout_s)
    total = len(_read(out_dir)["units"])
    bar = tqdm(total=total, desc=desc, unit=getattr(codec, "unit", "shard"), disable=not progress or inner_bars_quiet())

    def show_progress():
        _show_progress(out_dir, bar)

    try:
        run_workers(worker, args, num_workers, out_dir, show_progress, POLL_S)
        deadline, left_over, said = None, None, False
        key, replans = os.path.realpath(out_dir), 0
        _STAT_REPLANS.pop(key, None)
        while (published := _finish(out_dir, codec, metadata, source)) is None:
            available, held = _pending(out_dir)
            if _STAT_REPLANS.get(key, 0) != replans:  # planned again for the source's stat, not left by the workers
                replans, left_over = _STAT_REPLANS[key], None
            if replans >= MAX_STAT_REPLANS:
                from robo_loaders_plugin.core.errors import StaleSourceError

                files = _read(out_dir).get("source_files") or {}
                raise StaleSourceError(
                    f"{files.get('path', 'the source')}: its files kept changing (size, mtime, inode or ctime) while "
                    f"they were converted into {out_dir}: units read from them were converted again "
                    f"{MAX_STAT_REPLANS} times; run the same command once the source no longer changes"
                )
            if available:  # given back by a killed process, or planned again: convert them here
                if set(available) == left_over:  # the workers returned without converting them
                    raise ShardError(
                        f"{out_dir}: some units are not done yet (unit(s) {_ids(available)} were left "
                        "unconverted by the workers); run the same command again"
                    )
                left_over = set(available)
                run_workers(worker, args, num_workers, out_dir, show_progress, POLL_S)
                continue
            if deadline is None:
                deadline = time.monotonic() + timeout
            if held and not said:  # none held: the last unit was completed between _finish and _pending (the line
                # named no unit: a reviewer's find); the next poll publishes
                said = True
                logger.info(
                    f"{out_dir}: waiting for another process converting {_holders(held)} "
                    f"(at most {timeout:.0f} s, {ENV_LOCK_TIMEOUT})"
                )
            elif time.monotonic() > deadline:
                raise ShardError(
                    f"{out_dir}: timed out after {timeout:.0f} s waiting for another process "
                    f"converting {_holders(held)}; run the same command again once it has finished, "
                    f"or raise {ENV_LOCK_TIMEOUT} to wait longer"
                )
            _show_progress(out_dir, bar)
            time.sleep(POLL_S)
    finally:
        bar.close()
    shards, episodes = published
    return Converted(units=total, shards=shards, episodes=episodes)
