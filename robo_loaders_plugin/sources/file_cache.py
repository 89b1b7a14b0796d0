"""A read-through cache of whole remote files on local disk (``local_cache_dir``).

Why: streaming reads only the byte ranges a pass decodes, and reads them again every pass. A user who trains many
passes from S3/HTTP and has the disk space asks for the files to be copied once; from then on a pass reads the
local copies and the remote store only answers one metadata request per file and process.

Why a copy is not served stale: each copy has a sidecar recording the remote file's identity when it was copied
(URL, endpoint, size, and a version from ``fs.info``: S3's ETag, the Hub's blob id, GCS's hashes, or else a
modification time) and the SHA-256 of the copy; a store that gives no version has no identity beyond the size, so
its copies are not reused by a later process (each downloads the file again, saying why). A store that gives only
a modification time (HTTP's Last-Modified, or its ETag, which servers derive from the time and size) cannot show a
file replaced with the same size and time: that is said once per run, with what to do. The
first time a process wants a file it asks the remote store for the identity again and hashes the local copy; a
changed identity (the remote file was replaced), a copy of the wrong size (truncated) or another hash (a flipped
bit) downloads the file again and says why in the log. Hashing costs one read of each file per process; later
opens in the same process trust that check.

Why it is safe under several processes (ranks, DataLoader workers) and threads: a download goes to a temporary
name unique to the process and thread and is renamed over the copy (atomic on POSIX), under a file lock per copy
(``core.files.path_lock``), so readers see the old or the new file, never a partial one, and a file is downloaded once.

The same checks keep the local mirror of a remote dataset's tables (``sources.lerobot_v3.mirror_tables``): there
the copies keep their paths relative to the dataset's root (``base``), so the mirror is a dataset root LeRobot can
open, and their records live apart, under ``.robo-loaders/``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import threading
import uuid

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.files import atomic_write_json, path_lock, sha256_file
from robo_loaders_plugin.core.log import get_logger

logger = get_logger(__name__)

SIDECAR = ".robo-loaders.json"
RECORDS = ".robo-loaders"  # with ``base``: the records (and locks) of the copies, apart from them


def _remove_leftovers(local: str) -> None:
    """Remove what killed downloads of ``local`` left (``<copy>.tmp-<pid>-<thread>-<hex>``, a whole video each).

    Why here: the caller holds the copy's lock, which every download of it holds, so no such file is being written;
    nothing else ever removed them, and a run killed mid-download (a preempted job) left one per file it was copying.
    """
    for leftover in glob.glob(glob.escape(local) + ".tmp-*"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def endpoint_of(storage_options: dict | None) -> str | None:
    """The endpoint URL fsspec's ``storage_options`` point at (S3-compatible stores), part of a copy's identity.

    Args:
        storage_options: The fsspec options (``endpoint_url``, or ``client_kwargs.endpoint_url``), or ``None``.

    Returns:
        The endpoint, or ``None`` when none is set (the store's default).
    """
    client = (storage_options or {}).get("client_kwargs") or {}
    return (storage_options or {}).get("endpoint_url") or client.get("endpoint_url")


# the keys of ``fs.info`` that say which version of a file a store serves, in the order they are taken: those that
# change at every write or are derived from the bytes (S3's ETag is the content's MD5, or of its parts; the Hub's
# blob_id and xet_hash and GCS's md5Hash/crc32c are content hashes), then modification times, which a replacement
# can keep (rsync -t, cp -p, touch -r, an archive unpacked on the server)
VERSION_KEYS = ("ETag", "etag", "VersionId", "blob_id", "xet_hash", "md5Hash", "crc32c", "generation")
TIME_KEYS = ("Last-Modified", "LastModified", "mtime", "last_modified", "updated")
# an HTTP server's ETag is a modification time and a size by default (nginx, Apache): a time too
HTTP_PROTOCOLS = ("http", "https")


def http_failure(fs, exc: FileNotFoundError) -> BaseException | None:
    """The error behind fsspec HTTP's ``FileNotFoundError``, where it is not a missing file.

    Why: fsspec's ``HTTPFileSystem.info`` turns every failure of its HEAD and GET (a 500, a 403, a server that is
    down) into ``FileNotFoundError(url)``, so a server outage was reported as "video file ... is missing" (a
    reviewer's reproduction). Only a 404 or 410 is a missing file; anything else is the request's own error, which
    the caller reports as a failed remote read.

    Args:
        fs: The filesystem.
        exc: What its ``info`` raised.

    Returns:
        The underlying error, or ``None`` (a missing file, or not HTTP).
    """
    from fsspec.implementations.http import HTTPFileSystem

    cause = exc.__cause__
    if not isinstance(fs, HTTPFileSystem) or cause is None:
        return None
    return None if getattr(cause, "status", None) in (404, 410) else cause


def remote_identity(fs, path: str, endpoint: str | None) -> dict:
    """What says a remote file is still the one copied: its size and version (S3's ETag, the Hub's blob id, HTTP's
    ETag or Last-Modified, or an mtime). One metadata request (``fs.info``).

    Args:
        fs: The fsspec filesystem.
        path: The file's path on it.
        endpoint: The endpoint (:func:`endpoint_of`), recorded with the identity.

    Returns:
        ``{"url", "endpoint", "size", "version", "by_time"}``; ``version`` is the first of the known keys ``fs.info``
        gives (:data:`VERSION_KEYS`, then :data:`TIME_KEYS`), as ``"key=value"``, or ``None``; ``by_time``: it is a
        modification time (or an HTTP ETag), which a file replaced with the same size can keep.
    """
    info = fs.info(path)
    version, by_time = None, False
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    http = any(p in HTTP_PROTOCOLS for p in protocols)
    for key in VERSION_KEYS + TIME_KEYS:
        if info.get(key) is not None:
            version = f"{key}={info[key]}"
            by_time = key in TIME_KEYS or (http and key.lower() == "etag")
            break
    return {
        "url": fs.unstrip_protocol(path),
        "endpoint": endpoint,
        "size": info.get("size"),
        "version": version,
        "by_time": by_time,
    }


sha256_of = sha256_file  # a copy's own digest (core.files)


class FileCache:
    """Local copies of files of one fsspec filesystem under ``directory``.

    Thread- and process-safe (see the module's docstring). Pickled, it keeps its settings and counters; the copy in
    another process checks its files again.

    Args:
        fs: The fsspec filesystem the files are on.
        directory: Where the copies go (``~`` expanded).
        endpoint: The store's endpoint, part of each copy's identity (:func:`endpoint_of`).
        log: Called with each log line (why a copy is downloaded again), without the ``[robo-loaders]`` prefix;
            ``None``: the plugin's log (``robo_loaders.sources.file_cache``, info).
        base: A remote directory whose files are copied to the same relative paths under ``directory`` (records
            under ``directory/.robo-loaders/``); without it, ``<scheme>/<path of the URL>`` with each record beside
            its copy.
        label: Starts the log lines and errors (the option or feature the copies serve).

    Attributes:
        downloaded: Bytes fetched from the remote store by this object.
        downloads: Files fetched by this object.
    """

    def __init__(
        self,
        fs,
        directory: str,
        endpoint: str | None = None,
        log=None,
        *,
        base: str | None = None,
        label: str = "local_cache_dir",
    ):
        self.fs, self.endpoint, self.log, self.label = fs, endpoint, log, label
        self.base = base.rstrip("/") if base is not None else None
        self.directory = os.path.abspath(os.path.expanduser(str(directory)))
        self.downloaded = 0
        self.downloads = 0
        self._checked: dict[str, str] = {}  # remote path -> local copy verified by this process
        self._said_by_time = False  # the line saying copies are reused by size and modification time, once
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __getstate__(self):  # a copy in another process checks its files again (its own locks, its own log)
        state = dict(self.__dict__, _checked={}, _locks={}, _said_by_time=True)
        state.pop("_guard")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, _guard=threading.Lock())

    def local_path(self, path: str) -> str:
        """Where the copy of remote ``path`` is kept (``:`` in names replaced, ``.``/``..`` parts dropped).

        Args:
            path: The file's path on the filesystem (no protocol).

        Returns:
            The local path, under ``directory``.

        Raises:
            SourceError: with ``base``, ``path`` is not under it or names the records' directory; without, it has no
                file name.
        """
        url = self.fs.unstrip_protocol(path)
        if self.base is not None:
            if not path.startswith(self.base + "/"):
                raise SourceError(f"{url}: not under {self.fs.unstrip_protocol(self.base)}, cannot be mirrored")
            parts = [p.replace(":", "_") for p in path[len(self.base) + 1 :].split("/") if p not in ("", ".", "..")]
            if not parts or parts[0] == RECORDS:
                raise SourceError(f"{url}: cannot be mirrored (no file name, or the name of the mirror's records)")
            return os.path.join(self.directory, *parts)
        scheme, _, rest = url.partition("://")
        parts = [p.replace(":", "_") for p in rest.split("/") if p not in ("", ".", "..")]
        if not parts:
            raise SourceError(f"{url}: cannot be cached in {self.label} (no file name)")
        return os.path.join(self.directory, scheme or "file", *parts)

    def record_path(self, local: str) -> str:
        """Where the record (identity and SHA-256) of the copy ``local`` is kept; its lock is beside it.

        Args:
            local: A copy's path (:meth:`local_path`).

        Returns:
            ``<local>.robo-loaders.json``; with ``base``, the copy's relative path under ``.robo-loaders/``, plus
            ``.json``.
        """
        if self.base is None:
            return local + SIDECAR
        return os.path.join(self.directory, RECORDS, os.path.relpath(local, self.directory) + ".json")

    def _lock_path(self, local: str) -> str:
        return local + ".lock" if self.base is None else self.record_path(local)[: -len(".json")] + ".lock"

    def recorded_copies(self) -> list[str]:
        """With ``base``: every copy that has a record (what an earlier run mirrored)."""
        records = os.path.join(self.directory, RECORDS)
        return sorted(
            os.path.join(self.directory, os.path.relpath(os.path.join(d, f), records)[: -len(".json")])
            for d, _, files in os.walk(records)
            for f in files
            if f.endswith(".json")
        )

    def forget(self, local: str) -> None:
        """Remove a copy and its record (its file is gone from the remote store).

        Args:
            local: The copy's path; a copy or record already gone is not an error.
        """
        for p in (local, self.record_path(local)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def checked(self, path: str) -> bool:
        """Whether this process has already verified (or downloaded) the copy of ``path``.

        Args:
            path: The file's path on the filesystem.
        """
        return path in self._checked

    def get(self, path: str) -> str:
        """The verified local copy of remote ``path``, downloaded first when missing, stale or damaged.

        The first call per file and process asks the store for the file's identity and hashes the copy; later calls
        return the same path at once.

        Args:
            path: The file's path on the filesystem (no protocol).

        Returns:
            The local copy's path.

        Raises:
            SourceError: the path cannot be mirrored, the copy failed (network, credentials, local disk), or the remote
                file kept changing while it was copied.
        """
        done = self._checked.get(path)
        if done is not None:
            return done
        with self._guard:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:
            if path in self._checked:
                return self._checked[path]
            local = self.local_path(path)
            record = self.record_path(local)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            os.makedirs(os.path.dirname(record), exist_ok=True)
            with path_lock(self._lock_path(local)):
                _remove_leftovers(local)
                try:
                    ident = remote_identity(self.fs, path, self.endpoint)
                    reason = self._stale(local, ident)
                    if reason:
                        if reason != "not cached yet":
                            (self.log or logger.info)(
                                f"{self.label}: {ident['url']}: {reason}; downloading it again into {local}"
                            )
                        self._download(path, local, ident)
                    elif ident["by_time"]:
                        self._say_reused_by_time(ident)
                except SourceError:
                    raise
                except Exception as exc:  # the store's error (a dropped connection), or the local disk's
                    if isinstance(exc, FileNotFoundError):  # fsspec HTTP's info says a 403 or a 500 so (a reviewer's
                        exc = http_failure(self.fs, exc) or exc  # reproduction): the server's own answer is named
                    raise SourceError(
                        f"{self.label}: copying {self.fs.unstrip_protocol(path)} into {local} failed "
                        f"({type(exc).__name__}: {exc}); check the network, the endpoint and the "
                        "credentials (or the space left on the local disk), then run again"
                    ) from exc
            self._checked[path] = local
            return local

    def _say_reused_by_time(self, ident: dict) -> None:
        """Say once per run that copies are reused by their remote file's size and modification time only.

        Why: such a store gives no version that changes at every write, so a file replaced with one of the same
        size that keeps the modification time (``rsync -t``, ``cp -p``, ``touch -r``, an archive unpacked on the
        server) cannot be told from the one copied; the user who replaces files that way must know to clear the
        copies."""
        with self._guard:
            if self._said_by_time:
                return
            self._said_by_time = True
        (self.log or logger.info)(
            f"{self.label}: copies in {self.directory} are reused while the remote file keeps its size and "
            f"modification time ({ident['version'].split('=', 1)[0]}: the store gives no content version, e.g. "
            f"{ident['url']}); a remote file replaced with one of the same size and modification time (rsync -t, "
            f"cp -p) is not noticed: remove {self.directory} after replacing files that way"
        )

    def _stale(self, local: str, ident: dict) -> str | None:
        """Why the local copy cannot be served (None: it is the remote file, byte for byte as copied)."""
        try:
            with open(self.record_path(local)) as f:
                meta = json.load(f)
        except FileNotFoundError:
            return "not cached yet" if not os.path.exists(local) else "the copy has no record of its source"
        except (OSError, ValueError):
            return "its record (sidecar) is unreadable"
        if not os.path.exists(local):
            return "the local copy is missing"
        if ident["version"] is None:  # its size alone: a file replaced by one of the same size was served stale
            return (
                "the remote store gives no version for it (no ETag or Last-Modified), so a copy made earlier cannot "
                "be shown to be the file it serves now (a copy is reused only within a process)"
            )
        if ident["size"] is None:  # no Content-Length: a download cut short is a shorter file, kept as complete
            return (
                "the remote store gives no size for it (no Content-Length), so a copy made earlier cannot be shown "
                "complete (a copy is reused only within a process)"
            )
        recorded = meta.get("remote") or {}
        for key, what in (("url", "URL"), ("endpoint", "endpoint"), ("size", "size"), ("version", "version")):
            if recorded.get(key) != ident[key]:
                return f"the remote file changed since it was copied ({what} {recorded.get(key)} -> {ident[key]})"
        size = os.path.getsize(local)
        expected = ident["size"]
        if size != expected:
            return f"the local copy is truncated or damaged ({size} bytes, the remote file has {expected})"
        if sha256_of(local) != meta.get("sha256"):
            return "the local copy's SHA-256 differs from the one recorded when it was copied (it is corrupt)"
        return None

    def _download(self, path: str, local: str, ident: dict) -> None:
        short = None  # (bytes received, bytes the server reports) of a copy cut short while the file stayed the same
        for _ in range(3):
            tmp = f"{local}.tmp-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
            try:
                self.fs.get_file(path, tmp)
                size = os.path.getsize(tmp)
                with self._guard:
                    self.downloaded += size
                    self.downloads += 1
                after = remote_identity(self.fs, path, self.endpoint)
                if after != ident or (ident["size"] is not None and size != ident["size"]):  # replaced meanwhile
                    short = (size, ident["size"]) if after == ident else None
                    ident = after
                    continue
                digest = sha256_of(tmp)
                os.replace(tmp, local)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            atomic_write_json(self.record_path(local), {"remote": ident, "sha256": digest, "bytes": size}, indent=1)
            return
        if short is not None:  # the same file each time, its body cut short: the server's, not a change
            raise SourceError(
                f"{ident['url']}: the server sent {short[0]} of the {short[1]} bytes it reports for it (a truncated "
                f"response), three times, while copying it into {local}; check the server or the network, then run "
                "again"
            )
        raise SourceError(
            f"{ident['url']} kept changing while it was copied into {local}; retry when the remote "
            "dataset is no longer being written"
        )
