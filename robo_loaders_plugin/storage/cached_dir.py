"""A directory a backend builds once from a source and reuses while the source and its options are unchanged: the
cache directory's rules (``storage.cache``: one entry per source and options, build locks, use locks, pruning,
the staleness policy of ``storage.fingerprint``) for any backend that writes its own files.

Why a helper: every backend that persists data must answer the same questions (was it made from this source, with
these options? is it complete? is another process building it right now? may it be pruned while a run reads
it?), and a third-party backend should not answer them again. The builder writes into a temporary directory that
is renamed into place only when complete, so a killed build leaves nothing that looks finished; the source's
fingerprint is recorded beside the data and checked before every reuse.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable

from robo_loaders_plugin.core.errors import StaleSourceError
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint

logger = get_logger(__name__)

SOURCE_FILE = "robo-loaders-source.json"


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
):
    """The entry of ``source`` built with the options in ``key``: reused when complete, intact and made from the
    source as it is now, else (re)built.

    Args:
        kind: Names the backend and format, e.g. ``"jpeg-frames"`` (the entry's name starts with it).
        source: The source: any object with ``fingerprint(recorded=None) -> Fingerprint`` (``RobomimicHdf5``,
            ``LeRobotV3``).
        key: The source's path and every option the content depends on (one entry per distinct value).
        build: ``build(directory)`` writes the entry's files into ``directory`` (which exists and is empty).
        cache_dir: The cache root (default: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
        check: ``check(path) -> bool``: whether an existing complete entry is intact (e.g. its checksums hold); an
            entry that fails it is rebuilt, with a log line.
        description: For the log lines ("waiting for ... to finish building ...").
        option_prefix: The option that set ``cache_dir``, for errors.

    Returns:
        ``(path, hold, reused)``: the entry's directory; an object keeping it in use (never pruned) while it lives;
        whether it was reused.

    Raises:
        CacheError: the cache root cannot be created, or another process's build did not finish in time.
    """
    root = cache.cache_root(cache_dir, f"{option_prefix}.cache_dir" if option_prefix != "cache_dir" else "cache_dir")

    def usable(path: str) -> bool:
        if recorded_source(path) is None:
            return False
        if check is not None and not check(path):
            logger.warning(f"{path} failed its integrity check; building it again")
            return False
        return True

    def do_build(path: str, fingerprint: Fingerprint) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path)
        tmp = f"{path}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            build(tmp)
            with open(os.path.join(tmp, SOURCE_FILE), "w") as f:
                json.dump({"fingerprint": fingerprint.as_dict(), "key": key}, f, default=str)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    entry, hold, reused, _ = cache.obtain(
        root, kind, key, source.fingerprint, recorded_source, usable, do_build, description or f"{kind} of {key}"
    )
    return entry.path, hold, reused
