"""What a conversion into robo-shards will write, estimated from the source's metadata and the measured ratio of a
few of its frames, and the refusal before converting when the disk cannot take it (``robo-loaders convert`` and a
conversion on first use alike).

Why measured: how well frames pack is a property of the pixels (camera noise 1.25:1 channels first, renders 4:1),
so the fixed 1.5:1 assumption was 20% short for L480's camera noise and far over for renders; a few frames of the
source compressed as the shards will store them (``storage.frame_layout.sampled_ratio``) say it for this source.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from robo_loaders_plugin.core.data_size import EXPECTED_LOSSLESS_RATIO, DataSize
from robo_loaders_plugin.core.footprint import HEADROOM, OWN_LOADER, Available, Footprint
from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import format_bytes, plural

logger = get_logger(__name__)


def conversion_estimate(
    size: DataSize, *, video: bool, ratio: float = EXPECTED_LOSSLESS_RATIO, video_ratio: float = 20.0
) -> int:
    """Bytes a conversion into robo-shards will write: frames at ``ratio`` (lossless) or ``video_ratio`` (video
    members), everything else raw, plus tar headers (2,048 bytes per member: each camera and 8 more per episode).

    Args:
        size: The source's sizes.
        video: Camera frames are stored as video members (else lossless frames).
        ratio: The lossless compression ratio assumed.
        video_ratio: The video compression ratio assumed (decoded bytes / encoded).

    Returns:
        Bytes (an estimate; writers check the disk as they write).
    """
    frames = size.frame_bytes / (video_ratio if video else ratio)
    return int(frames + size.other_bytes + 2048 * (len(size.lengths) * (len(size.frame_step_bytes) + 8)))


def check_conversion_disk(
    size: DataSize,
    out_dir: str,
    *,
    video: bool,
    command: str,
    alternatives=(),
    option_prefix: str = "",
    ratio: float | Callable[[], float | None] | None = None,
    workers: int = 1,
) -> int:
    """Refuse a conversion into ``out_dir`` whose estimated output the disk cannot hold (with headroom, leaving the
    writers' reserve free: ``core.footprint.disk_reserve``), naming both sizes; what ``out_dir`` already holds (a
    conversion being resumed) is counted as written. First, one whose workers cannot hold their episodes in memory
    while each reads one whole (``DataSize.reading_bytes``: a 39 GiB demo failed with ``MemoryError`` mid-way).

    With a measurement to make (``ratio`` a function), what the output needs whatever the frames' ratio (frames
    packed to nothing) is checked first, so a disk that cannot hold even that is refused before any data is read;
    then a few frames are sampled and the estimate checked at their ratio.

    Args:
        size: The source's ``DataSize`` (from metadata).
        out_dir: The output directory (its nearest existing ancestor's filesystem is measured).
        video: Camera frames stored as video members (else lossless frames).
        command: What converts, for the message (``robo-loaders convert robomimic``, or a backend converting on
            first use).
        alternatives: What would fit instead of the output on this disk (the episodes read whole name their own:
            fewer workers, the framework's loader).
        option_prefix: How the user sets options, when a backend converts on first use.
        ratio: The lossless ratio measured on sampled frames (``storage.frame_layout.sampled_ratio``), or a function
            measuring it (called only for lossless frames, after the first check); ``None`` (or a function returning
            it): :data:`~robo_loaders_plugin.core.data_size.EXPECTED_LOSSLESS_RATIO` assumed.

        workers: Processes converting at once, each reading one episode.

    Returns:
        The estimated bytes still to write.

    Raises:
        core.footprint.ResourceRefused: the output does not fit, or the episodes being read do not.
    """
    from robo_loaders_plugin.core.footprint import check_fits
    from robo_loaders_plugin.storage.cache import path_bytes

    done = path_bytes(out_dir) if os.path.isdir(out_dir) else 0
    available = Available.measure(disk_dir=out_dir)
    reading = size.reading_bytes() * max(1, int(workers))
    if reading:
        longest = int(np.argmax(size.lengths))
        each = "each worker reads" if workers > 1 else "the conversion reads"
        check_fits(
            Footprint(
                host_bytes=reading,
                bound=f"{plural(max(1, int(workers)), 'worker')} at once; {each} a {size.unit} whole: the largest "
                f"({int(size.lengths[longest])} steps) is {format_bytes(size.reading_bytes())} decoded",
            ),
            available,
            backend=command,
            option_prefix=option_prefix,
            alternatives=_reading_alternatives(size, workers, available),
            subject=f"{command} cannot convert into {out_dir}",
        )

    def check(need: int, kind: str, about: str = "about") -> None:
        bound = (
            f"{size.describe()}; the shards ({kind}) need {about} {format_bytes(need)} more in {out_dir}; the "
            "conversion stops before the disk runs out"
        )
        check_fits(
            Footprint(disk_bytes=need, disk_dir=out_dir, bound=bound),
            available,
            backend=command,
            option_prefix=option_prefix,
            alternatives=alternatives,
            subject=f"{command} cannot write {out_dir}",
        )

    if callable(ratio):
        if not video:  # what no ratio makes smaller, before any frame is read
            least = max(0, conversion_estimate(size, video=False, ratio=math.inf) - done)
            check(least, "lossless frames, however well they pack", "at least")
        ratio = ratio() if not video else None
    measured = ratio is not None
    ratio = ratio if measured else EXPECTED_LOSSLESS_RATIO
    need = max(0, conversion_estimate(size, video=video, ratio=ratio) - done)
    at = f"{ratio:.2f}:1, measured on sampled frames" if measured else f"an assumed {ratio}:1"
    check(need, "video members" if video else f"lossless frames at {at}")
    worst = max(0, conversion_estimate(size, video=video, ratio=1.0) - done)
    if not video and available.disk_bytes is not None and worst > HEADROOM * available.disk_usable:
        # the estimate fits, frames that do not compress would not (camera noise: L480 packed 1.25:1, not 1.5:1)
        kept = f" less the {format_bytes(available.disk_reserve)} kept free" if available.disk_reserve else ""
        logger.warning(
            f"{command}: {out_dir} has room for the estimate ({format_bytes(need)}, frames at "
            f"{at}) but not for frames that do not compress ({format_bytes(worst)}, "
            f"{format_bytes(available.disk_bytes)} free{kept}); if it runs short the conversion stops "
            "with both sizes before the disk is full, keeping its completed work units for the same "
            "command to resume"
        )
    return need


def _reading_alternatives(size: DataSize, workers: int, available: Available) -> list[str]:
    """What would fit when the episodes being read whole do not: fewer workers (when one alone could), else the
    framework's own loader. Why not the caller's alternatives: they name other backends, which read episodes whole
    too (a reviewer's reading: a refused 39 GiB demo named two backends that would not fit either)."""
    one = size.reading_bytes()
    fewer = []
    if workers > 1 and available.fits_host(one):
        fewer = [f"fewer conversion workers (each reads up to {format_bytes(one)} at once)"]
    return [*fewer, OWN_LOADER]
