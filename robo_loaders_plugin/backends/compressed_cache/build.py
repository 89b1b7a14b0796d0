"""Building (or reusing) a store: the part every framework adapter shares.

The adapter supplies a fingerprint of everything the cache content depends on and a function that writes the
episodes; this module decides where the file goes (``cache_dir`` or RAM), reuses a persisted file whose
fingerprint matches, enforces ``max_memory``, and publishes atomically or leaves nothing behind.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Callable

from robo_loaders_plugin.backends.compressed_cache.ramfile import RamFile, new_ram_path
from robo_loaders_plugin.backends.compressed_cache.store import EpisodeStore, StoreError, StoreWriter
from robo_loaders_plugin.codecs import FrameCodec
from robo_loaders_plugin.units import parse_bytes


def fingerprint(desc: dict) -> str:
    return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:24]


def open_or_build(fp: str, prefix: str, write: Callable[[StoreWriter], None], *, codec: FrameCodec,
                  cache_dir: str | None, max_memory, build_workers: int | None, meta: dict, option_prefix: str):
    """Returns ``(store, owner, reused)``; ``owner`` keeps a RAM-only file alive (None when persisted)."""
    if cache_dir:
        store_path = os.path.join(os.path.expanduser(cache_dir), f"{prefix}-{fp}.rlc")
        if os.path.exists(store_path):
            try:
                store = EpisodeStore(store_path)
                if store.meta.get("fingerprint") == fp:
                    store.verify()
                    return store, None, True
            except StoreError as exc:
                print(f"[robo-loaders] ignoring unusable cache {store_path} ({exc}); rebuilding")
    else:
        store_path = new_ram_path(fp)
    max_bytes = parse_bytes(max_memory, f"{option_prefix}.max_memory") if max_memory is not None else None
    workers = build_workers or min(8, os.cpu_count() or 1)
    writer = StoreWriter(store_path, codec, max_bytes=max_bytes, workers=workers)
    try:
        write(writer)
        writer.finish(dict(meta, fingerprint=fp))
    except BaseException:
        writer.abort()
        raise
    owner = None if cache_dir else RamFile(store_path)
    return EpisodeStore(store_path), owner, False


def summarize(store: EpisodeStore, n_episodes: int, n_samples: int, reused: bool) -> str:
    from robo_loaders_plugin.units import format_bytes

    st = store.stats
    ratio = st["decoded_frame_nbytes"] / st["compressed_nbytes"] if st["compressed_nbytes"] else float("nan")
    where = f"{'reused ' if reused else ''}{store.path}"
    codec = store.header.get("codec", {}).get("codec", "?")
    return (f"{n_episodes} episodes, {n_samples} samples, cache {format_bytes(store.file_nbytes)} "
            f"({codec}: frames {format_bytes(st['decoded_frame_nbytes'])} -> {format_bytes(st['compressed_nbytes'])}, "
            f"{ratio:.2f}x; low-dim {format_bytes(st['raw_nbytes'])}) at {where}")


def check_codec_options(codec, level, filter, max_memory, build_workers, option_prefix: str) -> FrameCodec:
    from robo_loaders_plugin.codecs.frames import CodecError
    from robo_loaders_plugin.spec import BackendOptionError

    try:
        frame_codec = FrameCodec(codec, level, filter)
        if max_memory is not None:
            parse_bytes(max_memory, f"{option_prefix}.max_memory")
    except (CodecError, ValueError) as exc:
        raise BackendOptionError(f"{option_prefix}: {exc}") from None
    if build_workers is not None and build_workers < 1:
        raise BackendOptionError(f"{option_prefix}.build_workers must be >= 1")
    return frame_codec
