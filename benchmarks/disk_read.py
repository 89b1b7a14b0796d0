"""The disk's sequential read rate with nothing in the page cache (docs/scale.md, L480): a lossless copy of L480 is
2.1x RAM, so every pass of a backend reading it comes from the disk, and this rate bounds it.

``python benchmarks/disk_read.py DIR OUT.json [GB]``: writes a file of GB (default 4) random bytes in DIR, evicts it
from the page cache (``posix_fadvise`` DONTNEED after ``fsync``), reads it back in 16 MB blocks, three times, and
writes the best rate in bytes/s with the machine; the file is removed.
"""

from __future__ import annotations

import json
import os
import sys
import time

BLOCK = 16 << 20


def main(directory: str, out: str, gb: float = 4.0) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from robo_loaders_plugin.bench.report import machine

    path = os.path.join(directory, ".disk_read_probe")
    size = int(gb * (1 << 30)) // BLOCK * BLOCK
    chunk = os.urandom(BLOCK)
    try:
        with open(path, "wb") as f:
            for _ in range(size // BLOCK):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        rates = []
        for _ in range(3):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t = time.perf_counter()
                while os.read(fd, BLOCK):
                    pass
                rates.append(size / (time.perf_counter() - t))
            finally:
                os.close(fd)
    finally:
        if os.path.exists(path):
            os.remove(path)
    doc = {
        "what": "sequential read of a file evicted from the page cache, 16 MB blocks, best of 3",
        "bytes": size,
        "read_bytes_per_s": max(rates),
        "each_bytes_per_s": rates,
        "directory": directory,
        "machine": machine(),
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    return doc


if __name__ == "__main__":
    d = main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 4.0)
    print(f"{d['read_bytes_per_s'] / 1e6:.0f} MB/s")
