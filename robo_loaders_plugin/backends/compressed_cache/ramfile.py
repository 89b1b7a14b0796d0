"""Where a non-persistent store lives and who deletes it."""
from __future__ import annotations

import glob
import os
import re
import uuid
import weakref

from robo_loaders_plugin.backends.compressed_cache.store import default_shm_dir


def sweep_stale(shm_dir: str) -> None:
    """Remove RAM caches left by processes that died without cleaning up (their pid is in the name)."""
    for p in glob.glob(os.path.join(shm_dir, "robo-loaders-*.rlc*")):
        m = re.match(r"robo-loaders-(\d+)-", os.path.basename(p))
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            try:
                os.unlink(p)
            except OSError:
                pass


def new_ram_path(fingerprint: str) -> str:
    shm = default_shm_dir()
    sweep_stale(shm)
    return os.path.join(shm, f"robo-loaders-{os.getpid()}-{fingerprint}-{uuid.uuid4().hex[:8]}.rlc")


class RamFile:
    """Owns a non-persistent store file: deletes it when the dataset is collected or the builder exits.
    Forked DataLoader workers inherit this object; only the building process may delete the file."""

    def __init__(self, path):
        self.path = path
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _unlink_if_owner, path, self._pid)

    def __getstate__(self):  # spawn workers get a harmless handle that never deletes
        return {"path": self.path}

    def __setstate__(self, state):
        self.path, self._pid, self._finalizer = state["path"], None, None


def _unlink_if_owner(path, pid):
    if os.getpid() == pid and os.path.exists(path):
        os.unlink(path)
