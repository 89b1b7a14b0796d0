"""Parquet tables kept beside the mixture index as checked Arrow IPC copies, read again only when their file changed.

Why: a mixture's start on reuse reads every component's small parquet files (``meta/episodes``, ``data/``,
``meta/tasks.parquet``) to build LeRobot's own dataset objects. Parsing a parquet file's footer and decoding its
pages costs ~1-2.3 ms a file even for a few kB of rows (an episodes file's hundred ``stats/`` columns), ~4 ms a
component, ~1.5 s at 400 components, at every start. The same rows as an Arrow IPC file are read and parsed in
~0.06 ms: no decoding, the buffers are the file's bytes.

What makes a kept copy safe to serve (the project's one staleness policy, as ``mixtures.index`` and the caches):

- It is keyed by its parquet file's real path and what was read (the columns asked for), and records the file's
  stat as it was *before* the read (size, mtime, inode, ctime). It is served only while the file's stat is that
  stat: an edit, a truncation, a replacement or a ``touch`` reads the parquet file again and replaces the copy. The
  kernel sets ctime on every write, so an unchanged stat is unchanged bytes; a file changed during the first read
  no longer matches the stat recorded before it, so the next start reads it again (never the other way round).
- Its bytes carry their xxh3-128 digest: a copy bit-flipped, cut short or written by something else is not parsed;
  the parquet file is read again and the copy replaced (one log line).
- It is written atomically (``core.files.atomic_write_bytes``), so two runs writing at once leave one whole copy.
- It is Arrow IPC, never pickle: a file of data, not code.

One file per parquet file and column set (``<cache root>/.mixture-index/tables/<hash>.arrow``), replaced when its
file changes: copies do not pile up as datasets are edited. Only tables of at most :data:`KEPT_TABLE_BYTES` are kept
(the small files whose per-file cost the copies remove). The directory is hidden, so the cache root's pruning
neither counts nor removes it (``storage.cache.is_entry``), as the index's records.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable

import xxhash

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.files import atomic_write_bytes
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.mixtures.index import INDEX_DIR
from robo_loaders_plugin.storage import cache

logger = get_logger(__name__)

TABLES_DIR = "tables"
# the largest copy kept: the start-up cost is per file (a footer parsed, pages decoded for a few kB of rows), and a
# bigger table is rows whose decoding is a small share of reading them; copies of big tables would also duplicate a
# large part of the datasets' tables in the cache root, which pruning does not count (400 components of at most
# three copies each: at most 2.4 GB, ~20 MB for the pretraining benchmark's)
KEPT_TABLE_BYTES = 2 << 20
MAGIC = b"RLTABLE1"  # the format: a new one never reads an old copy (its magic differs)
_DIGEST_BYTES = 16  # xxh3-128 of the IPC bytes that follow
_SOURCE_KEY = b"robo_loaders.kept_from"  # the schema metadata entry recording the file's path, stat and columns


def file_stat(path: str) -> list:
    """What a kept copy is served against: the file's real path, size, mtime, inode and ctime.

    Args:
        path: A parquet file.

    Returns:
        ``[real path, size, mtime_ns, inode, ctime_ns]``.

    Raises:
        OSError: the file cannot be stat-ed.
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    return [real, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


class KeptTables:
    """Checked Arrow IPC copies of parquet tables in one cache root (module docstring).

    Args:
        root: The cache root (``storage.cache.cache_root``); the copies live under its hidden index directory.
    """

    def __init__(self, root: str):
        self.dir = os.path.join(root, INDEX_DIR, TABLES_DIR)

    def _path(self, real: str, what: str) -> str:
        name = hashlib.sha256(f"{real}\0{what}".encode()).hexdigest()[:32]
        return os.path.join(self.dir, f"{name}.arrow")

    def read(self, path: str, what: str, read_parquet: Callable[[], object]):
        """The table of ``path`` (``what`` says which columns): the kept copy while the file's stat is the one it
        was read at, else ``read_parquet()``, kept for the next start.

        Args:
            path: The parquet file.
            what: Which columns ``read_parquet`` reads (``"all"``, ``"except:stats/"``, a list's JSON): copies of
                different column sets are kept apart.
            read_parquet: Reads the table from ``path`` (pyarrow).

        Returns:
            A ``pyarrow.Table`` equal to ``read_parquet()``'s (schema metadata included).

        Raises:
            Whatever ``read_parquet`` raises (the file's own error); never an error of the copy.
        """
        try:
            stat = file_stat(path)
        except OSError:
            return read_parquet()  # its own error (gone, unreadable), as without the copies
        kept = self._path(stat[0], what)
        table = self._load(kept, stat, what)
        if table is not None:
            return table
        table = read_parquet()
        self._store(kept, stat, what, table)
        return table

    def _load(self, kept: str, stat: list, what: str):
        import pyarrow as pa

        try:
            with open(kept, "rb") as f:
                data = f.read()
        except OSError:
            return None  # none kept yet (or unreadable: read the parquet file)
        head = len(MAGIC) + _DIGEST_BYTES
        body = memoryview(data)[head:]
        if data[: len(MAGIC)] != MAGIC or xxhash.xxh3_128_digest(body) != data[len(MAGIC) : head]:
            self._refuse(kept, "its bytes do not match their digest (damaged, cut short or of another format)")
            return None
        try:
            table = pa.ipc.open_file(pa.py_buffer(body)).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            self._refuse(kept, f"not a table ({exc})")
            return None
        meta = dict(table.schema.metadata or {})
        source = meta.pop(_SOURCE_KEY, None)
        if source is None or json.loads(source) != [*stat, what]:
            return None  # the file changed since (or another file's copy under a colliding name): read it again
        return table.replace_schema_metadata(meta or None)

    def _refuse(self, kept: str, why: str) -> None:
        logger.info(f"mixture index: kept table {kept} refused, {why}; its parquet file is read again")

    def _store(self, kept: str, stat: list, what: str, table) -> None:
        import pyarrow as pa

        meta = dict(table.schema.metadata or {})
        meta[_SOURCE_KEY] = json.dumps([*stat, what]).encode()
        sink = pa.BufferOutputStream()
        try:
            with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
                writer.write_table(table)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:  # a type IPC cannot hold: not kept
            logger.info(f"mixture index: a table of {stat[0]} not kept ({exc})")
            return
        body = sink.getvalue()
        if body.size > KEPT_TABLE_BYTES:  # read from parquet at every start, as without the copies
            return
        try:
            os.makedirs(self.dir, exist_ok=True)
            atomic_write_bytes(kept, MAGIC + xxhash.xxh3_128_digest(body) + body.to_pybytes())
        except OSError as exc:  # the next start reads the parquet file again; never an error of this one
            logger.info(f"mixture index: could not write {kept} ({exc.strerror}); read again next start")


def kept_tables(cache_dir: str | None, where: str = "cache_dir") -> KeptTables | None:
    """The kept tables of a cache root, or ``None`` where the root cannot be used (every table read from parquet,
    as without them; the mixture index says so in its own log line).

    Args:
        cache_dir: The cache root (``None``: ``$ROBO_LOADERS_CACHE`` or ``~/.cache/robo-loaders``).
        where: How the user sets ``cache_dir``, for the cache root's errors.

    Returns:
        A :class:`KeptTables`, or ``None``.
    """
    try:
        return KeptTables(cache.cache_root(cache_dir, where))
    except RoboLoadersError:
        return None
