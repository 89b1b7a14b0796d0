"""Compare lossless codecs on camera frames: ratio, encode speed, decode time per frame into a preallocated array.

    python benchmarks/codecs.py [--shared ../shared/data/robosuite_lift_84_20demos.hdf5] [--json OUT]

Runs on a generated Lift-like dataset and, when present, on the real robosuite renders in ../shared. Blosc2 is
measured with each of its codecs; the standalone ``lz4`` and ``zstandard`` packages (dev extra) are measured
too, through their bytes-returning APIs plus the copy into the frame array that they force.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import h5py
import numpy as np
from tabulate import tabulate

from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5
from robo_loaders_plugin.storage.codec import FrameCodec, use_single_thread

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data", "robosuite_lift_84_20demos.hdf5")


def load_frames(path, demos=10):
    with h5py.File(path, "r") as f:
        names = sorted(f["data"].keys(), key=lambda n: int(n[5:]))[:demos]
        cams = [k for k in f[f"data/{names[0]}/obs"] if k.endswith("_image")]
        return np.concatenate([f[f"data/{n}/obs/{c}"][()] for n in names for c in cams])


def candidates():
    for codec in ("lz4", "lz4hc", "zstd", "blosclz"):
        for filt in ("none", "shuffle", "bitshuffle"):
            for level in (1, 5, 9):
                c = FrameCodec(codec, level, filt)
                yield f"blosc2 {codec} L{level} {filt}", c.compress, c.decompress_into
    try:
        import lz4.block as lz4b

        for mode, kw in (("fast", {}), ("hc9", {"mode": "high_compression", "compression": 9})):
            yield (
                f"lz4 package {mode}",
                lambda x, kw=kw: lz4b.compress(x.tobytes(), store_size=False, **kw),
                lambda b, o: o.reshape(-1).__setitem__(
                    slice(None), np.frombuffer(lz4b.decompress(b, uncompressed_size=o.nbytes), np.uint8)
                ),
            )
    except ImportError:
        pass
    try:
        import zstandard

        for level in (1, 3, 9):
            comp, dec = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
            yield (
                f"zstandard package L{level}",
                lambda x, c=comp: c.compress(x.tobytes()),
                lambda b, o, d=dec: o.reshape(-1).__setitem__(slice(None), np.frombuffer(d.decompress(b), np.uint8)),
            )
    except ImportError:
        pass


def measure(frames):
    rows = []
    use_single_thread()
    for name, enc, dec in candidates():
        t = time.perf_counter()
        blobs = [enc(x) for x in frames]
        t_enc = time.perf_counter() - t
        out = np.zeros_like(frames)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for b, o in zip(blobs, out):
                dec(b, o)
            best = min(best, time.perf_counter() - t)
        assert out.tobytes() == frames.tobytes(), f"{name} is not lossless"
        rows.append(
            {
                "codec": name,
                "ratio": frames.nbytes / sum(len(b) for b in blobs),
                "encode_MBps": frames.nbytes / t_enc / 1e6,
                "decode_us_per_frame": best / len(frames) * 1e6,
            }
        )
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=SHARED)
    ap.add_argument("--json")
    args = ap.parse_args()
    sets = {}
    with tempfile.TemporaryDirectory() as d:
        path = write_robomimic_hdf5(os.path.join(d, "s.hdf5"), demos=10, image_size=84, seed=0, progress=False)
        sets["generated sample data (10 demos, 2x84x84)"] = load_frames(path)
    if os.path.exists(args.shared):
        sets["robosuite Lift renders (10 demos, 2x84x84)"] = load_frames(args.shared)
    result = {}
    for label, frames in sets.items():
        rows = measure(frames)
        result[label] = rows
        print(f"\n{label}: {len(frames)} frames")
        print(
            tabulate(
                [
                    [r["codec"], f"{r['ratio']:.2f}", f"{r['encode_MBps']:.0f}", f"{r['decode_us_per_frame']:.1f}"]
                    for r in rows
                ],
                headers=["codec", "ratio", "encode MB/s", "decode us/frame"],
            )
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
