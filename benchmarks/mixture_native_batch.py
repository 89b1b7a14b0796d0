"""What one batch of a ``native`` LeRobot mixture costs against the hand-written reference's, in one process.

Why: ``benchmarks/mixtures.py`` measures the ``native`` mixture below the reference (0.89x with 3 components,
0.74x with 100) with both building batches in 2 worker processes; this separates the batch's own cost from
everything around it. The components are ``mixtures.py``'s ``layouts`` setting (3 LeRobot datasets, 3 camera
layouts, ACT's delta timestamps), generated once into ``$ROBO_LOADERS_WORKLOADS`` (outside the repository). Each
round builds the same batches of 64 random indices both ways in this process, without workers: the reference's
``default_collate`` of its ``ConcatDataset``'s items (``benchmarks/mixtures_child.reference_loader``), and the
mixture's ``collate`` (each component's part from its ``LeRobotDataset``'s items, renamed and joined). A profile of
one more round each splits an item's time into LeRobot's parts (``_query_hf_dataset``: the parquet rows of the
window; ``_query_videos``: the frames) and the mixture's own work (``collate`` minus the items).

``python -m benchmarks.mixture_native_batch [--rounds 3] [--batches 8] [--out RESULT.json]`` (default: its
result in ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import time

PARTS = ("get_item", "_query_hf_dataset", "_query_videos")


def _seconds(profile: cProfile.Profile, name: str, file_part: str = "") -> float:
    """Cumulative seconds of the functions called ``name`` (in a file whose path contains ``file_part``)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return sum(v[3] for (f, _, fn), v in stats.items() if fn == name and file_part in f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--out", default="benchmarks/results/mixture_native_batch.json")
    a = ap.parse_args(argv)
    work = os.environ.get("ROBO_LOADERS_WORKLOADS")
    if not work:
        raise SystemExit("set ROBO_LOADERS_WORKLOADS to a directory outside the repository for the generated data")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from benchmarks import mixtures
    from benchmarks.mixtures_child import reference_loader
    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    base = os.path.join(work, "mixture_native_batch")
    record = os.path.join(base, "components.json")
    if os.path.exists(record):
        with open(record) as f:
            comps = json.load(f)
    else:
        comps = mixtures.generate_throughput(base, mixtures.SIZES["full"])["layouts"]
        with open(record, "w") as f:
            json.dump(comps, f)
    natives, deltas = [], []
    for c in comps:
        meta = LeRobotDatasetMetadata(c["repo_id"], root=c["root"])
        delta = delta_timestamps("act", meta)
        natives.append(LeRobotDataset(c["repo_id"], root=c["root"], delta_timestamps=delta, return_uint8=True))
        deltas.append(delta)
    reference = reference_loader(natives, comps, deltas, 64, 0, 0).dataset
    mix = build_mixture(parse({"components": comps}), natives, choose("native"), seed=0)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(mix), 64).tolist() for _ in range(a.batches)]

    def ref_round():
        for b in batches:
            torch.utils.data.default_collate([reference[i] for i in b])

    def mix_round():
        for b in batches:
            mix.collate(b)

    ways = {"reference": ref_round, "native": mix_round}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    loads = []
    for _ in range(a.rounds):
        loads.append(os.getloadavg()[0])
        for name, fn in ways.items():
            t = time.perf_counter()
            fn()
            rates[name].append(a.batches * 64 / (time.perf_counter() - t))
    profile_s = {}
    for name, fn in ways.items():
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        items = _seconds(prof, "get_item")
        split = {p: round(_seconds(prof, p) / (a.batches * 64) * 1e3, 2) for p in PARTS}
        if name == "native":
            split["mixture_own_ms"] = round((_seconds(prof, "collate", "mixtures") - items) / (a.batches * 64) * 1e3, 3)
        profile_s[name] = split
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch "
        f"{torch.__version__}",
        "load_1min": loads,
        "batch_size": 64,
        "batches_per_round": a.batches,
        "samples_per_s_in_process": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "median": {k: round(statistics.median(v), 1) for k, v in rates.items()},
        "ms_per_item_profiled": profile_s,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
