"""The ``compressed_cache`` backend: each episode read (video decoded) once, camera frames kept lossless-compressed in
one store shared by the host's processes, in RAM or file-backed on local disk.

A frame store served by the SDK (``sdk.frame_backend``), as a third party's would be: this module is the plugin the
``robo_loaders`` entry point ``compressed_cache`` names, with its spec and options; ``store.py`` is the store (how it
is written, checked and read: ``episode_store.py``, ``frames.py``) and ``placement.py`` where it goes. It imports
nothing heavy (no torch, no Blosc2, no framework): listing backends imports it, and the store only when a dataset
is built.
"""

from __future__ import annotations

from robo_loaders_plugin.core.codecs import CODECS, DEFAULT_CODEC, DEFAULT_FILTER, FILTERS
from robo_loaders_plugin.core.hookspecs import hookimpl
from robo_loaders_plugin.core.options import Option, check_size, to_bytes
from robo_loaders_plugin.core.shared_options import check_writable_dir
from robo_loaders_plugin.core.spec import INDEXED, SAMPLE, BackendSpec
from robo_loaders_plugin.sdk import frame_backend

COMPRESSED_CACHE_OPTIONS = {
    "codec": Option(str, DEFAULT_CODEC, "Blosc2 codec for camera frames (docs/codecs.md)", choices=CODECS),
    "level": Option(int, 5, "compression level", min=0, max=9),
    "filter": Option(str, DEFAULT_FILTER, "Blosc2 filter", choices=FILTERS),
    "max_memory": Option(
        (float, str),
        None,
        "RAM the cache may take (bytes, '2GB', '512MiB'); a cache that may not "
        "fit it, or /dev/shm, is kept file-backed in the cache directory on "
        "disk instead (mapped, byte-identical; the log says so)",
        check=check_size,
        convert=to_bytes,
    ),
    "cache_dir": Option(
        str,
        None,
        "persist the cache in this cache directory and reuse it while the source and "
        "options are unchanged (default: the default cache directory, see keep)",
        per_host=True,
        check=check_writable_dir,
    ),
    "keep": Option(
        bool,
        True,
        "without cache_dir: keep the cache file-backed in the default cache directory and reuse it "
        "at the next start, when the disk has room for it uncompressed within the cache's size limit "
        "(else in RAM); false: in RAM (/dev/shm) when it fits, rebuilt every run",
    ),
    "build_workers": Option(
        int, None, "threads compressing frames while building (default: number of CPUs, max 8)", min=1, max=256
    ),
    "loader": Option(
        str,
        "threads",
        "'threads': num_data_workers threads build whole batches in the training "
        "process (no worker processes, no collate copy); 'dataloader': the framework's DataLoader "
        "(the default on LeRobot where image transforms are enabled: they then draw from its "
        "workers' RNG, as LeRobot's do)",
        choices=("threads", "dataloader"),
        random_items_defaults={"lerobot": "dataloader"},
        kinds={"threads": INDEXED, "dataloader": SAMPLE},
    ),
}


def _compressed_cache_constraints(options) -> None:
    """``keep: false`` (a RAM store rebuilt every run) beside ``cache_dir`` (a store kept there) asks for both: the
    store was kept in ``cache_dir`` and ``keep`` dropped without a word (a reviewer's find)."""
    if options.cache_dir and options.keep is False:
        raise ValueError(
            "keep false (a store in RAM, rebuilt every run) and cache_dir (a store kept in that directory) ask for "
            "two different stores: leave keep out to keep it in cache_dir, or cache_dir out for the RAM store"
        )


SPEC = frame_backend(
    "compressed_cache",
    "robo_loaders_plugin.backends.compressed_cache.store:CompressedStore",
    description="each episode read (video decoded) once; camera frames kept lossless-compressed in one store "
    "shared by the host's processes: by default a file on local disk in the cache directory, mapped and reused by "
    "later runs; with keep false, or no room for it uncompressed on disk within the cache's size limit, a RAM file "
    "(/dev/shm) rebuilt every run (file-backed on disk when RAM cannot hold it either)",
    # threads build the batches; on LeRobot with image transforms its DataLoader's workers stay in charge (the
    # loader option's default there: the transforms draw from the workers' RNG)
    kind=INDEXED,
    options=COMPRESSED_CACHE_OPTIONS,
    constraints=_compressed_cache_constraints,
)


@hookimpl
def robo_loaders_backends() -> list[BackendSpec]:
    """This plugin's backend (``core.hookspecs``).

    Returns:
        ``[SPEC]``.
    """
    return [SPEC]
