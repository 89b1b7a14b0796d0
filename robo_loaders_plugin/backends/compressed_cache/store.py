"""``compressed_cache``'s frame store (``sdk.FrameStore``): every episode read (video decoded) once into one file
(``episode_store``: raw fields as they are, camera frames compressed one by one, a checksum per frame and per block
of raw rows) in the store's directory, mapped by every process that serves it; read by ``CompressedFrames``.

The SDK does the rest, as for any store: the footprint and where the store goes (RAM shared by the host's
processes, or the cache directory on disk: this store's own rule, ``placement``), the cache entry built once per
source and options, the records of the episodes' fields, the serving summary, pickling for workers, ``close()``.
"""

from __future__ import annotations

import os

from robo_loaders_plugin.backends.compressed_cache import placement
from robo_loaders_plugin.backends.compressed_cache.episode_store import FORMAT_VERSION
from robo_loaders_plugin.core.footprint import Footprint
from robo_loaders_plugin.core.units import format_bytes
from robo_loaders_plugin.sdk import FrameStore, Placement, PlaceRequest

STORE_FILE = "store.rlc"  # the one file of a store's directory (episode_store's format)


def store_file(directory: str) -> str:
    """The store file of a store's directory.

    Args:
        directory: The store's directory (a cache entry).

    Returns:
        Its path.
    """
    return os.path.join(directory, STORE_FILE)


def frame_codec(options):
    """The codec the options choose for camera frames (``storage.codec.FrameCodec``).

    Args:
        options: The backend's options (``codec``, ``level``, ``filter``).

    Returns:
        The codec.
    """
    from robo_loaders_plugin.storage.codec import FrameCodec

    return FrameCodec(options.codec, options.level, options.filter)


class CompressedStore(FrameStore):
    """Camera frames compressed losslessly (Blosc2, ``codec``/``level``/``filter``), every other field raw, in one
    mapped file; in RAM when it fits (``ram``), else on disk."""

    kind = f"compressed-cache-{FORMAT_VERSION}"  # the store file's format: a new one never opens an old entry
    ram = True
    thread_safe = True  # reads through the store's map; decodes into each call's own arrays (loader threads)

    def build(self, directory, episodes, options) -> None:
        """Every episode into the store file, camera frames compressed by ``build_workers`` threads.

        Args:
            directory: Where to write.
            episodes: What to store (the SDK's ``StoreEpisodes``: its ``guard`` stops a build on disk before the
                disk fills, its ``ram_budget`` one in RAM beyond ``max_memory``).
            options: The backend's options.

        Raises:
            MemoryBudgetExceeded: the store needs more than ``max_memory``.
            StoreError: the disk (or ``/dev/shm``) is full.
            core.footprint.ResourceRefused: the disk would fall below its reserve.
        """
        from tqdm.auto import tqdm

        from robo_loaders_plugin.backends.compressed_cache.episode_store import StoreWriter, drop_publish_lock
        from robo_loaders_plugin.core.progress import inner_bars_quiet

        path = store_file(directory)
        workers = options.build_workers or min(8, os.cpu_count() or 1)
        writer = StoreWriter(
            path, frame_codec(options), max_bytes=episodes.ram_budget, workers=workers, guard=episodes.guard
        )
        try:
            unit = episodes.size.unit
            for name, arrays in tqdm(
                episodes, total=len(episodes), desc=f"compressed_cache ({len(episodes)} {unit}s)", unit=unit,
                mininterval=0.5, disable=inner_bars_quiet(),
            ):  # fmt: skip
                writer.add_episode(name, arrays, [k for k in arrays if k in episodes.cameras])
            writer.finish({})
        except BaseException:
            writer.abort()
            raise
        drop_publish_lock(path)  # the entry's build lock, then its use lock, keep it from any sweep

    def open(self, directory, options):
        """The store file mapped (``CompressedFrames``).

        Args:
            directory: The store.
            options: The backend's options.

        Returns:
            Its ``CompressedFrames``.

        Raises:
            StoreError: the file is not a store of this format, or is damaged (naming it).
        """
        from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore
        from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames

        return CompressedFrames(EpisodeStore(store_file(directory)))

    def verify(self, directory) -> bool:
        """The data region's CRC32 (one sequential read of the file): run by the SDK on a store found in RAM, and
        once per version of a store on disk.

        Args:
            directory: The store.

        Returns:
            True when it holds.

        Raises:
            StoreError: the file is damaged, saying how (the SDK logs it and rebuilds the store).
        """
        from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore

        store = EpisodeStore(store_file(directory))
        try:
            store.verify()
        finally:
            store.close()
        return True

    def footprint(self, size, options) -> Footprint:
        """The store if no frame compressed at all (its worst case), the other fields counted in host RAM.

        Args:
            size: The dataset's sizes.
            options: The backend's options.

        Returns:
            The footprint of the store alone.
        """
        return Footprint(
            host_bytes=size.other_bytes,
            disk_bytes=size.store_upper_bytes(),
            build_s=size.build_seconds(options.codec, options.build_workers or min(8, os.cpu_count() or 1)),
            bound="every frame uncompressed",
        )

    def place(self, request: PlaceRequest, options) -> Placement:
        """This store's own rule (``placement.place``): RAM when its worst case fits, else on disk at the ratio a
        few sampled frames pack at.

        Args:
            request: What the SDK knows.
            options: The backend's options.

        Returns:
            The placement.
        """
        return placement.place(request, options)

    def key(self, options) -> dict:
        """The codec: the store's content depends on nothing else of the options (``max_memory``, ``loader``,
        ``build_workers`` and ``cache_dir`` change where or how it is built and served, not what it holds).

        Args:
            options: The backend's options.

        Returns:
            ``{"codec": ...}``.
        """
        return {"codec": frame_codec(options).as_dict()}

    def describe(self, frames, directory) -> str:
        """The store file's size and the frames' compression: ``cache 18.4 MB (lz4hc: frames 40.0 MB -> 18.2 MB,
        2.20x; low-dim 162.5 kB)``.

        Args:
            frames: Its ``CompressedFrames``.
            directory: The store.

        Returns:
            The phrase.
        """
        store = frames.store
        st = store.stats
        codec = store.header.get("codec", {}).get("codec", "?")
        if st["decoded_frame_nbytes"]:
            held = (
                f"{codec}: frames {format_bytes(st['decoded_frame_nbytes'])} -> "
                f"{format_bytes(st['compressed_nbytes'])}, {st['decoded_frame_nbytes'] / st['compressed_nbytes']:.2f}x"
            )
        else:  # no field of a camera's size: nothing was compressed as frames
            held = "no camera frames"
        return f"cache {format_bytes(store.file_nbytes)} ({held}; low-dim {format_bytes(st['raw_nbytes'])})"

    def alternatives(self, framework: str) -> tuple[str, ...]:
        """What fits when this store does not.

        Args:
            framework: ``robomimic`` or ``lerobot``.

        Returns:
            One phrase each.
        """
        return placement.ALTERNATIVES.get(framework, ())
