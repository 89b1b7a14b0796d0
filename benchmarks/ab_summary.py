"""Summarise an alternating A/B run of benchmarks/ab_versions.sh: per framework and version, the backend's
samples/s, its ratio to the native loader of the same run, first batch and build time, each the median over rounds
next to every round's value, with the machine's load at the start of each run (from runs.log).

Usage: ``python benchmarks/ab_summary.py DIR BACKEND OLD_REF NEW_REF`` writes DIR/summary.json and prints it.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def runs(directory: Path, version: str, framework: str, backend: str) -> list[dict]:
    """One row per round: the backend's numbers and its ratio to the native loader measured in the same run."""
    rows = []
    for path in sorted(directory.glob(f"{version}_{framework}_r*.json")):
        results = {r["backend"]: r for r in json.loads(path.read_text())["results"]}
        native = next(r for name, r in results.items() if name.startswith("native"))
        mine = results[backend]
        rows.append(
            {
                "round": int(re.search(r"_r(\d+)\.json$", path.name).group(1)),
                "samples_per_s": round(mine["samples_per_s"], 1),
                "native_samples_per_s": round(native["samples_per_s"], 1),
                "vs_native": round(mine["samples_per_s"] / native["samples_per_s"], 2),
                "first_batch_s": round(mine["first_batch_s"], 2),
                "build_s": round(mine.get("build_s", 0.0), 1),
            }
        )
    return rows


def main(directory: str, backend: str, old: str, new: str) -> dict:
    d = Path(directory)
    loads = re.findall(r"round (\d+) (old|new) \S+ load ([\d.]+)", (d / "runs.log").read_text())
    summary: dict = {
        "backend": backend,
        "old": old,
        "new": new,
        "load_at_start": loads and {f"{v}_r{r}": float(x) for r, v, x in loads},
    }
    for framework in ("rm", "lr"):
        for version in ("old", "new"):
            rows = runs(d, version, framework, backend)
            summary[f"{framework}_{version}"] = {
                "rounds": rows,
                "median": {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "round"} if rows else {},
            }
    (d / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5]), indent=2))
