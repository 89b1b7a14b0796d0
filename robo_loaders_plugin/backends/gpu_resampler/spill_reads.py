"""Reading a batch's frames from ``gpu_resampler``'s compressed tier spilled to disk: whole blobs, in the file's
order, adjacent ones in one read, all of them announced to the kernel before the first is waited on.

Read frame by frame through a mapping in the sampler's (random) order, the file paged in at 150-230 MB/s where the
disk reads 1.4 GB/s in sequence (docs/scale.md, L480: 13 ms of fetch per sample): each blob became a chain of
small page faults, waited on one at a time. ``benchmarks/spilled_tier.py`` measures the ways of reading it.
"""

from __future__ import annotations

import os

import numpy as np

READ_BYTES = 16 << 20  # one read at most (a run of blobs): the buffer each batch-building thread keeps
READ_GAP = 64 << 10  # blobs this close are read in one request with the bytes between (cheaper than a second one)
PREFETCH = True  # a batch's reads all announced (POSIX_FADV_WILLNEED) before the first is waited on


def plan_reads(begin: np.ndarray, end: np.ndarray, gap: int = READ_GAP, limit: int = READ_BYTES):
    """The reads that fetch a batch's blobs: one per run of blobs, in the file's order.

    Args:
        begin: The blobs' first bytes in the file, sorted, each once.
        end: Their ends (exclusive), in the same order.
        gap: Blobs at most this many bytes apart join one read (the bytes between are read and skipped).
        limit: A read grows no longer than this (a longer blob is read alone).

    Returns:
        ``(ranges, run)``: an ``(n, 2)`` int64 array of ``[start, stop)`` byte ranges in increasing order, and for
        each blob the index of the range holding it.
    """
    run = np.zeros(len(begin), dtype=np.int64)
    ranges: list[list[int]] = []
    for i, (s, e) in enumerate(zip(begin.tolist(), end.tolist())):
        if ranges and s - ranges[-1][1] <= gap and e - ranges[-1][0] <= limit:
            ranges[-1][1] = max(ranges[-1][1], e)
        else:
            ranges.append([s, e])
        run[i] = len(ranges) - 1
    return np.asarray(ranges, dtype=np.int64).reshape(-1, 2), run


def pread(fd: int, buf: memoryview, offset: int) -> int:
    """Read into ``buf`` from ``fd`` at ``offset`` (no copy of the bytes).

    Args:
        fd: The open file.
        buf: Where the bytes go.
        offset: The file position of the first byte.

    Returns:
        The bytes read, fewer at the file's end.
    """
    return os.preadv(fd, [buf], offset)


def read_range(reader, fd: int, view: np.ndarray, start: int) -> int:
    """Fill ``view`` from the file at ``start`` with ``reader``, however many calls it takes.

    Args:
        reader: Reads into a buffer (:func:`pread`'s signature).
        fd: The open file.
        view: A uint8 array filled in place.
        start: The file position of its first byte.

    Returns:
        The bytes the file has there (short of ``len(view)``: it ends before).
    """
    got, mv = 0, memoryview(view)
    while got < len(view):
        n = reader(fd, mv[got:], start + got)
        if n <= 0:
            break
        got += n
    return got


def decode_spilled(fd: int, rows, begin, end, sums, out, *, buffer, damaged, reader=pread, prefetch=None) -> None:
    """Decode the blobs of ``rows`` from the file ``fd`` into ``out`` (``out[j]``: ``rows[j]``), each blob read and
    checked once (a row repeated in the batch is copied), the reads in the file's order.

    Args:
        fd: The spill file.
        rows: The batch's rows (for messages).
        begin: Each row's blob's first byte in the file.
        end: Its end (exclusive).
        sums: Its checksum (``storage.integrity.checksum``).
        out: ``(len(rows),) + frame shape``, C-contiguous per frame, written in place.
        buffer: ``buffer(n)``: a uint8 array of at least ``n`` bytes to read into (the calling thread's own).
        damaged: ``damaged(row, undecodable=None, detail="")``: the error to raise for a damaged frame.
        reader: Reads into a buffer (:func:`pread`; a test records the calls).
        prefetch: Announce every read first (``None``: :data:`PREFETCH`).

    Raises:
        Whatever ``damaged`` returns: a blob does not match its checksum, cannot be decompressed or is past the
        file's end.
    """
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.integrity import checksum

    offsets, first, inverse = np.unique(begin, return_index=True, return_inverse=True)
    ends = end[first]
    ranges, run = plan_reads(offsets, ends, READ_GAP, READ_BYTES)
    if PREFETCH if prefetch is None else prefetch:  # the next reads arrive while this one is decoded
        for start, stop in ranges.tolist():
            os.posix_fadvise(fd, start, stop - start, os.POSIX_FADV_WILLNEED)
    buf = buffer(int((ranges[:, 1] - ranges[:, 0]).max(initial=0)))
    decompress = FrameCodec.decoder_into(out)
    lo = 0
    for r, (start, stop) in enumerate(ranges.tolist()):
        hi = int(np.searchsorted(run, r, side="right"))
        view = buf[: stop - start]
        got = read_range(reader, fd, view, start)
        for u in range(lo, hi):
            j, s, e = int(first[u]), int(offsets[u]) - start, int(ends[u]) - start
            if e > got:  # cut short after it was written
                raise damaged(
                    int(rows[j]), detail=f"; the file ends at byte {start + got}, before the frame's end {start + e}"
                )
            blob = view[s:e]
            try:
                decompress(blob, out[j])
            except Exception as exc:  # noqa: BLE001 - Blosc2's RuntimeError names nothing: name the frame
                raise damaged(
                    int(rows[j]),
                    exc if checksum(blob) == int(sums[j]) else None,
                    f"; Blosc2 could not decompress it: {exc}",
                ) from None
            if checksum(blob) != int(sums[j]):
                raise damaged(int(rows[j]))
        lo = hi
    repeated = np.flatnonzero(first[inverse] != np.arange(len(rows)))
    if repeated.size:  # asked for again in the batch: copied, not read and decoded again
        out[repeated] = out[first[inverse[repeated]]]
