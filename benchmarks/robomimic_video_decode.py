"""What bounds ``video_stream`` in the robomimic 100-file row of ``benchmarks/mixtures.py`` (issue 44: "where a goal is
missed, the benchmark says what bounds it, measured").

The row's mixture (100 files of 2 demos of 20-24 steps, two 32x32 cameras, weights 1/2/3, BC-RNN windows of 10,
batches of 32, 2 workers) is generated once into ``$ROBO_LOADERS_WORKLOADS/robomimic_video_decode`` (outside the
repository) and served in this process by the hand-written reference and by ``video_stream``
(``benchmarks/mixtures_robomimic_child.run``, the row's own child), alternately, over the row's 30 timed batches and
over a whole pass. Every video segment decoded is counted and timed (``storage.video.decode``, wrapped), and one
segment's decode is split into its parts (opening the MP4 and indexing its packets; decoding its frames to RGB, one
torchcodec call) and timed as PyAV decoded it before, so the result says how much of a batch's time decoding takes;
and timed while another thread runs Python, which says how often a decode gives the GIL up and waits to take it back.
``video_stream``'s rows also say how many of the two cores its timed batches kept busy (this process's CPU time over
their wall time: its batches are built by threads here, where the reference's workers are other processes), and the
row's 30 batches are served once more with 4 workers (``train.num_data_workers``: the threads building batches), so
the result says whether more threads would use the cores the batches leave idle.

``python -m benchmarks.robomimic_video_decode [--rounds 2] [--out RESULT.json]`` (default: its result in
``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import threading
import time

BATCHES = 30  # the row's timed batches (mixtures.SIZES["full"]["robomimic"]["many_batches"])


def _segment_parts(data: bytes, n: int, shape: tuple, repeats: int = 200) -> dict:
    """Milliseconds of one segment's decode, whole and in parts (median of ``repeats``), and the same segment
    decoded as ``storage.video.decode`` did before torchcodec: PyAV, a Python step and an RGB conversion per frame,
    FFmpeg's threads left to their default."""
    import av
    from torchcodec.decoders import VideoDecoder

    from robo_loaders_plugin.storage.video import decode

    def timed(fn, repeats: int = repeats) -> float:
        out = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return round(statistics.median(out) * 1e3, 3)

    def opened():  # the MP4 opened and its packets indexed, as decode opens it
        VideoDecoder(data, seek_mode="exact", num_ffmpeg_threads=1)

    def pyav():
        with av.open(io.BytesIO(data), "r", format="mp4") as c:
            for frame in c.decode(c.streams.video[0]):
                frame.to_ndarray(format="rgb24")

    whole, opening, before = timed(lambda: decode(data, n, shape)), timed(opened), timed(pyav)
    # the same decode while another thread runs Python: each time the call gives the GIL up (its native steps) and
    # wants it back, it waits for the other thread's switch interval (sys.getswitchinterval(), 5 ms by default)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        contended = timed(lambda: decode(data, n, shape), repeats=20)
    finally:
        stop.set()
        spinner.join()
    return {
        "frames": n,
        "shape": list(shape),
        "bytes": len(data),
        "whole_ms": whole,
        "open_ms": opening,
        "frames_and_rgb_ms": round(max(0.0, whole - opening), 3),
        "pyav_per_frame_ms": before,
        "beside_a_python_thread_ms": contended,
        "switch_interval_ms": round(sys.getswitchinterval() * 1e3, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/robomimic_video_decode.json")
    a = ap.parse_args(argv)
    work = os.environ.get("ROBO_LOADERS_WORKLOADS")
    if not work:
        raise SystemExit("set ROBO_LOADERS_WORKLOADS to a directory outside the repository for the generated data")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import robo_loaders_plugin.storage.video as video
    from benchmarks import mixtures_robomimic_child as child
    from benchmarks.mixtures import SIZES
    from benchmarks.mixtures_robomimic import LOW_DIM, RGB, generate

    size = SIZES["full"]["robomimic"]
    base = os.path.join(work, "robomimic_video_decode")
    record = os.path.join(base, "components.json")
    if os.path.exists(record):
        with open(record) as f:
            comps = json.load(f)
    else:
        comps = generate(base, size)["many"]
        with open(record, "w") as f:
            json.dump(comps, f)
    cache = os.path.join(base, "cache")
    samples = 0
    for c in comps:
        samples += child.frames_of(c["path"])
    pass_batches = samples // size["many_batch_size"]

    lock = threading.Lock()
    counted = {"segments": 0, "seconds": 0.0}
    real = video.decode

    def counting(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                counted["segments"] += 1
                counted["seconds"] += time.perf_counter() - t

    video.decode = counting
    from benchmarks import mixtures_child

    timed_part = {"cpu_s": 0.0, "wall_s": 0.0}
    real_timed = mixtures_child.timed_shares

    def timing_cpu(*args, **kwargs):  # the timed batches' CPU time, this process's threads (os.times)
        c, t = os.times(), time.perf_counter()
        try:
            return real_timed(*args, **kwargs)
        finally:
            d = os.times()
            timed_part.update(cpu_s=d.user - c.user + d.system - c.system, wall_s=time.perf_counter() - t)

    mixtures_child.timed_shares = timing_cpu

    def one(backend: str, batches: int, workers: int = 2) -> dict:
        a_ = dict(
            backend=backend,
            kwargs={"cache_dir": cache} if backend != "reference" else {},
            components=comps,
            rgb=RGB,
            low_dim=LOW_DIM,
            seq_length=size["seq_length"],
            cache_mode=size["cache_mode"],
            num_workers=workers,
            seed=0,
            batch_size=size["many_batch_size"],
            batches=batches,
            target_fps=None,
        )
        counted.update(segments=0, seconds=0.0)
        load = os.getloadavg()[0]
        timed_part.update(cpu_s=0.0, wall_s=0.0)
        row = child.run(a_)
        out = {
            "samples_per_s": round(row["samples_per_s"], 1),
            "build_s": round(row["build_s"], 2),
            "segments_decoded": counted["segments"],
            "decode_s": round(counted["seconds"], 3),
            "load_1min": round(load, 2),
            "workers": workers,
        }
        if backend != "reference" and timed_part["wall_s"]:  # the reference's workers are other processes
            out["busy_cores"] = round(timed_part["cpu_s"] / timed_part["wall_s"], 2)
        return out

    one("video_stream", 1)  # converts the files to video shards on first use (not timed)
    runs: dict[str, dict[str, list]] = {}
    for _ in range(a.rounds):
        for backend in ("reference", "video_stream"):
            for label, batches in (("first_30_batches", BATCHES), ("whole_pass", pass_batches)):
                runs.setdefault(f"{backend} {label}", {}).setdefault("rows", []).append(one(backend, batches))
        runs.setdefault("video_stream first_30_batches, 4 workers", {}).setdefault("rows", []).append(
            one("video_stream", BATCHES, workers=4)
        )
    video.decode = real
    mixtures_child.timed_shares = real_timed

    from robo_loaders_plugin.storage.shards import ShardReader

    shards = next(os.path.join(cache, d) for d in sorted(os.listdir(cache)) if d.startswith("robomimic-shards-"))
    reader = ShardReader(shards)
    _, fields = reader.read_episode(0, decode_frames=False)
    segment = fields[f"obs/{RGB[0]}"]
    parts = _segment_parts(bytes(segment.data), segment.shape[0], tuple(segment.shape[1:]))

    summary = {}
    for name, r in runs.items():
        rows = r["rows"]
        summary[name] = {
            "samples_per_s_median": round(statistics.median(x["samples_per_s"] for x in rows), 1),
            "segments_decoded": [x["segments_decoded"] for x in rows],
            "decode_s": [x["decode_s"] for x in rows],
            **({"busy_cores": [x["busy_cores"] for x in rows]} if all("busy_cores" in x for x in rows) else {}),
        }
    import torch

    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch "
        f"{torch.__version__}",
        "components": len(comps),
        "samples_per_pass": samples,
        "batch_size": size["many_batch_size"],
        "pass_batches": pass_batches,
        "segment": parts,
        "runs": runs,
        "summary": summary,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"segment": parts, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
