"""The datapipe backend's options and where its shards come from, the same for every framework."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError, StaleSourceError
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint, check_same_source
from robo_loaders_plugin.storage.shards import ShardError, ShardReader


@dataclasses.dataclass(frozen=True)
class DatapipeOptions:
    shards: str | None
    cache_dir: str | None
    check_source: bool
    shuffle_buffer: int
    seed: int | None
    prefetch: int
    convert_workers: int
    cache_episodes: int
    replacement: bool

    @classmethod
    def resolve(cls, option_prefix: str, default_shuffle_buffer: int, **kwargs):
        """The options given (validated against the backend's option table), over the table's defaults."""
        from robo_loaders_plugin.backends import DATAPIPE_OPTIONS

        kw = {k: default for k, (_types, default, _help) in DATAPIPE_OPTIONS.items()}
        kw.update(kwargs)
        if kw["shuffle_buffer"] is None:
            kw["shuffle_buffer"] = default_shuffle_buffer
        opts = cls(**kw)
        if opts.shuffle_buffer < 1 or opts.prefetch < 0 or opts.convert_workers < 1 or opts.cache_episodes < 1:
            raise BackendOptionError(f"{option_prefix}: shuffle_buffer, convert_workers, cache_episodes must be >= 1 "
                                     "and prefetch >= 0")
        return opts

    @property
    def episode_capacity(self) -> int:
        return max(self.cache_episodes, 2 * self.shuffle_buffer)


def recorded_source(reader_or_dir) -> Fingerprint | None:
    """The source fingerprint a converted dataset recorded (None when it has none or is incomplete)."""
    try:
        if isinstance(reader_or_dir, ShardReader):
            doc = reader_or_dir.dataset
        else:
            with open(os.path.join(reader_or_dir, "dataset.json")) as f:
                doc = json.load(f)
        d = (doc.get("source") or {}).get("fingerprint")
        return Fingerprint.from_dict(d) if isinstance(d, dict) else None
    except (OSError, ValueError, StaleSourceError):
        return None


def open_shards(*, framework: str, source, opts: DatapipeOptions, key_desc: dict,
                convert: Callable[[str, Fingerprint], None], option_prefix: str, convert_hint: str):
    """(reader, holder) of the shards a run reads: the ``shards`` option, checked against ``source`` (unless
    ``check_source`` is false), or an entry of the cache directory converted on first use and reused while
    ``source`` is unchanged. ``holder`` keeps a cache entry in use while it lives."""
    if opts.shards:
        reader = ShardReader(os.path.expanduser(opts.shards))
        meta = reader.dataset.get("metadata", {})
        if meta.get("framework") != framework:
            raise RoboLoadersError(f"{reader.dir}: converted from a {meta.get('framework')!r} dataset, not {framework}")
        if opts.check_source:
            recorded = recorded_source(reader)
            if recorded is None:
                raise StaleSourceError(f"{reader.dir} records no source fingerprint, so it cannot be checked against "
                                       f"{source.path}; {convert_hint}, or set {option_prefix}.check_source "
                                       "to false")
            check_same_source(recorded, source.fingerprint(recorded), f"shards {reader.dir}",
                              f"Convert it again ({convert_hint}), or set {option_prefix}.check_source to false if "
                              "you know the data is the same")
        return reader, None

    opened = {}

    def usable(path: str) -> bool:
        try:
            opened[path] = ShardReader(path)
            return True
        except ShardError as exc:
            if os.path.exists(os.path.join(path, "index.json")):
                print(f"[robo-loaders] ignoring unusable shards {path} ({exc}); converting again", flush=True)
            return False

    root = cache.cache_root(opts.cache_dir, f"{option_prefix}.cache_dir")
    entry, holder, _, _ = cache.obtain(root, f"{framework}-shards", key_desc, source.fingerprint, recorded_source,
                                       usable, convert, f"conversion into robo-shards for {framework}")
    return opened.get(entry.path) or ShardReader(entry.path), holder
