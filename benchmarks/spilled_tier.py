"""Samples/s of ``gpu_resampler``'s compressed tier spilled to disk, read cold (docs/scale.md, L480: 13 ms of fetch
per sample through the mapping in the sampler's order).

``python benchmarks/spilled_tier.py DIR OUT.json [--gb 4] [--rounds 3] [--batches 10]``: fills a ``TieredFrames``
whose every camera frame is in the compressed tier on disk in DIR (three cameras of 3x480x640 uint8, L480's shape,
frames of camera-like noise that Blosc2 packs about 1.2:1; a few distinct blobs per camera written again and again
until the files hold GB), then gathers batches of 64 samples (every camera of one step, ACT, or of two, diffusion)
in a random permutation of the samples, with each way of reading the file: the mapping in the sampler's order (as
it was), and the batch's blobs in the file's order read whole (``pread``), with and without ``POSIX_FADV_WILLNEED``
for all of them first, and the mapping in the file's order after ``MADV_WILLNEED``. Before each timed run the files
are evicted from the page cache (``fsync``, ``POSIX_FADV_DONTNEED``; ``mincore`` confirms it). Every way reads the
same batches in a round; the ways are interleaved and the rounds repeated, because other processes share the cores.
The files are unlinked from the start: nothing is left in DIR.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import sys
import time
import types

SHAPE = (3, 480, 640)
CAMERAS = ("cam0", "cam1", "cam2")
LENGTH = 100  # steps per episode
DISTINCT = 6  # distinct blobs per camera, written again and again
WINDOWS = {"act": (0,), "diffusion": (-1, 0)}


class Replay:
    """A codec whose ``compress`` hands out blobs compressed once (``FrameCodec`` lz4hc 5, the tier's own) in turn:
    a file of GB is written in seconds, not the half hour compressing that many frames takes on two cores."""

    def __init__(self, blobs):
        self.blobs, self.i = blobs, 0

    def compress(self, frame):
        self.i += 1
        return self.blobs[self.i % len(self.blobs)]


def _frames(seed: int, n: int):
    """``n`` frames of a gradient with camera noise (sigma 2): about 1.2:1 with lz4hc, as L480's frames pack 1.25:1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : SHAPE[1], 0 : SHAPE[2]]
    base = (x * 0.2 + y * 0.3)[None] + np.arange(3)[:, None, None] * 20
    return [np.clip(base + i + rng.normal(0, 2, SHAPE), 0, 255).astype(np.uint8) for i in range(n)]


def _mapped_in_sampler_order(self, rows, out):
    """The read as it was: frame by frame through the mapping, in the batch's order, each checked after its decode."""
    import numpy as np

    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.integrity import checksum

    (_, begin, end, sums), buffers = self._rows()
    local = np.asarray(rows, dtype=np.int64) - self.first_row
    data = buffers[0]
    for j, (s, e, c) in enumerate(zip(begin[local].tolist(), end[local].tolist(), sums[local].tolist())):
        blob = data[s:e]
        FrameCodec.decompress_into(blob, out[j])
        if checksum(blob) != c:
            raise self._damaged(int(rows[j]))


def _madvised_in_file_order(self, rows, out):
    """The mapping read in the file's order after ``MADV_WILLNEED`` on every run of the batch's blobs."""
    import numpy as np

    from robo_loaders_plugin.backends.gpu_resampler.spill_reads import plan_reads
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.integrity import checksum

    (_, begin, end, sums), buffers = self._rows()
    local = np.asarray(rows, dtype=np.int64) - self.first_row
    b, e, c = begin[local], end[local], sums[local]
    offsets, first, inverse = np.unique(b, return_index=True, return_inverse=True)
    ranges, _ = plan_reads(offsets, e[first])
    m = self._mmap
    for s, t in ranges.tolist():
        a = s - s % mmap.PAGESIZE
        m.madvise(mmap.MADV_WILLNEED, a, t - a)
    data = buffers[0]
    for u, j in enumerate(first.tolist()):
        blob = data[int(offsets[u]) : int(e[j])]
        FrameCodec.decompress_into(blob, out[j])
        if checksum(blob) != int(c[j]):
            raise self._damaged(int(rows[j]))
    rep = np.flatnonzero(first[inverse] != np.arange(len(rows)))
    out[rep] = out[first[inverse[rep]]]


def _resident(fd: int, size: int) -> float:
    """The share of the file's pages in the page cache (``mincore`` on a fresh mapping, which faults nothing in)."""
    import numpy as np

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    try:
        if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return float((np.frombuffer(vec, np.uint8) & 1).mean())
    finally:
        libc.munmap(ctypes.c_void_p(addr), size)


def _waited_for_a_core() -> float:
    """Seconds this thread has waited on a run queue (ready, but another process had the core)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _evict(comps) -> float:
    """Drop the files from the page cache (the mappings unmapped first: mapped pages are not dropped); the largest
    share still resident."""
    import gc

    left = 0.0
    for c in comps:
        c._map = None
        c.__dict__.pop("_mmap", None)
    gc.collect()
    for c in comps:
        fd = c._file.fileno()
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        left = max(left, _resident(fd, c.nbytes))
    return left


def _keep_mmap(comp) -> None:
    """For ``MADV_WILLNEED``: the ``mmap`` object behind the tier's mapping (its numpy view hides it)."""
    comp._rows()
    comp._mmap = comp._map.base.obj


def main(argv=None) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import numpy as np
    import torch

    from robo_loaders_plugin.backends.gpu_resampler.footprint import plan_tiers
    from robo_loaders_plugin.backends.gpu_resampler.spill_reads import READ_BYTES, READ_GAP
    from robo_loaders_plugin.backends.gpu_resampler.tiers import TieredFrames
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.core.data_size import DataSize
    from robo_loaders_plugin.frames.base import FieldInfo
    from robo_loaders_plugin.storage.buffers import BufferPool
    from robo_loaders_plugin.storage.codec import FrameCodec

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--gb", type=float, default=4.0, help="the spill files' size, every camera")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, default=10, help="timed batches of each way per round")
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args(argv)

    codec = FrameCodec("lz4hc", 5)
    blobs = {k: [codec.compress(f) for f in _frames(i, DISTINCT)] for i, k in enumerate(CAMERAS)}
    blob_bytes = float(np.mean([len(b) for bs in blobs.values() for b in bs]))
    episodes = max(2, int(a.gb * 1e9 / (blob_bytes * LENGTH * len(CAMERAS))))
    lengths = np.full(episodes, LENGTH)
    frame = int(np.prod(SHAPE))
    size = DataSize(lengths, dict.fromkeys(CAMERAS, frame), 4)
    plan = plan_tiers(size, device_budget=None, host_budget=1, spill_dir=a.dir)
    assert plan.raw == 0 and plan.spill_dir is not None, plan
    infos = {k: FieldInfo(np.dtype(np.uint8), SHAPE, True) for k in CAMERAS}
    infos["action"] = FieldInfo(np.dtype(np.float32), (1,), False)
    t = time.perf_counter()
    tiers = TieredFrames(lengths, infos, plan, torch.device("cpu"), spill_dir=a.dir)
    for k in CAMERAS:
        tiers.parts[k][2].codec = Replay(blobs[k])
    zeros = np.zeros((LENGTH,) + SHAPE, np.uint8)  # never read: the codec replays its blobs
    for ep in range(episodes):
        tiers.fill(ep, {**dict.fromkeys(CAMERAS, zeros), "action": np.zeros((LENGTH, 1), np.float32)})
    comps = [tiers.parts[k][2] for k in CAMERAS]
    for c in comps:
        c._indexed()
    build_s = time.perf_counter() - t
    file_bytes = sum(c.nbytes for c in comps)
    print(
        f"{episodes} episodes, {file_bytes / 1e9:.2f} GB in 3 files, {blob_bytes / 1e3:.0f} kB a blob, {build_s:.0f} s"
    )

    def pread(prefetch):
        def use(c):
            c.prefetch = prefetch
            c.__dict__.pop("decode_into", None)

        return use

    def bind(fn):
        def use(c):
            if fn is _madvised_in_file_order:
                _keep_mmap(c)
            c.decode_into = types.MethodType(fn, c)

        return use

    ways = {
        "mapped, sampler order (before)": bind(_mapped_in_sampler_order),
        "pread, file order": pread(False),
        "pread, file order, WILLNEED first (now)": pread(True),
        "mapped, file order, MADV_WILLNEED first": bind(_madvised_in_file_order),
    }
    pool = BufferPool()
    rng = np.random.default_rng(0)
    runs: dict = {w: {k: [] for k in ways} for w in WINDOWS}
    cpus: dict = {w: {k: [] for k in ways} for w in WINDOWS}
    queues: dict = {w: {k: [] for k in ways} for w in WINDOWS}
    load = [os.getloadavg()[0]]
    resident_after_evict = 0.0
    n = a.batches * a.batch
    for r in range(a.rounds):
        for window, offsets in WINDOWS.items():
            pick = rng.permutation(episodes * LENGTH)[:n]  # a pass's order: no sample twice
            eps, step = pick // LENGTH, pick % LENGTH
            steps = np.clip(step[:, None] + np.array(offsets)[None], 0, LENGTH - 1)
            names = list(ways)
            names = names[r % len(names) :] + names[: r % len(names)]  # interleaved: each way first in turn
            want = None
            for name in names:
                resident_after_evict = max(resident_after_evict, _evict(comps))
                for c in comps:
                    ways[name](c)
                check = []
                t, cpu, queued = time.perf_counter(), time.process_time(), _waited_for_a_core()
                for b in range(a.batches):
                    sl = slice(b * a.batch, (b + 1) * a.batch)
                    for k in CAMERAS:
                        out = tiers.gather(k, eps[sl], steps[sl], pool)
                        if b == 0:
                            check.append(out.numpy()[:, -1, 0, 0, :64].tobytes())
                dt, cpu, queued = time.perf_counter() - t, time.process_time() - cpu, _waited_for_a_core() - queued
                if want is None:
                    want = check
                assert check == want, f"{name}: other bytes than the first way's"
                runs[window][name].append(n / dt)
                cpus[window][name].append(cpu / dt)
                queues[window][name].append(queued / dt)
                print(
                    f"round {r} {window:9s} {name:42s} {n / dt:7.1f} samples/s, {cpu / dt:.0%} on a core, "
                    f"{queued / dt:.0%} waiting for one"
                )
    load.append(os.getloadavg()[0])
    tiers.close()
    read_per_sample = {w: len(o) * len(CAMERAS) * blob_bytes for w, o in WINDOWS.items()}
    results = {}
    for window, by in runs.items():
        results[window] = {
            name: {
                "samples_per_s_median": float(np.median(v)),
                "samples_per_s_each": [round(x, 2) for x in v],
                "cpu_share_each": [round(x, 3) for x in cpus[window][name]],
                "waiting_for_a_core_share_each": [round(x, 3) for x in queues[window][name]],
                "ms_per_sample_median": 1e3 / float(np.median(v)),
                "compressed_read_bytes_per_s_median": float(np.median(v)) * read_per_sample[window],
            }
            for name, v in by.items()
        }
        base = results[window]["mapped, sampler order (before)"]["samples_per_s_median"]
        for v in results[window].values():
            v["vs_before"] = round(v["samples_per_s_median"] / base, 3)
    doc = {
        "what": "gpu_resampler's compressed tier spilled to disk, gathered cold (evicted from the page cache before "
        "each timed run): samples/s of TieredFrames.gather over the 3 cameras, one thread, each way of reading; "
        "cpu_share: this process's CPU time over the run's wall time; waiting_for_a_core_share: the main thread's time "
        "on a run queue (ready, another process on the core) over the wall time; the rest is waiting on the disk",
        "settings": {
            "frame_shape": list(SHAPE),
            "cameras": len(CAMERAS),
            "episodes": episodes,
            "steps_per_episode": LENGTH,
            "blob_bytes_mean": blob_bytes,
            "ratio": frame / blob_bytes,
            "file_bytes": file_bytes,
            "batch": a.batch,
            "batches_per_run": a.batches,
            "rounds": a.rounds,
            "windows": {w: list(o) for w, o in WINDOWS.items()},
            "read_bytes": READ_BYTES,
            "read_gap": READ_GAP,
            "directory": a.dir,
        },
        "resident_share_after_evict_max": resident_after_evict,
        "build_s": build_s,
        "load_average_1min_at_start_and_end": load,
        "results": results,
        "machine": machine(),
    }
    summarize(doc)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    return doc


QUIET = 0.25  # a run whose thread waited for a core less than this share of its time


def summarize(doc: dict) -> None:
    """Add, per window and way, the median of the runs the machine's other processes left alone (waiting for a core
    under :data:`QUIET` of the time) and its ratio to the way as it was, in place: on two shared cores some runs
    spend most of their time waiting for one, whatever the way."""
    import numpy as np

    for by in doc["results"].values():
        for v in by.values():
            quiet = [x for x, w in zip(v["samples_per_s_each"], v["waiting_for_a_core_share_each"]) if w < QUIET]
            v["quiet_runs"] = len(quiet)
            v["samples_per_s_median_quiet"] = float(np.median(quiet)) if quiet else None
        base = by["mapped, sampler order (before)"]["samples_per_s_median_quiet"]
        for v in by.values():
            q = v["samples_per_s_median_quiet"]
            v["vs_before_quiet"] = round(q / base, 3) if q and base else None
    doc["quiet"] = f"runs waiting for a core under {QUIET:.0%} of their time"


if __name__ == "__main__":
    main()
