"""Where a LeRobot mixture's second start goes inside the plugin's ``build_mixture`` (issue 44 item 3's other
half): N small components (``benchmarks/mixture_index.py``'s datasets), ``compressed_cache`` with its caches built
by a first ``build_mixture`` and reused by the measured ones; each part's seconds from ``cProfile`` (cumulative,
summed over components), the median of ``--repeats`` builds. LeRobot's own ``LeRobotDataset`` per component is
built once, before, and not counted (every loader pays it).

``python -m benchmarks.mixture_startup --components 100 --json out.json``; run it with another checkout first on
``PYTHONPATH`` to compare versions on the same data (``--data`` and ``--cache`` kept between runs).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

# The parts named in the issue, as (label, module file suffix, function name); cumulative seconds.
PARTS = (
    ("build_mixture", "lerobot/mixture.py", "build_mixture"),
    ("build_dataset (backend, per component)", "lerobot/single.py", "build_dataset"),
    ("check_meta_match", "lerobot/dataset.py", "check_meta_match"),
    ("cache.entries", "storage/cache.py", "entries"),
    ("footprint plans", "mixtures/footprint.py", "check_mixture_fits"),
    ("mixture_episodes", "lerobot/mixture_meta.py", "mixture_episodes"),
    ("sampler_rows", "lerobot/mixture.py", "sampler_rows"),
)


def parts_of(profile: cProfile.Profile) -> dict:
    """Each part's cumulative seconds in ``profile``."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]  # its table, undeclared in the stubs
    out = {}
    for label, file, name in PARTS:
        out[label] = round(
            sum(v[3] for (f, _, fn), v in stats.items() if fn == name and f.replace(os.sep, "/").endswith(file)), 3
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--components", type=int, default=100)
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "robo-loaders-mixture-index"))
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "robo-loaders-mixture-startup-cache"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--label", default="")
    p.add_argument("--json")
    a = p.parse_args(argv)
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    import robo_loaders_plugin
    from benchmarks.mixture_index import components
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.lerobot.flags import choose
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

    comps = components(a.data, a.components, a.components)
    spec = parse({"components": comps})
    natives = [LeRobotDataset(c["repo_id"], root=c["root"]) for c in comps]
    choice = choose("compressed_cache", cache_dir=a.cache)
    t = time.perf_counter()
    build_mixture(spec, natives, choice, seed=0)  # builds (or reuses) the caches
    first = time.perf_counter() - t
    rows, walls = [], []
    load = [os.getloadavg()[0]]
    for _ in range(a.repeats):
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        build_mixture(spec, natives, choice, seed=0)
        prof.disable()
        walls.append(time.perf_counter() - t)
        rows.append(parts_of(prof))
    load.append(os.getloadavg()[0])
    row = {
        "label": a.label or robo_loaders_plugin.__file__,
        "components": a.components,
        "first_build_s": round(first, 3),
        "wall_s": round(statistics.median(walls), 3),
        "profiled_s": {k: statistics.median(r[k] for r in rows) for k in rows[0]},
        "load_avg": [round(x, 2) for x in load],
    }
    print(json.dumps(row, indent=1), flush=True)
    if a.json:
        doc = {"kind": "mixture_startup", "machine": machine(), "repeats": a.repeats, "rows": [row]}
        if os.path.exists(a.json):
            with open(a.json) as f:
                doc = json.load(f)
            doc["rows"].append(row)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
