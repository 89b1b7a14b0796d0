"""Options of the pipeline-served backends, and where the datapipe backend's shards come from; the same for every
framework."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from robo_loaders_plugin.core.errors import BackendOptionError, RoboLoadersError, StaleSourceError
from robo_loaders_plugin.storage import cache
from robo_loaders_plugin.storage.fingerprint import Fingerprint, check_same_source
from robo_loaders_plugin.storage.shards import ShardError, ShardReader


PASS_FIELDS = ("shuffle_buffer", "seed", "prefetch", "cache_episodes", "replacement")


@dataclasses.dataclass(frozen=True)
class PassOptions:
    """How the pipeline orders and feeds a pass (the options every pipeline-served backend shares)."""

    shuffle_buffer: int
    seed: int | None
    prefetch: int
    cache_episodes: int
    replacement: bool

    @classmethod
    def resolve(cls, table: dict, option_prefix: str, default_shuffle_buffer: int, kwargs: dict):
        """(pass options, the backend's other options), both over the defaults of its option ``table``."""
        values = {k: default for k, (_types, default, _help) in table.items()}
        values.update(kwargs)
        opts = cls(**{k: values.pop(k) for k in PASS_FIELDS})
        if opts.shuffle_buffer is None:
            opts = dataclasses.replace(opts, shuffle_buffer=default_shuffle_buffer)
        if opts.shuffle_buffer < 1 or opts.prefetch < 0 or opts.cache_episodes < 1:
            raise BackendOptionError(f"{option_prefix}: shuffle_buffer and cache_episodes must be >= 1 and "
                                     "prefetch >= 0")
        return opts, values

    @property
    def episode_capacity(self) -> int:
        return max(self.cache_episodes, 2 * self.shuffle_buffer)


def datapipe_options(kwargs: dict, option_prefix: str, default_shuffle_buffer: int) -> tuple[PassOptions, dict]:
    """The datapipe backend's pass options, and its storage options (shards, cache_dir, check_source,
    convert_workers)."""
    from robo_loaders_plugin.backends import DATAPIPE_OPTIONS

    opts, storage = PassOptions.resolve(DATAPIPE_OPTIONS, option_prefix, default_shuffle_buffer, kwargs)
    if storage["convert_workers"] < 1:
        raise BackendOptionError(f"{option_prefix}.convert_workers must be >= 1")
    return opts, storage


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


def open_shards(*, framework: str, source, shards: str | None, cache_dir: str | None, check_source: bool,
                key_desc: dict, convert: Callable[[str, Fingerprint], None], option_prefix: str, convert_hint: str):
    """(reader, holder) of the shards a run reads: ``shards``, checked against ``source`` (unless
    ``check_source`` is false), or an entry of the cache directory converted on first use and reused while
    ``source`` is unchanged. ``holder`` keeps a cache entry in use while it lives."""
    if shards:
        reader = ShardReader(os.path.expanduser(shards))
        meta = reader.dataset.get("metadata", {})
        if meta.get("framework") != framework:
            raise RoboLoadersError(f"{reader.dir}: converted from a {meta.get('framework')!r} dataset, not {framework}")
        if check_source:
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

    root = cache.cache_root(cache_dir, f"{option_prefix}.cache_dir")
    entry, holder, _, _ = cache.obtain(root, f"{framework}-shards", key_desc, source.fingerprint, recorded_source,
                                       usable, convert, f"conversion into robo-shards for {framework}")
    return opened.get(entry.path) or ShardReader(entry.path), holder
