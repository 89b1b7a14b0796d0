"""Timing ``robo-loaders convert`` for the benchmarks: the user's own command in a fresh process per worker count.

Why a subprocess: a conversion's cost as a user sees it includes starting Python and importing the framework;
running it in the benchmark's parent would charge those imports to whichever worker count ran first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from tabulate import tabulate

from robo_loaders_plugin.core.units import format_bytes


def dir_bytes(path: str) -> int:
    """Bytes of every file under a directory.

    Args:
        path: The directory.
    """
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def time_conversions(
    command: list[str],
    out_base: str,
    workers: list[int],
    source_bytes: int,
    decoded_bytes: int,
    echo=print,
    timeout: float = 3600,
) -> list[dict]:
    """Run ``robo-loaders convert <command...> OUT --num-workers W`` from scratch for each ``W``, each in a fresh
    process.

    Args:
        command: The convert command's arguments before OUT (``["robomimic", PATH]``).
        out_base: Each output stays at ``<out_base>-w<W>`` (removed first).
        workers: The worker counts.
        source_bytes: Bytes of the input files, for source MB/s.
        decoded_bytes: Bytes of arrays and frames written, before compression, for decoded MB/s.
        echo: Prints a progress line per run.
        timeout: Seconds one conversion may take.

    Returns:
        One row per worker count: ``workers``, ``wall_s``, ``source_mb_per_s``, ``decoded_mb_per_s``,
        ``shards_bytes``, ``out``.

    Raises:
        RuntimeError: a conversion failed (the end of its stderr included).
        subprocess.TimeoutExpired: a conversion took longer than ``timeout``.
    """
    rows = []
    for w in workers:
        out = f"{out_base}-w{w}"
        shutil.rmtree(out, ignore_errors=True)
        echo(f"[bench] convert {command[0]} with {w} worker(s) ...")
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "robo_loaders_plugin.cli", "convert", *command, out, "--num-workers", str(w)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise RuntimeError(f"conversion with {w} worker(s) failed:\n{p.stderr[-2000:]}")
        rows.append(
            {
                "workers": w,
                "wall_s": round(wall, 2),
                "source_mb_per_s": round(source_bytes / wall / 1e6, 2),
                "decoded_mb_per_s": round(decoded_bytes / wall / 1e6, 2),
                "shards_bytes": dir_bytes(out),
                "out": out,
            }
        )
    return rows


def conversion_table(rows) -> str:
    """The rows of :func:`time_conversions` as a text table.

    Args:
        rows: Those rows.

    Returns:
        The table.
    """
    return tabulate(
        [
            [
                r["workers"],
                f"{r['wall_s']:.1f}",
                f"{r['source_mb_per_s']:.2f}",
                f"{r['decoded_mb_per_s']:.1f}",
                format_bytes(r["shards_bytes"]),
            ]
            for r in rows
        ],
        headers=["convert workers", "wall s", "source MB/s", "decoded MB/s", "shards"],
    )
