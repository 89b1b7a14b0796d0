"""How often ``video_stream`` decodes each unit of a LeRobot dataset (docs/scale.md, L480_5G): a unit decoded more
than once within a pass means its buffer evicted it before its items were served.

``python benchmarks/video_stream_unit_loads.py ROOT REPO_ID PRESET BATCHES [OPTIONS_JSON]``: builds the dataset as
lerobot-train does (batch 64, 2 workers; ``growth_child``), serves BATCHES batches and prints one JSON line: the
buffer's capacity in units, the unit loads, the distinct units loaded and the most loads of one unit.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time


def main(root: str, repo_id: str, preset: str, batches: int, options: dict) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import robo_loaders_plugin.frames.chunks as chunks
    from benchmarks.harness import growth_child

    loads = []
    load = chunks.ChunkFrames._load

    def counted(self, unit):
        loads.append(unit)
        return load(self, unit)

    chunks.ChunkFrames._load = counted
    a = dict(
        framework="lerobot",
        backend="video_stream",
        kwargs=options,
        batch_size=64,
        num_workers=2,
        root=root,
        repo_id=repo_id,
        preset=preset,
    )
    growth_child._imports("lerobot")
    ds, loader, count, _, _ = growth_child._lerobot(a)
    it, served, t = iter(loader), 0, time.perf_counter()
    for _ in range(batches):
        served += count(next(it))
    per = collections.Counter(loads)
    return {
        "preset": preset,
        "options": options,
        "capacity_units": ds.frames.capacity,
        "units": len(ds.frames.units),
        "samples": served,
        "seconds": round(time.perf_counter() - t, 1),
        "unit_loads": len(loads),
        "distinct_units": len(per),
        "most_loads_of_one_unit": max(per.values()),
    }


if __name__ == "__main__":
    out = main(
        sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    )
    print(json.dumps(out), flush=True)
    os._exit(0)  # not a normal exit: decode threads still inside torchcodec abort the interpreter's (docs/scale.md)
