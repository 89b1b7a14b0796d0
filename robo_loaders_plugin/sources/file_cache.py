"""A read-through cache of whole remote files on local disk (``local_cache_dir``).

Why: streaming reads only the byte ranges a pass decodes, and reads them again every pass. A user who trains many
passes from S3/HTTP and has the disk space asks for the files to be copied once; from then on a pass reads the
local copies and the remote store only answers one metadata request per file and process.

Why a copy is never served stale: each copy has a sidecar recording the remote file's identity when it was copied
(URL, endpoint, size, and its ETag or else its modification time, from ``fs.info``) and the SHA-256 of the copy. The
first time a process wants a file it asks the remote store for the identity again and hashes the local copy; a
changed identity (the remote file was replaced), a copy of the wrong size (truncated) or another hash (a flipped
bit) downloads the file again and says why in the log. Hashing costs one read of each file per process; later
opens in the same process trust that check.

Why it is safe under several processes (ranks, DataLoader workers) and threads: a download goes to a temporary
name unique to the process and thread and is renamed over the copy (atomic on POSIX), under a file lock per copy
(``filelock``), so readers see the old or the new file, never a partial one, and a file is downloaded once.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid

from robo_loaders_plugin.core.errors import SourceError
from robo_loaders_plugin.core.files import atomic_write_json

SIDECAR = ".robo-loaders.json"
LOG_PREFIX = "[robo-loaders]"


def remote_identity(fs, path: str, endpoint: str | None) -> dict:
    """What says a remote file is still the one copied: its size and version (S3's ETag, HTTP's ETag or
    Last-Modified, or an mtime)."""
    info = fs.info(path)
    version = None
    for key in ("ETag", "etag", "VersionId", "Last-Modified", "LastModified", "mtime", "last_modified", "updated"):
        if info.get(key) is not None:
            version = f"{key}={info[key]}"
            break
    return {"url": fs.unstrip_protocol(path), "endpoint": endpoint, "size": info.get("size"), "version": version}


def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class FileCache:
    """Local copies of files of one fsspec filesystem under ``directory`` (``<scheme>/<path of the URL>``).
    ``downloaded`` counts the bytes fetched from the remote store by this object."""

    def __init__(self, fs, directory: str, endpoint: str | None = None, log=print):
        self.fs, self.endpoint, self.log = fs, endpoint, log
        self.directory = os.path.abspath(os.path.expanduser(str(directory)))
        self.downloaded = 0
        self.downloads = 0
        self._checked: dict[str, str] = {}  # remote path -> local copy verified by this process
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __getstate__(self):  # a copy in another process checks its files again (its own locks, its own log)
        state = dict(self.__dict__, _checked={}, _locks={})
        state.pop("_guard")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, _guard=threading.Lock())

    def local_path(self, path: str) -> str:
        url = self.fs.unstrip_protocol(path)
        scheme, _, rest = url.partition("://")
        parts = [p.replace(":", "_") for p in rest.split("/") if p not in ("", ".", "..")]
        if not parts:
            raise SourceError(f"{url}: cannot be cached in local_cache_dir (no file name)")
        return os.path.join(self.directory, scheme or "file", *parts)

    def checked(self, path: str) -> bool:
        return path in self._checked

    def get(self, path: str) -> str:
        """The verified local copy of remote ``path``, downloaded first when missing, stale or damaged."""
        done = self._checked.get(path)
        if done is not None:
            return done
        with self._guard:
            lock = self._locks.setdefault(path, threading.Lock())
        with lock:
            if path in self._checked:
                return self._checked[path]
            local = self.local_path(path)
            os.makedirs(os.path.dirname(local), exist_ok=True)
            from filelock import FileLock

            with FileLock(local + ".lock"):
                ident = remote_identity(self.fs, path, self.endpoint)
                reason = self._stale(local, ident)
                if reason:
                    if reason != "not cached yet":
                        self.log(f"{LOG_PREFIX} local_cache_dir: {ident['url']}: {reason}; downloading it again "
                                 f"into {local}")
                    self._download(path, local, ident)
            self._checked[path] = local
            return local

    def _stale(self, local: str, ident: dict) -> str | None:
        """Why the local copy cannot be served (None: it is the remote file, byte for byte as copied)."""
        try:
            with open(local + SIDECAR) as f:
                meta = json.load(f)
        except FileNotFoundError:
            return "not cached yet" if not os.path.exists(local) else "the copy has no record of its source"
        except (OSError, ValueError):
            return "its record (sidecar) is unreadable"
        if not os.path.exists(local):
            return "the local copy is missing"
        recorded = meta.get("remote") or {}
        for key, what in (("url", "URL"), ("endpoint", "endpoint"), ("size", "size"), ("version", "version")):
            if recorded.get(key) != ident[key]:
                return f"the remote file changed since it was copied ({what} {recorded.get(key)} -> {ident[key]})"
        size = os.path.getsize(local)
        if size != ident["size"]:
            return f"the local copy is truncated or damaged ({size} bytes, the remote file has {ident['size']})"
        if sha256_of(local) != meta.get("sha256"):
            return "the local copy's SHA-256 differs from the one recorded when it was copied (it is corrupt)"
        return None

    def _download(self, path: str, local: str, ident: dict) -> None:
        for _ in range(3):
            tmp = f"{local}.tmp-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
            try:
                self.fs.get_file(path, tmp)
                size = os.path.getsize(tmp)
                with self._guard:
                    self.downloaded += size
                    self.downloads += 1
                after = remote_identity(self.fs, path, self.endpoint)
                if after != ident or size != ident["size"]:  # replaced while we copied it: copy it again
                    ident = after
                    continue
                digest = sha256_of(tmp)
                os.replace(tmp, local)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            atomic_write_json(local + SIDECAR, {"remote": ident, "sha256": digest, "bytes": size}, indent=1)
            return
        raise SourceError(f"{ident['url']} kept changing while it was copied into {local}; retry when the remote "
                          "dataset is no longer being written")
