"""What bounds an in-RAM loader (docs/scale.md): on R240 each BC-RNN sample is 10 frames of 2 cameras at 240x240
(3.46 MB); on the 84x84 workloads W1 (robomimic) and W2 (LeRobot) a batch is a few MB copied hundreds of times a
second. At these rates every backend is a memory-bandwidth problem, and the ceiling is this machine's copy rate.

``python benchmarks/scale_ceiling.py OUT.json [NATIVE_RESULT.json] [--workload r240|w1|w2|l480]``: on arrays shaped like
the workload's frames (:data:`WORKLOADS`; R240's 4 GB is more than any CPU cache; every page resident), the rate of

- ``memcpy``: one large contiguous copy (numpy ``copyto``), one thread and two;
- ``gather``: batches of 16 random windows of 10 consecutive frames copied out, as an in-RAM backend serves them
  (numpy fancy indexing, one thread; ``torch.index_select`` with torch's threads, 1 and 2);
- ``gather into reused buffers``: the torch gather written into the same output arrays every batch, as the recycled
  batch buffers (``storage.buffers.BufferPool``) do;
- ``gather + copy``: the same plus one more copy of each batch (what a batch built in a DataLoader worker costs
  again when it is handed to the training process);
- the numpy gathers again in a process whose glibc keeps freed memory for reuse (``MALLOC_MMAP_THRESHOLD_`` 1 GB):
  glibc hands allocations above 32 MB (a batch is 55 MB) back to the kernel when freed, so every new batch
  page-faults all its pages in again; the difference is what that costs.

For L480 (``--workload l480``: 3 cameras 480x640, diffusion windows of 2 frames, batch 64, served by ``datapipe``
from robo-shards) the frames are not in RAM but compressed on disk, so its ceiling is decompression instead
(:func:`decompress_ceiling`): camera-like frames (``sample_data.camera``, through an AV1 video as L480's were)
compressed as the conversion stores them (channels last, the conversion's codec), decompressed by 1 and 2 threads
into reused batches through the backends' own call (``FrameCodec.decompress_into``), with and without the put-back
to the channels-first layout LeRobot serves (``storage.frame_layout.copy_served``), and the disk's sequential read
rate (``scale_disk_read.json``) as the rate of the compressed bytes.

Each rate is given in samples/s and, when the workload's benchmark result is named (``benchmarks/scale.sh r240``,
``robomimic_lift.sh``, ``lerobot.sh``), as a multiple of the native loader's samples/s measured there: the highest
ratio any backend can reach here with that many copies. No dataset code runs.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class Workload:
    """The shape of what one workload's batches copy: ``arrays`` arrays of ``rows`` steps of ``frame`` each (one per
    camera), read as ``batch`` random windows of ``window`` steps."""

    title: str
    arrays: int
    frame: tuple
    rows: int
    window: int
    batch: int
    native: str  # the native backend's row in the named result

    @property
    def sample_bytes(self) -> int:
        return self.arrays * self.window * int(np.prod(self.frame))

    @property
    def array_bytes(self) -> int:
        return self.arrays * self.rows * int(np.prod(self.frame))


WORKLOADS = {
    # both cameras of a step in one array, 4 GB: more than any CPU cache
    "r240": Workload(
        "R240 (2 cameras 240x240, BC-RNN windows of 10, batch 16)", 1, (2, 240, 240, 3), 12428, 10, 16, "native:low_dim"
    ),
    # benchmarks/robomimic_lift.sh's Lift-sized set: 200 demos of ~50 steps, 2 cameras (robomimic's bc config does
    # not load next_obs: train.hdf5_load_next_obs is False)
    "w1": Workload(
        "W1: robomimic 84x84 (2 cameras, BC-RNN windows of 10, batch 64)",
        2,
        (84, 84, 3),
        10002,
        10,
        64,
        "native:low_dim",
    ),
    # benchmarks/lerobot.sh's set: 10,540 frames of 2 cameras, diffusion windows (the previous frame and this one)
    "w2": Workload(
        "W2: LeRobot 84x84 (2 cameras, diffusion windows of 2 frames, batch 64)", 2, (3, 84, 84), 10540, 2, 64, "native"
    ),
    # docs/scale.md's L480 through datapipe: 3 cameras 480x640 served channels first, diffusion windows, batch 64;
    # 24,000 steps (66.4 GB decoded): only :func:`decompress_ceiling` runs on it (no array of it is allocated)
    "l480": Workload(
        "L480: LeRobot 480x640 from robo-shards (3 cameras, diffusion windows of 2 frames, batch 64)",
        3,
        (3, 480, 640),
        24000,
        2,
        64,
        "native",
    ),
}
SHARD_CODEC = {"codec": "lz4hc", "level": 5, "filter": "none"}  # the L480 conversion's (scale_l480_shard_ratio.json)
FRAME = WORKLOADS["r240"].frame  # kept for R240's earlier results
WINDOW, BATCH = WORKLOADS["r240"].window, WORKLOADS["r240"].batch
SAMPLE_BYTES = WORKLOADS["r240"].sample_bytes


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


def gather(
    data, batches: int, extra_copy: bool, torch_threads: int | None, w: Workload | None = None, reuse: bool = False
) -> float:
    """Samples per second of ``batches`` batches of random windows copied out of ``data`` (one array, or one per
    camera of workload ``w``); ``reuse``: into the same output arrays every batch (torch only), as the recycled
    batch buffers do."""
    w = w or WORKLOADS["r240"]
    arrays = data if isinstance(data, list) else [data]
    rng = np.random.default_rng(0)
    idx = rng.integers(len(arrays[0]) - w.window, size=(batches, w.batch))[:, :, None] + np.arange(w.window)
    if torch_threads is None:

        def run():
            for b in range(batches):
                for a in arrays:
                    out = a[idx[b].ravel()]
                    if extra_copy:
                        out.copy()
    else:
        import torch

        torch.set_num_threads(torch_threads)
        t_data = [torch.from_numpy(a) for a in arrays]
        t_idx = [torch.from_numpy(i.ravel()) for i in idx]
        outs = [torch.empty((w.batch * w.window,) + a.shape[1:], dtype=a.dtype) for a in t_data]

        def run():
            for b in range(batches):
                for t, o in zip(t_data, outs):
                    out = torch.index_select(t, 0, t_idx[b], out=o) if reuse else t.index_select(0, t_idx[b])
                    if extra_copy:
                        out.clone()

    return batches * w.batch / _best(run)


def camera_blobs(w: Workload, per_camera: int = 8, via_video: bool = False) -> tuple[list[list[bytes]], float]:
    """Camera-like frames of ``w``'s shape (``sample_data.camera``: texture, shake, sensor noise), compressed as the
    conversion stores them: channels last, with :data:`SHARD_CODEC`.

    Why ``via_video``: L480's shards hold frames decoded from its AV1 videos, which the encoder has smoothed (they
    packed 1.745:1, where the frames as rendered pack ~1.2:1); with it the frames are written to a LeRobot dataset
    by ``robo-loaders sample-data`` (AV1, as L480 was) and decoded back with torchcodec first.

    Args:
        w: The workload (``frame`` is (C, H, W) as served).
        per_camera: Frames per camera (they are reused round robin).
        via_video: Through an AV1 video first (slower: an encode and a decode).

    Returns:
        ``(blobs per camera, the decoded/compressed ratio)``.
    """
    from robo_loaders_plugin.storage.codec import FrameCodec

    codec = FrameCodec(**SHARD_CODEC)
    frames = _video_frames(w, per_camera) if via_video else _rendered_frames(w, per_camera)
    blobs = [[codec.compress(f) for f in cam] for cam in frames]
    raw = sum(f.nbytes for cam in frames for f in cam)
    return blobs, raw / sum(len(b) for cam in blobs for b in cam)


def _rendered_frames(w: Workload, per_camera: int) -> list[list[np.ndarray]]:
    from robo_loaders_plugin.sample_data.camera import CameraScene

    out = []
    for cam in range(w.arrays):
        scene = CameraScene(w.frame[1:], cam, np.random.default_rng(cam))
        out.append(
            [scene.render((0.4 + 0.02 * i, 0.6), (0.5, 0.3 + 0.02 * i), 0.5, i / 30.0) for i in range(per_camera)]
        )
    return out


def _video_frames(w: Workload, per_camera: int) -> list[list[np.ndarray]]:
    import glob
    import os
    import subprocess
    import tempfile

    from torchcodec.decoders import VideoDecoder

    h, wd = w.frame[1:]
    with tempfile.TemporaryDirectory(prefix="ceiling-l480-") as tmp:
        root = os.path.join(tmp, "l480")
        subprocess.run(
            [sys.executable, "-m", "robo_loaders_plugin.cli", "sample-data", "lerobot", root, "--repo-id", "local/c",
             "--episodes", "1", "--min-length", str(per_camera), "--max-length", str(per_camera), "--cameras",
             str(w.arrays), "--image-size", f"{h}x{wd}", "--fps", "30", "--codec", "av1", "--content", "camera"],
            check=True, capture_output=True,
        )  # fmt: skip
        out = []
        for video in sorted(glob.glob(os.path.join(root, "videos", "*", "*", "*.mp4"))):
            chw = VideoDecoder(video)[:].numpy()
            out.append([np.ascontiguousarray(f.transpose(1, 2, 0)) for f in chw])
    return out


def decompress_ceiling(w: Workload, blobs: list[list[bytes]], threads: int, batches: int, put_back: bool) -> float:
    """Samples per second of ``threads`` threads each filling its own reused batch of ``w`` (``batch`` samples of
    ``window`` steps of every camera) by decompressing one blob per frame (the GIL released), into a channels-last
    scratch put back channels first into the batch (``put_back``), or straight into the batch's memory.

    Args:
        w: The workload.
        blobs: :func:`camera_blobs`'s frames.
        threads: Threads, each building ``batches`` batches.
        batches: Batches per thread.
        put_back: Put each frame back channels first (what LeRobot is served) instead of leaving it as stored.

    Returns:
        Samples per second over every thread (the best of 3 runs).
    """
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.frame_layout import CHANNELS_LAST, copy_served

    c, h, wd = w.frame
    outs = [np.empty((w.batch, w.window, w.arrays, c, h, wd), np.uint8) for _ in range(threads)]
    scratches = [np.empty((h, wd, c), np.uint8) for _ in range(threads)]

    def build(k: int) -> None:
        out, scratch, n = outs[k], scratches[k], 0
        for _ in range(batches):
            for b in range(w.batch):
                for s in range(w.window):
                    for cam in range(w.arrays):
                        blob = blobs[cam][n % len(blobs[cam])]
                        n += 1
                        if put_back:
                            FrameCodec.decompress_into(blob, scratch)
                            copy_served(scratch, out[b, s, cam], CHANNELS_LAST)
                        else:  # the same bytes, left channels last in the batch's memory
                            FrameCodec.decompress_into(blob, out[b, s, cam].reshape(scratch.shape))

    def run():
        ts = [threading.Thread(target=build, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    for o in outs:
        o.fill(0)  # every page resident before timing, as a recycled batch is
    return threads * batches * w.batch / _best(run)


def _l480_results(w: Workload, add, batches: int = 3) -> dict:
    """L480's rows (module docstring); returns what the result records beside them."""
    import os

    blobs, ratio = camera_blobs(w, via_video=True)
    for threads in (1, 2):
        add(
            f"decompress, {threads} thread(s), left channels last",
            decompress_ceiling(w, blobs, threads, batches, False),
        )
        add(
            f"decompress + put back channels first, {threads} thread(s)",
            decompress_ceiling(w, blobs, threads, batches, True),
        )
    disk = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "scale_disk_read.json")
    extra = {"shard_codec": SHARD_CODEC, "sampled_ratio": round(ratio, 3)}
    if os.path.exists(disk):
        with open(disk) as f:
            read = json.load(f)["read_bytes_per_s"]
        stored = os.path.join(os.path.dirname(disk), "scale_l480_shard_ratio.json")
        packed = ratio
        if os.path.exists(stored):
            with open(stored) as f:
                packed = json.load(f)["stored_ratio"]  # what the conversion of L480 actually packed
        add(f"sequential disk read of the shards' bytes ({packed:g}:1)", read * packed, "bytes/s")
        extra.update(disk_read_bytes_per_s=read, stored_ratio=packed)
    return extra


KEEP_FREED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(2 << 30)}


def _arrays(w: Workload):
    """The workload's arrays, written (every page resident): one for R240's both cameras, one per camera otherwise."""
    arrays = [np.ones((w.rows, *w.frame), dtype=np.uint8) for _ in range(w.arrays)]
    return arrays[0] if w.arrays == 1 else arrays


def _gathers_keeping_freed_memory(name: str) -> list[tuple[str, float]]:
    """The numpy gathers in a child process started with :data:`KEEP_FREED` (glibc reads it at start only)."""
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import json, sys; sys.path.insert(0, {here!r}); import scale_ceiling as s; "
        f"w = s.WORKLOADS[{name!r}]; d = s._arrays(w); "
        "print(json.dumps([s.gather(d, 100, False, None, w), s.gather(d, 100, True, None, w)]))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, **KEEP_FREED), capture_output=True, text=True, check=True
    )
    plain, copied = json.loads(p.stdout.strip().splitlines()[-1])
    return [
        ("gather, numpy, 1 thread, glibc keeping freed batches", plain),
        ("gather + copy, numpy, 1 thread, glibc keeping freed batches", copied),
    ]


def main(out_path: str, native_path: str | None = None, name: str = "r240") -> dict:
    """Measure every rate of the module's docstring for workload ``name`` and write them to ``out_path``.

    Args:
        out_path: The result JSON.
        native_path: A benchmark result with the workload's native row (its ratios are computed against it).
        name: A key of :data:`WORKLOADS`.

    Returns:
        The result written.
    """
    w = WORKLOADS[name]
    native = None
    if native_path:
        with open(native_path) as f:
            rows = json.load(f)["results"]
        native = next(r["samples_per_s"] for r in rows if r["backend"] == w.native)
    results = []
    ratio = "vs_native_low_dim" if w.native == "native:low_dim" else "vs_native"

    def add(what, per_s, unit="samples/s"):
        row = {"what": what, unit.replace("/", "_per_"): per_s}
        if unit == "samples/s":
            row["gb_per_s"] = per_s * w.sample_bytes / 1e9
            if native:
                row[ratio] = per_s / native
        else:
            row["samples_per_s_equivalent"] = per_s / w.sample_bytes
            if native:
                row[ratio] = per_s / w.sample_bytes / native
        results.append(row)
        print(json.dumps(row))

    extra: dict = {}
    if name == "l480":
        extra = _l480_results(w, add)
    else:
        _copy_results(w, name, add)
    from robo_loaders_plugin.bench.report import machine

    out = {
        "kind": "scale_ceiling",
        "workload": w.title,
        "sample_bytes": w.sample_bytes,
        "array_bytes": w.array_bytes,
        **({} if name == "l480" else {"keep_freed_env": KEEP_FREED}),
        f"{w.native.replace(':', '_')}_samples_per_s": native,
        "native_result": native_path,
        "machine": machine(),
        **extra,
        "results": results,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    return out


def _copy_results(w: Workload, name: str, add) -> None:
    """The in-RAM workloads' rows (module docstring)."""
    data = _arrays(w)
    first = data if isinstance(data, np.ndarray) else data[0]
    half = first[: len(first) // 2]
    dst = np.empty_like(half)
    dst.fill(0)
    for threads in (1, 2):
        add(f"memcpy, {threads} thread(s), {half.nbytes / 1e9:.1f} GB", memcpy(half, dst, threads), "bytes/s")
    del dst
    add("gather, numpy, 1 thread", gather(data, 100, False, None, w))
    add("gather + copy, numpy, 1 thread", gather(data, 100, True, None, w))
    for threads in (1, 2):
        add(f"gather, torch index_select, {threads} thread(s)", gather(data, 100, False, threads, w))
        add(f"gather + copy, torch, {threads} thread(s)", gather(data, 100, True, threads, w))
        add(f"gather into reused buffers, torch, {threads} thread(s)", gather(data, 100, False, threads, w, True))
    del data
    for what, per_s in _gathers_keeping_freed_memory(name):
        add(what, per_s)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("native", nargs="?")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="r240")
    a = parser.parse_args()
    main(a.out, a.native, a.workload)
