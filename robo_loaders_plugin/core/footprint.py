"""What a backend will need from the machine, estimated before any data is read, and the one check against what
the machine has (the footprint contract, part of the backend contract).

Why before any data is read: a backend that holds every episode in RAM, a cache that fills ``/dev/shm`` or a
conversion that fills the disk fails hours into a run, or worse takes other processes down with it (the OOM killer
picks whoever is biggest; a full ``/dev/shm`` or disk starves everything that writes there). The sizes that matter
are known from the source's metadata alone (HDF5 dataset shapes and dtypes, LeRobot's ``meta/info.json`` features
and frame counts), so a factory computes its :class:`Footprint` from them, measures :class:`Available`, and calls
:func:`check_fits` before it opens a single array. It then either serves within the bound it states
(:attr:`Footprint.bound`, in its log line) or refuses with one line naming, for every resource that does not fit,
what it needs and what the machine has, and what would fit instead.

Headroom: a resource "fits" when the need is at most :data:`HEADROOM` (90%) of what is available, so that the rest
of the machine (the training process itself, the page cache, other users of ``/dev/shm``) keeps room.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import Iterable

from robo_loaders_plugin.core.errors import RoboLoadersError
from robo_loaders_plugin.core.units import format_bytes

HEADROOM = 0.9  # a resource fits when the need is at most this fraction of what is available
# what fits when nothing of a backend can hold a dataset's unit (an episode read whole, two units buffered): the
# framework's loader reads windows, not units
OWN_LOADER = "the framework's own loader (no backend), which reads windows from the files"
MIN_DISK_RESERVE = 10**9  # writers leave at least 1 GB (2% of the filesystem when larger) free: disk_reserve

# rough rates of this project's operations per core (docs/scale.md has the measured ones): for the build-time
# estimate only, never for a decision
COMPRESS_MB_S = {"lz4": 500.0, "lz4hc": 60.0, "zstd": 40.0, "blosclz": 180.0}  # Blosc2 encode, level 5
READ_MB_S = 400.0  # sequential file read
DECODE_MPIX_S = 90.0  # video decode (AV1/H.264, 480p), megapixels per second per core


class ResourceRefused(RoboLoadersError):
    """A backend refused before reading data: what it needs does not fit what the machine has.

    Attributes:
        shortfalls: ``[(resource, needed bytes, available bytes)]`` of every resource that does not fit.
    """

    def __init__(self, message: str, shortfalls: list[tuple[str, int, int]]):
        super().__init__(message)
        self.shortfalls = shortfalls


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What a backend will hold or write while it serves one dataset, estimated from metadata.

    Attributes:
        host_bytes: Host RAM the backend holds while serving (its tensors, buffers, decoded episodes), beyond what
            the interpreter and the framework take anyway.
        shm_bytes: Bytes it puts in ``/dev/shm`` (a RAM file shared by the host's processes; RAM too).
        device_bytes: GPU memory it holds.
        disk_bytes: Bytes it will write to disk (a cache file, converted shards), in :attr:`disk_dir`.
        disk_dir: Where those bytes go (``None`` when nothing is written).
        build_s: Estimated seconds to build or convert before the first batch (``None``: nothing to build).
        bound: One line saying how the backend stays within this footprint, whatever the dataset's size (for its
            log line).
    """

    host_bytes: int = 0
    shm_bytes: int = 0
    device_bytes: int = 0
    disk_bytes: int = 0
    disk_dir: str | None = None
    build_s: float | None = None
    bound: str = ""

    def describe(self) -> str:
        """The footprint in one phrase: ``host RAM 1.2 GB, /dev/shm 4.0 GB, disk 38.0 GB in /x, build ~12 min``."""
        parts = [f"host RAM {format_bytes(self.host_bytes)}"]
        if self.shm_bytes:
            parts.append(f"/dev/shm {format_bytes(self.shm_bytes)}")
        if self.device_bytes:
            parts.append(f"GPU {format_bytes(self.device_bytes)}")
        if self.disk_bytes:
            parts.append(f"disk {format_bytes(self.disk_bytes)} in {self.disk_dir}")
        if self.build_s:
            parts.append(f"build ~{format_seconds(self.build_s)}")
        return ", ".join(parts)

    def __add__(self, other: Footprint) -> Footprint:
        """Two footprints held at once (a mixture's components): every resource summed, the first disk directory,
        the build times summed; no bound (each part states its own).

        Args:
            other: The other footprint.

        Returns:
            The sum.
        """
        builds = [s for s in (self.build_s, other.build_s) if s is not None]
        return Footprint(
            host_bytes=self.host_bytes + other.host_bytes,
            shm_bytes=self.shm_bytes + other.shm_bytes,
            device_bytes=self.device_bytes + other.device_bytes,
            disk_bytes=self.disk_bytes + other.disk_bytes,
            disk_dir=self.disk_dir or other.disk_dir,
            build_s=sum(builds) if builds else None,
        )


def peak(a: Footprint, b: Footprint) -> Footprint:
    """The larger of two footprints, resource by resource (what a machine must hold for either of two moments).

    Args:
        a: One footprint.
        b: The other.

    Returns:
        Each resource's maximum (``a``'s disk directory unless it has none).
    """
    return Footprint(
        host_bytes=max(a.host_bytes, b.host_bytes),
        shm_bytes=max(a.shm_bytes, b.shm_bytes),
        device_bytes=max(a.device_bytes, b.device_bytes),
        disk_bytes=max(a.disk_bytes, b.disk_bytes),
        disk_dir=a.disk_dir or b.disk_dir,
        build_s=a.build_s if b.build_s is None else b.build_s if a.build_s is None else max(a.build_s, b.build_s),
    )


def total(footprints: Iterable[Footprint]) -> Footprint:
    """Footprints held at once, summed (:meth:`Footprint.__add__`; an empty one for none).

    Args:
        footprints: The parts.

    Returns:
        Their sum.
    """
    out = Footprint()
    for fp in footprints:
        out = out + fp
    return out


def format_seconds(s: float) -> str:
    """A duration as people read it in a log line: ``42 s``, ``12 min``, ``2.5 h``.

    Args:
        s: Seconds.

    Returns:
        Whole seconds below 90 s, whole minutes below 90 min, else hours with one decimal.
    """
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@functools.lru_cache(maxsize=64)
def _is_ram_fs(path: str) -> bool:
    """Whether ``path`` is on a tmpfs/ramfs (its pages are RAM), from /proc/mounts (False when unknown).

    Why kept per path for the process: a mixture's start measures the machine (:meth:`Available.measure`) three
    times per component, and reading /proc/mounts was ~0.08 ms of each 0.29 ms measure (0.1 s at 400
    components); the filesystem a directory is on does not change under a run (free space and memory, which do,
    are measured every time)."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", ""
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    mount = parts[1].replace("\\040", " ")
                    if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                        best, fstype = mount, parts[2]
        return fstype in ("tmpfs", "ramfs")
    except OSError:
        return False


def _existing(path: str) -> str:
    """The nearest existing ancestor of ``path`` (a cache directory may not exist yet)."""
    path = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


@dataclasses.dataclass(frozen=True)
class Available:
    """What the machine has now, measured.

    Attributes:
        host_bytes: Memory available to new allocations without swapping (``psutil``'s ``available``).
        shm_bytes: Free bytes in the RAM-file directory (``None``: not measured).
        shm_dir: That directory (``/dev/shm`` or ``$ROBO_LOADERS_RAM_DIR``).
        shm_is_ram: Whether that directory is RAM (a tmpfs), so its bytes also come out of :attr:`host_bytes`.
        disk_bytes: Free bytes in :attr:`disk_dir` (``None``: not measured).
        disk_dir: The directory a backend would write to.
        disk_reserve: Bytes the writers leave free on that filesystem (:func:`disk_reserve`; 0: none counted).
            Counted here because every writer stops at it (:class:`DiskGuard`): an estimate that ignored it passed
            on a disk smaller than the reserve, then the writer stopped after 0 B.
        device_bytes: Free memory of the GPU (``None``: no CUDA device measured).
        device: That device.
    """

    host_bytes: int
    shm_bytes: int | None = None
    shm_dir: str | None = None
    shm_is_ram: bool = True
    disk_bytes: int | None = None
    disk_dir: str | None = None
    disk_reserve: int = 0
    device_bytes: int | None = None
    device: str | None = None

    @classmethod
    def measure(cls, disk_dir: str | None = None, device=None, shm_dir: str | None = None) -> Available:
        """Measure the machine now.

        Args:
            disk_dir: The directory the backend would write to (its nearest existing ancestor is measured).
            device: A CUDA ``torch.device`` to measure (``None`` or a CPU device: no GPU measured).
            shm_dir: The RAM-file directory (default: ``$ROBO_LOADERS_RAM_DIR``, else ``/dev/shm``, else the temp dir).

        Returns:
            The measured :class:`Available`.
        """
        import psutil

        from robo_loaders_plugin.core.paths import default_shm_dir

        shm_dir = shm_dir or default_shm_dir()
        try:
            shm_free = shutil.disk_usage(_existing(shm_dir)).free
        except OSError:
            shm_free = None
        disk_free, reserve = None, 0
        if disk_dir is not None:
            disk_dir = os.path.abspath(os.path.expanduser(disk_dir))
            try:
                disk_free, reserve = shutil.disk_usage(_existing(disk_dir)).free, disk_reserve(disk_dir)
            except OSError:
                disk_free, reserve = None, 0
        device_free = None
        if device is not None and getattr(device, "type", str(device)).startswith("cuda"):
            import torch

            device_free = int(torch.cuda.mem_get_info(device)[0])
        return cls(
            host_bytes=int(psutil.virtual_memory().available),
            shm_bytes=shm_free,
            shm_dir=shm_dir,
            shm_is_ram=_is_ram_fs(shm_dir),
            disk_bytes=disk_free,
            disk_dir=disk_dir,
            disk_reserve=reserve,
            device_bytes=device_free,
            device=None if device is None else str(device),
        )

    def fits_host(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more of host RAM fits (with headroom).

        Args:
            nbytes: Bytes the backend would hold.

        Returns:
            ``nbytes`` is at most :data:`HEADROOM` of :attr:`host_bytes`.
        """
        return nbytes <= HEADROOM * self.host_bytes

    def fits_shm(self, nbytes: int, host_bytes: int = 0) -> bool:
        """Whether a RAM file of ``nbytes`` fits the RAM-file directory and, when it is RAM, the host's memory
        together with ``host_bytes`` the backend also holds (with headroom).

        Args:
            nbytes: Size of the RAM file.
            host_bytes: Host RAM the backend holds besides it.

        Returns:
            False also when the directory's free space was not measured.
        """
        if self.shm_bytes is None or nbytes > HEADROOM * self.shm_bytes:
            return False
        return not self.shm_is_ram or self.fits_host(nbytes + host_bytes)

    @property
    def disk_usable(self) -> int | None:
        """Free bytes a writer may use in :attr:`disk_dir`: the free space less :attr:`disk_reserve` (``None``: not
        measured)."""
        return None if self.disk_bytes is None else max(0, self.disk_bytes - self.disk_reserve)

    def fits_disk(self, nbytes: int) -> bool:
        """Whether ``nbytes`` fit the disk directory (with headroom), leaving the writers' reserve free.

        Args:
            nbytes: Bytes the backend would write.

        Returns:
            ``nbytes`` is at most :data:`HEADROOM` of :attr:`disk_usable`; False also when the disk was not measured.
        """
        usable = self.disk_usable
        return usable is not None and nbytes <= HEADROOM * usable

    def less(self, committed: Footprint) -> Available:
        """What is left for one more footprint once ``committed`` is held, so that a footprint fits what is left
        exactly when it fits together with ``committed`` (each resource is reduced by ``committed / HEADROOM``:
        the headroom is kept once for the whole, not once per part).

        Why: a mixture plans its components one after the other before building any, each by its backend's own
        rule (a store that RAM cannot hold goes to disk, tiers fill what memory is left), as each would be planned
        once the earlier ones were built; the sum then fits the machine when every part fits what is left.

        Args:
            committed: What earlier parts hold (``Footprint()``: nothing; this object is returned as it is).

        Returns:
            The reduced :class:`Available` (never below 0).
        """

        def left(have: int | None, need: int) -> int | None:
            return None if have is None else max(0, int(have - need / HEADROOM))

        host = committed.host_bytes + (committed.shm_bytes if self.shm_is_ram else 0)
        return dataclasses.replace(
            self,
            host_bytes=left(self.host_bytes, host) or 0,
            shm_bytes=left(self.shm_bytes, committed.shm_bytes),
            device_bytes=left(self.device_bytes, committed.device_bytes),
            disk_bytes=left(self.disk_bytes, committed.disk_bytes),
        )


@dataclasses.dataclass(frozen=True)
class Planned:
    """A backend's plan for one dataset, before any data is read (``BackendSpec.footprints``): what it will need,
    what the machine had when it was planned, and what would fit instead.

    Attributes:
        footprint: What the backend will need for the dataset.
        available: What the machine has, as measured (before any reduction for other datasets).
        alternatives: What would fit instead (the backend's own refusal names them), one phrase each.
        held: What stays held once the dataset is built, when less than :attr:`footprint` (a buffer used only while
            building is given back); ``None``: all of it.
    """

    footprint: Footprint
    available: Available
    alternatives: tuple[str, ...] = ()
    held: Footprint | None = None

    @property
    def kept(self) -> Footprint:
        """What stays held once built (:attr:`held`, else :attr:`footprint`)."""
        return self.footprint if self.held is None else self.held


def shortfalls(footprint: Footprint, available: Available) -> list[tuple[str, int, int]]:
    """``[(resource, needed, available)]`` of every resource ``footprint`` does not fit (with headroom).

    A RAM file counts twice when its directory is RAM: against that directory's free space and, with the host
    bytes, against the host's memory. A resource needed but not measured (no RAM-file directory, no CUDA device,
    no disk) does not fit, with 0 available.

    Args:
        footprint: What the backend will need.
        available: What the machine has.

    Returns:
        The shortfalls, empty when everything fits; resources are named for the message (``host RAM``,
        ``RAM files (<dir>)``, ``GPU memory (<device>)``, ``disk (<dir>)``; the disk's available bytes are its free
        space less the writers' reserve, said in its name).
    """
    out = []
    host = footprint.host_bytes + (footprint.shm_bytes if available.shm_is_ram else 0)
    if host and not available.fits_host(host):
        what = "host RAM" + (" (incl. /dev/shm)" if footprint.shm_bytes and available.shm_is_ram else "")
        out.append((what, host, available.host_bytes))
    if footprint.shm_bytes and (available.shm_bytes is None or footprint.shm_bytes > HEADROOM * available.shm_bytes):
        out.append((f"RAM files ({available.shm_dir})", footprint.shm_bytes, available.shm_bytes or 0))
    if footprint.device_bytes and (
        available.device_bytes is None or footprint.device_bytes > HEADROOM * available.device_bytes
    ):
        out.append(
            (
                f"GPU memory ({available.device or 'no CUDA device'})",
                footprint.device_bytes,
                available.device_bytes or 0,
            )
        )
    if footprint.disk_bytes and not available.fits_disk(footprint.disk_bytes):
        kept = (
            f"; {format_bytes(available.disk_bytes)} free less the {format_bytes(available.disk_reserve)} "
            "robo-loaders leaves free"
            if available.disk_reserve and available.disk_bytes is not None
            else ""
        )
        out.append(
            (
                f"disk ({footprint.disk_dir or available.disk_dir}{kept})",
                footprint.disk_bytes,
                available.disk_usable or 0,
            )
        )
    return out


def check_fits(
    footprint: Footprint,
    available: Available,
    *,
    backend: str,
    option_prefix: str,
    alternatives: Iterable[str] | str = (),
    subject: str | None = None,
) -> None:
    """Refuse, before any data is read, a footprint the machine cannot hold.

    Args:
        footprint: What the backend will need (from metadata).
        available: What the machine has (:meth:`Available.measure`).
        backend: The backend's name, for the message.
        option_prefix: How the user sets the backend's options (``train.data_backend_kwargs``,
            ``--dataset.backend_kwargs``), for the message.
        alternatives: What would fit instead (a backend, or an option value), one phrase each.
        subject: What refuses, when it is not a backend serving a dataset (e.g. ``robo-loaders convert``).

    Raises:
        ResourceRefused: one line: for every resource that does not fit, needed vs available (and the 90%
            limit), then what would fit, and that nothing was read.
    """
    missing = shortfalls(footprint, available)
    if not missing:
        return
    alternatives = [alternatives] if isinstance(alternatives, str) else [a for a in alternatives if a]
    needs = "; ".join(
        f"{what}: needs {format_bytes(need)}, {format_bytes(have)} available (at most "
        f"{HEADROOM:.0%} = {format_bytes(HEADROOM * have)} may be used)"
        for what, need, have in missing
    )
    would = f" Would fit: {'; '.join(alternatives)}." if alternatives else ""
    bound = f" ({footprint.bound})" if footprint.bound else ""
    subject = subject or f"backend {backend!r} cannot serve this dataset on this machine"
    options = f" (options: {option_prefix})" if option_prefix else ""
    raise ResourceRefused(
        f"{subject}{bound}: {needs}.{would} Estimated from the dataset's metadata before reading any data{options}.",
        missing,
    )


def estimate_seconds(
    *,
    read_bytes: float = 0,
    compress_bytes: float = 0,
    codec: str = "lz4hc",
    decode_pixels: float = 0,
    workers: int = 1,
) -> float:
    """A rough build time from the bytes read, compressed and the video pixels decoded (rates per core above,
    ``workers`` cores), for the footprint's log line and message only, never for a decision.

    Args:
        read_bytes: Bytes read from the source (one reader: not divided by ``workers``).
        compress_bytes: Bytes compressed with ``codec``.
        codec: The Blosc2 codec (an unknown one is taken at lz4hc's rate).
        decode_pixels: Video pixels decoded.
        workers: Cores compressing and decoding (capped at the machine's CPU count, at least 1).

    Returns:
        Seconds.
    """
    w = max(1, min(int(workers), os.cpu_count() or 1))
    s = read_bytes / (READ_MB_S * 1e6)
    s += compress_bytes / (COMPRESS_MB_S.get(codec, 60.0) * 1e6 * w)
    s += decode_pixels / (DECODE_MPIX_S * 1e6 * w)
    return s


def disk_reserve(path: str) -> int:
    """Bytes a writer leaves free on the filesystem of ``path``: a build stops, removes its partial output and says
    so, rather than fill the disk others write to.

    Args:
        path: A path on the filesystem (its nearest existing ancestor is measured).

    Returns:
        2% of the filesystem's total size, at least :data:`MIN_DISK_RESERVE` (1 GB, decimal as every size printed).

    Raises:
        OSError: the filesystem cannot be measured.
    """
    total = shutil.disk_usage(_existing(path)).total
    return max(MIN_DISK_RESERVE, int(0.02 * total))


class DiskGuard:
    """Stops a writer before the filesystem it writes to falls below :func:`disk_reserve`.

    Why: the footprint's disk estimate assumes a compression ratio (lossless frames of camera images compress
    1.5-3x; the metadata cannot say which), so a build checks as it writes, and a source that compresses worse
    than estimated stops with both sizes instead of filling the disk.

    Args:
        path: A file or directory on the filesystem written to.
        what: What is being written, for the message.
        estimate: The footprint's estimate of the total, for the message (``None``: not mentioned).
        leftover: What happens to the partial output, for the message.
    """

    def __init__(
        self, path: str, what: str, estimate: int | None = None, leftover: str = "The partial output is removed."
    ):
        self.dir = _existing(os.path.dirname(os.path.abspath(path)) if not os.path.isdir(path) else path)
        self.what, self.estimate, self.leftover = what, estimate, leftover
        self.reserve = disk_reserve(self.dir)

    def check(self, more: int, written: int = 0) -> None:
        """Raise before ``more`` bytes are written when they would leave less than the reserve free.

        Args:
            more: Bytes about to be written (an upper bound is fine).
            written: Bytes written so far (for the message).

        Raises:
            ResourceRefused: naming what was written, the estimate and the space left.
        """
        free = shutil.disk_usage(self.dir).free
        if free - more < self.reserve:
            est = f" (estimated {format_bytes(self.estimate)} in all)" if self.estimate else ""
            # the estimate counts the reserve (Available.disk_reserve): below it already, the disk filled since
            why = (
                "the disk filled since the estimate"
                if free < self.reserve
                else "the data compresses worse than estimated, or the disk filled meanwhile"
            )
            raise ResourceRefused(
                f"{self.what}: stopped after {format_bytes(written)}{est}: {self.dir} has "
                f"{format_bytes(free)} free and robo-loaders leaves {format_bytes(self.reserve)} free for the rest of "
                f"the machine ({why}). "
                f"{self.leftover} Free space, choose a directory on a larger disk, or a backend that writes nothing "
                "(one that reads its source where it lies: 'robo-loaders list' describes each)",
                [("disk", written + more, free)],
            )
