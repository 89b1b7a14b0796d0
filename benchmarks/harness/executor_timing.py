"""Conversion timing per executor (local processes, datatrove's local executor) and task count: what
``benchmarks/convert_executors.sh`` measures and docs/distributed-conversion.md quotes, "when does parallel
conversion pay?". Each conversion runs in a fresh Python process, as ``robo-loaders convert`` does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping

_BENCH_CHILD = """
import json, sys, time
framework, source, out, tasks, executor, options, shard_bytes = json.loads(sys.argv[1])
kwargs = {"shard_bytes": shard_bytes} if shard_bytes else {}
if framework == "robomimic":
    from robo_loaders_plugin.robomimic.convert import convert_robomimic as convert
else:
    from robo_loaders_plugin.lerobot.convert import convert_lerobot as convert
res = convert(source, out, num_workers=tasks, progress=False, executor=executor, executor_options=options, **kwargs)
print("RESULT " + json.dumps(res))
"""


def _source_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def time_executor_conversions(
    framework: str,
    source: str,
    out_base: str,
    configs: Iterable[tuple[str, int]] = (("local", 1), ("local", 2), ("datatrove-local", 1), ("datatrove-local", 2)),
    shard_bytes: int | None = None,
    executor_options: Mapping | None = None,
    echo=print,
    timeout: float = 3600,
) -> list[dict]:
    """Convert ``source`` (a robomimic HDF5 file or a LeRobot root) from scratch for each ``(executor, tasks)``, each
    in a fresh Python process as ``robo-loaders convert`` would run (imports and task start-up included, see
    ``robo_loaders_plugin/bench/conversion.py``). Rows: wall time, source MB/s (bytes of the input files), source MB/s
    per task, and decoded MB/s for LeRobot (frame bytes decoded). Parallel conversion pays once
    ``mb_per_s_per_task`` at 2 tasks stays near the 1-task figure; on small datasets start-up dominates. Outputs stay
    at ``<out_base>-<executor>-t<tasks>``; the datatrove logs are written outside them."""
    src_bytes = _source_bytes(source)
    rows = []
    for executor, tasks in configs:
        out = f"{out_base}-{executor}-t{tasks}"
        shutil.rmtree(out, ignore_errors=True)
        options = dict(executor_options or {}) if executor != "local" else {}
        if executor.startswith("datatrove"):
            options.setdefault("logging_dir", f"{out}.logs")
            shutil.rmtree(options["logging_dir"], ignore_errors=True)
        echo(f"[bench] convert {framework} with {executor}, {tasks} task(s) ...")
        payload = json.dumps([framework, source, out, tasks, executor, options, shard_bytes])
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-c", _BENCH_CHILD, payload], capture_output=True, text=True, timeout=timeout
        )
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise RuntimeError(f"conversion with {executor}, {tasks} task(s) failed:\n{p.stderr[-2000:]}")
        res = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :])
        mb_s = src_bytes / wall / 1e6
        rows.append(
            {
                "executor": executor,
                "tasks": tasks,
                "wall_s": round(wall, 2),
                "source_bytes": src_bytes,
                "source_mb_per_s": round(mb_s, 2),
                "mb_per_s_per_task": round(mb_s / tasks, 2),
                "decoded_mb_per_s": round(res["frame_bytes"] / wall / 1e6, 2) if "frame_bytes" in res else None,
                "episodes": res.get("episodes"),
                "shards": res.get("shards"),
                "out": out,
            }
        )
    return rows


def executor_conversion_table(rows) -> str:
    from tabulate import tabulate

    return tabulate(
        [
            [
                r["executor"],
                r["tasks"],
                f"{r['wall_s']:.1f}",
                f"{r['source_mb_per_s']:.2f}",
                f"{r['mb_per_s_per_task']:.2f}",
                "" if r["decoded_mb_per_s"] is None else f"{r['decoded_mb_per_s']:.1f}",
            ]
            for r in rows
        ],
        headers=["executor", "tasks", "wall s", "source MB/s", "MB/s per task", "decoded MB/s"],
    )
