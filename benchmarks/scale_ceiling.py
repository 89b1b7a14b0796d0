"""What bounds a loader on R240 (docs/scale.md): each BC-RNN sample is 10 frames of 2 cameras at 240x240 (3.46 MB),
so at these sizes every backend is a memory-bandwidth problem, and the ceiling is this machine's copy rate.

``python benchmarks/scale_ceiling.py OUT.json [NATIVE_RESULT.json]``: on a 4 GB array of R240-shaped frames (more than
any CPU cache, every page resident), the rate of

- ``memcpy``: one large contiguous copy (numpy ``copyto``), one thread and two;
- ``gather``: batches of 16 random windows of 10 consecutive frames copied out, as an in-RAM backend serves them
  (numpy fancy indexing, one thread; ``torch.index_select`` with torch's threads, 1 and 2);
- ``gather + copy``: the same plus one more copy of each batch (what a batch built in a DataLoader worker costs
  again when it is handed to the training process);
- the numpy gathers again in a process whose glibc keeps freed memory for reuse (``MALLOC_MMAP_THRESHOLD_`` 1 GB):
  glibc hands allocations above 32 MB (a batch is 55 MB) back to the kernel when freed, so every new batch
  page-faults all its pages in again; the difference is what that costs.

Each rate is given in samples/s and, when the R240 result of ``benchmarks/scale.sh r240`` is named, as a multiple
of native ``low_dim``'s samples/s measured there: the highest ratio any backend can reach here with that many
copies. No dataset code runs.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np

FRAME = (2, 240, 240, 3)  # both cameras of one step
WINDOW, BATCH = 10, 16
SAMPLE_BYTES = WINDOW * int(np.prod(FRAME))


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def memcpy(src: np.ndarray, dst: np.ndarray, threads: int) -> float:
    """Bytes per second of copying ``src`` into ``dst`` split over ``threads`` (numpy releases the GIL to copy)."""
    parts = np.array_split(np.arange(len(src)), threads)

    def run():
        ts = [threading.Thread(target=np.copyto, args=(dst[p[0] : p[-1] + 1], src[p[0] : p[-1] + 1])) for p in parts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return src.nbytes / _best(run)


def gather(data: np.ndarray, batches: int, extra_copy: bool, torch_threads: int | None) -> float:
    """Samples per second of ``batches`` batches of random windows copied out of ``data``."""
    rng = np.random.default_rng(0)
    idx = rng.integers(len(data) - WINDOW, size=(batches, BATCH))[:, :, None] + np.arange(WINDOW)
    if torch_threads is None:

        def run():
            for b in range(batches):
                out = data[idx[b].ravel()]
                if extra_copy:
                    out.copy()
    else:
        import torch

        torch.set_num_threads(torch_threads)
        t_data = torch.from_numpy(data)
        t_idx = [torch.from_numpy(i.ravel()) for i in idx]

        def run():
            for b in range(batches):
                out = t_data.index_select(0, t_idx[b])
                if extra_copy:
                    out.clone()

    return batches * BATCH / _best(run)


KEEP_FREED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(2 << 30)}


def _gathers_keeping_freed_memory() -> list[tuple[str, float]]:
    """The numpy gathers in a child process started with :data:`KEEP_FREED` (glibc reads it at start only)."""
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import scale_ceiling as s, numpy as np; "
        "d = np.ones(((4 << 30) // int(np.prod(s.FRAME)), *s.FRAME), np.uint8); "
        "print(json.dumps([s.gather(d, 100, False, None), s.gather(d, 100, True, None)]))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, **KEEP_FREED), capture_output=True, text=True, check=True
    )
    plain, copied = json.loads(p.stdout.strip().splitlines()[-1])
    return [
        ("gather, numpy, 1 thread, glibc keeping freed batches", plain),
        ("gather + copy, numpy, 1 thread, glibc keeping freed batches", copied),
    ]


def main(out_path: str, native_path: str | None = None) -> dict:
    frames = (4 << 30) // int(np.prod(FRAME))
    data = np.ones((frames, *FRAME), dtype=np.uint8)  # written: every page resident
    native = None
    if native_path:
        with open(native_path) as f:
            rows = json.load(f)["results"]
        native = next(r["samples_per_s"] for r in rows if r["backend"] == "native:low_dim")
    results = []

    def add(what, per_s, unit="samples/s"):
        row = {"what": what, unit.replace("/", "_per_"): per_s}
        if unit == "samples/s":
            row["gb_per_s"] = per_s * SAMPLE_BYTES / 1e9
            if native:
                row["vs_native_low_dim"] = per_s / native
        else:
            row["samples_per_s_equivalent"] = per_s / SAMPLE_BYTES
            if native:
                row["vs_native_low_dim"] = per_s / SAMPLE_BYTES / native
        results.append(row)
        print(json.dumps(row))

    half = data[: frames // 2]
    dst = np.empty_like(half)
    dst.fill(0)
    for threads in (1, 2):
        add(f"memcpy, {threads} thread(s), {half.nbytes / 1e9:.1f} GB", memcpy(half, dst, threads), "bytes/s")
    del dst
    add("gather, numpy, 1 thread", gather(data, 100, False, None))
    add("gather + copy, numpy, 1 thread", gather(data, 100, True, None))
    for threads in (1, 2):
        add(f"gather, torch index_select, {threads} thread(s)", gather(data, 100, False, threads))
        add(f"gather + copy, torch, {threads} thread(s)", gather(data, 100, True, threads))
    del data
    for what, per_s in _gathers_keeping_freed_memory():
        add(what, per_s)
    from robo_loaders_plugin.bench.report import machine

    out = {
        "kind": "scale_ceiling",
        "workload": "R240 (2 cameras 240x240, BC-RNN windows of 10, batch 16)",
        "sample_bytes": SAMPLE_BYTES,
        "array_bytes": frames * int(np.prod(FRAME)),
        "keep_freed_env": KEEP_FREED,
        "native_low_dim_samples_per_s": native,
        "native_result": native_path,
        "machine": machine(),
        "results": results,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
