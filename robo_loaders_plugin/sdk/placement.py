"""Where a frame store's files go (the host's RAM or the cache directory on disk) and what serving it needs there,
decided from the dataset's sizes and the machine before any data is read.

Why the SDK decides it for every store: a store built in RAM and shared by the host's processes is the fastest
place for it (``lerobot-train`` under torchrun starts one process per GPU: one copy for all of them, mapped), but
only when it fits; one that does not must go to disk, saying why, rather than fill ``/dev/shm`` and starve every
other process that writes there. A store says whether it may live in RAM (:attr:`FrameStore.ram`) and how much it
writes (:meth:`FrameStore.footprint`); the rule below does the rest, and a store with its own rule (one that
estimates its compressed size from a few sampled frames) overrides :meth:`FrameStore.place`.

Light to import (a plugin's registration imports the SDK): nothing but the footprint contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from robo_loaders_plugin.core.footprint import HEADROOM, Available, Footprint, Planned
from robo_loaders_plugin.core.in_flight import BatchesInFlight
from robo_loaders_plugin.core.units import format_bytes

if TYPE_CHECKING:
    from robo_loaders_plugin.core.data_size import DataSize

# what a store writes per array (an episode's field) beyond its bytes, in the default footprint: a header (numpy's
# .npy header is 128 bytes, a zip member's ~150 more) and its line in the entry's manifest
ARRAY_OVERHEAD = 512


@dataclasses.dataclass(frozen=True)
class PlaceRequest:
    """What the SDK knows when it places a store, from metadata only.

    Attributes:
        size: The dataset's sizes (steps per episode, bytes per step of frames and other fields).
        available: What the machine has for this store (measured, less what other datasets of a mixture hold);
            its ``disk_dir`` is the cache root a store on disk goes to.
        batches: The batches in flight beside the store (host RAM, wherever the store goes).
        reusable: A complete store of this source and options is in the cache directory already (nothing new to
            write there).
        backend: The backend's name, for messages.
        framework: ``robomimic`` or ``lerobot``.
        option_prefix: How the user sets the backend's options, for messages.
        sample_frames: Returns a few camera frames of the dataset, as served (what a store measures its codec's
            ratio on); ``None`` where nothing may be read (a mixture's plan, from metadata only).
        reusable_in_ram: A complete store of this source and options is in this user's RAM directory already
            (another run of the host built it and holds it: placed there, it takes nothing new).
    """

    size: DataSize
    available: Available
    batches: BatchesInFlight
    reusable: bool = False
    backend: str = ""
    framework: str = ""
    option_prefix: str = ""
    sample_frames: Callable[[], list] | None = dataclasses.field(default=None, repr=False)
    reusable_in_ram: bool = False


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a store goes and what serving it needs there.

    Attributes:
        in_ram: In this user's RAM directory (``$ROBO_LOADERS_RAM_DIR``, else ``/dev/shm``: shared by the
            host's processes, removed with its last user); else in the cache directory on disk.
        footprint: What serving needs placed so, the batches in flight included (``disk_dir``: the cache root
            of a store on disk), with the phrase of its bound.
        spilled: Why a store that may live in RAM goes to disk (empty: it was not spilled), for the log.
    """

    in_ram: bool
    footprint: Footprint
    spilled: str = ""


def default_footprint(size: DataSize) -> Footprint:
    """What a store that keeps every non-frame field in RAM and writes every field uncompressed needs: an upper
    bound for a store that writes each field once (compressed or not), headers included.

    Args:
        size: The dataset's sizes.

    Returns:
        The store's footprint (without the batches in flight, which the SDK adds).
    """
    arrays = len(size.lengths) * (len(size.frame_step_bytes) + max(1, size.other_fields))
    return Footprint(
        host_bytes=size.other_bytes,
        disk_bytes=size.frame_bytes + size.other_bytes + ARRAY_OVERHEAD * arrays,
        build_s=size.build_seconds("lz4", 1),
        bound="frames read from the store's files per batch, other fields in RAM",
    )


def place_by_rule(footprint: Footprint, request: PlaceRequest, options: Any, ram: bool) -> Placement:
    """The SDK's placement of a store whose files take at most ``footprint.disk_bytes``: in RAM when the store may
    live there (``ram``), no ``cache_dir`` is given, and its files fit the backend's ``max_memory`` (when it
    declares one), the RAM directory and the host's memory beside what it holds; else on disk, in ``cache_dir`` or
    the default cache root.

    Args:
        footprint: What the store states (:meth:`FrameStore.footprint`): its files (``disk_bytes``, an upper
            bound) and what it holds in host RAM.
        request: What is known (:class:`PlaceRequest`).
        options: The backend's resolved options (``cache_dir``, and ``max_memory`` when declared).
        ram: Whether the store may live in RAM.

    Returns:
        The :class:`Placement`.
    """
    batches, available = request.batches, request.available
    host = footprint.host_bytes + batches.host_bytes
    files = footprint.disk_bytes
    flying = f"; plus {batches.describe()}"
    limit = getattr(options, "max_memory", None)
    spilled = ""
    if ram and getattr(options, "cache_dir", None) is None:
        if (limit is None or files <= limit) and request.reusable_in_ram:  # another run's, taken as it is
            bound = (
                f"{footprint.bound}; its files in RAM in {available.shm_dir}, built and held by another run of "
                f"this host, shared{flying}"
            )
            return Placement(True, dataclasses.replace(footprint, host_bytes=host, disk_bytes=0, bound=bound))
        if (limit is None or files <= limit) and available.fits_shm(files, host):
            bound = (
                f"{footprint.bound}; its files in RAM, at most {format_bytes(files)} in {available.shm_dir}, "
                f"shared by the host's processes{flying}"
            )
            ram_fp = dataclasses.replace(footprint, host_bytes=host, shm_bytes=files, disk_bytes=0, bound=bound)
            return Placement(True, ram_fp)
        if limit is not None and files > limit:
            spilled = (
                f"{request.option_prefix}.max_memory={format_bytes(limit)} cannot hold up to {format_bytes(files)}"
            )
        else:
            spilled = (
                f"{available.shm_dir} ({format_bytes(available.shm_bytes or 0)} free) and the host's memory "
                f"({format_bytes(available.host_bytes)} available) cannot hold up to {format_bytes(files)} with "
                f"{1 - HEADROOM:.0%} to spare"
            )
    disk_fp = dataclasses.replace(
        footprint,
        host_bytes=host,
        disk_bytes=0 if request.reusable else files,
        disk_dir=available.disk_dir,
        build_s=None if request.reusable else footprint.build_s,
        bound=f"{footprint.bound}; its files in {available.disk_dir}{flying}",
    )
    return Placement(False, disk_fp, spilled)


def planned(placement: Placement, available: Available, alternatives, batches: BatchesInFlight) -> Planned:
    """A store's placement as ``BackendSpec.footprints`` gives it to a mixture: what stays held beside the other
    components is the store, not the batches in flight (a mixture's batches are counted once, not once per
    component).

    Args:
        placement: The store's :class:`Placement` (its footprint with ``batches``).
        available: The machine as measured (before other components' share was taken off).
        alternatives: What would fit instead, one phrase each.
        batches: The batches in flight the placement counted.

    Returns:
        A ``core.footprint.Planned``.
    """
    fp = placement.footprint
    held = dataclasses.replace(fp, host_bytes=fp.host_bytes - batches.host_bytes)
    return Planned(fp, available, tuple(alternatives), held)
