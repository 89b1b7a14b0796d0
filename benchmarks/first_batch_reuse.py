"""Start-up to the first batch of LeRobot's ``compressed_cache``, first run against second run of the same dataset
(issue 45 item 2: the store kept between runs by default, ``keep``, against the RAM store rebuilt every run,
``keep: false``), and where the second run's time goes.

The dataset is the README's LeRobot one: the 20 robosuite Lift demos of ``../shared`` written 10 times with
LeRobot's own writer (10,540 frames, 2 cameras 84x84, AV1), generated once into ``$ROBO_LOADERS_WORKLOADS`` (outside
the repository). Each run is a fresh process, timed as ``lerobot-train`` builds and iterates: ``LeRobotDataset``
with diffusion's ``delta_timestamps``, the backend's dataset (``build_s``), then lerobot-train's DataLoader (spawned
workers, prefetch 4, its ``EpisodeAwareSampler``) to its first batch through the patched ``cycle``
(``first_batch_s``) with ``loader: dataloader``; the variant ``threads`` (``loader: threads``, the default since
90b8e42 wherever no image transforms are enabled) builds the batches in the training process instead. Each round
gives each variant a fresh cache root and runs it twice (first: builds; second: ``keep`` maps the kept store,
``keep: false`` builds its RAM store again), then the second run once more with no DataLoader workers, which takes
the workers' start (spawned interpreters importing torch and LeRobot) out of the first batch. The machine's
1-minute load average is recorded before each run.

``python -m benchmarks.first_batch_reuse [--rounds 3] [--out benchmarks/results/first_batch_reuse.json]``;
``python -m benchmarks.first_batch_reuse child JSON``: one run (the parent starts it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data", "robosuite_lift_84_20demos.hdf5")
REPO_ID = "local/lerobot_lift_x10"
# keep and ram name loader: dataloader (the LeRobot default when they were measured, now the default only where
# image transforms are enabled), so that a rerun measures what the committed results did
VARIANTS = {
    "keep": {"loader": "dataloader"},
    "ram": {"keep": False, "loader": "dataloader"},
    "threads": {"loader": "threads"},
}


def child(a: dict) -> dict:
    """One start (module docstring).

    Args:
        a: ``root``, ``kwargs`` (the backend's options), ``num_workers``, ``batch_size``.

    Returns:
        ``build_s``, ``first_batch_s``, ``startup_s`` (their sum) and the backend's ``summary``.
    """
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.core.iteration import summary_of
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose, cycle
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    torch.manual_seed(0)
    t = time.perf_counter()
    meta = LeRobotDatasetMetadata(REPO_ID, root=a["root"])
    native = LeRobotDataset(
        REPO_ID, root=a["root"], delta_timestamps=delta_timestamps("diffusion", meta), return_uint8=True
    )
    ds = build_dataset(native, choose("compressed_cache", **a["kwargs"]))
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    batch = next(iter(cycle(train_loader(ds, a["batch_size"], a["num_workers"]))))
    first_batch_s = time.perf_counter() - t
    assert len(batch["index"]) == a["batch_size"]
    return {
        "build_s": round(build_s, 3),
        "first_batch_s": round(first_batch_s, 3),
        "startup_s": round(build_s + first_batch_s, 3),
        "summary": summary_of(ds),
    }


def dataset(workloads: str) -> str:
    """The README's LeRobot dataset in ``workloads``, generated when missing.

    Args:
        workloads: ``$ROBO_LOADERS_WORKLOADS``.

    Returns:
        Its root.
    """
    root = os.path.join(workloads, "lerobot_lift_x10")
    if not os.path.isdir(root):
        if not os.path.exists(SHARED):
            raise SystemExit(f"needs {SHARED} (../shared beside the repository)")
        subprocess.run(
            ["robo-loaders", "sample-data", "lerobot", root, "--repo-id", REPO_ID, "--from-robomimic", SHARED,
             "--repeat", "10"],
            check=True,
        )  # fmt: skip
    return root


def run_child(args: dict, cache_root: str) -> dict:
    """One start in a fresh process with ``cache_root`` as the default cache root.

    Args:
        args: The child's arguments.
        cache_root: ``$ROBO_LOADERS_CACHE`` for it.

    Returns:
        The child's row.
    """
    env = dict(os.environ, ROBO_LOADERS_CACHE=cache_root, HF_HUB_OFFLINE="1")
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_batch_reuse", "child", json.dumps(args)],
        capture_output=True, text=True, env=env, cwd=os.path.join(HERE, ".."), timeout=1800,
    )  # fmt: skip
    if p.returncode:
        raise SystemExit(f"child failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    """The parent: rounds of both variants (module docstring), written after every run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variants", default="keep,ram", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "first_batch_reuse.json"))
    a = parser.parse_args(argv)
    workloads = os.environ.get("ROBO_LOADERS_WORKLOADS")
    if not workloads:
        raise SystemExit("set ROBO_LOADERS_WORKLOADS to a directory outside the repository for the dataset")
    root = dataset(workloads)
    rows = []
    for r in range(a.rounds):
        for variant in a.variants.split(","):
            kwargs = VARIANTS[variant]
            with tempfile.TemporaryDirectory(prefix="first-batch-cache-", dir=workloads) as cache_root:
                for run, workers in (("first", a.workers), ("second", a.workers), ("second, no workers", 0)):
                    load = os.getloadavg()[0]
                    args = {"root": root, "kwargs": kwargs, "num_workers": workers, "batch_size": a.batch_size}
                    row = {"round": r, "variant": variant, "run": run, "load_before_1min": round(load, 2)}
                    row.update(run_child(args, cache_root))
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "summary"}), flush=True)
                    write(a, rows)


def write(a, rows: list) -> None:
    """The results file: the rows and each (variant, run)'s median start-up, first batch and build."""
    medians = {}
    for key in sorted({(r["variant"], r["run"]) for r in rows}):
        sel = [r for r in rows if (r["variant"], r["run"]) == key]
        medians[f"{key[0]} {key[1]}"] = {
            f: round(statistics.median(r[f] for r in sel), 3) for f in ("startup_s", "build_s", "first_batch_s")
        }
    out = {
        "what": "LeRobot compressed_cache: start-up to the first batch (build + first batch), seconds, fresh "
        "processes; keep (the default) against keep: false; medians over the rounds",
        "workload": f"{REPO_ID}: ../shared's 20 robosuite Lift demos x10 (10,540 frames, 2 cameras 84x84, AV1), "
        f"diffusion delta_timestamps, batch {a.batch_size}, lerobot-train's DataLoader ({a.workers} spawned "
        "workers, prefetch 4)",
        "machine": {"cpus": os.cpu_count(), "note": "1-min load average before each run in the rows"},
        "script": f"python -m benchmarks.first_batch_reuse --rounds {a.rounds} --variants {a.variants}",
        "median": medians,
        "rows": rows,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
