"""Start-up to the first batch, first run against second run of the same dataset (issue 45 item 1: ``gpu_resampler``
maps the tiers its first run kept in the cache instead of reading the source again).

A robomimic low-dim file (``--demos`` of 80-120 steps: 1,000 by default, ~100k steps; 10,000 for issue 45's
million steps; ``sample_data``, no cameras) served by robomimic's own ``SequenceDataset`` (``native``:
``TrainUtils.dataset_factory``, no plugin) and by each plugin backend (``--backends``), each in the DataLoader
robomimic's ``train()`` builds (BC-RNN windows of 10, batch 100, ``hdf5_cache_mode=all`` as robomimic's low-dim
configs), iterated as the patched ``run_epoch`` iterates it. Each run is a fresh process (nothing kept in memory
between runs) timed from just before the dataset is built to its first batch; each round gives every backend a
fresh cache directory, runs it twice (first: builds what it keeps; second: reuses it), and records the machine's
load average before each run.

``python -m benchmarks.tiers_reuse [--data DIR] [--rounds 3] [--demos 1000] [--backends native,...]
[--out benchmarks/results/tiers_reuse.json]``
(data generated into ``DIR`` once, outside the repository). ``python -m benchmarks.tiers_reuse child JSON``: one
run (the parent starts it).
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

BACKENDS = ("native", "datapipe", "gpu_resampler", "compressed_cache", "video_stream")
LOW_DIM = ["object", "robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"]


def child(a: dict) -> dict:
    """One start: the dataset built and its first batch taken, timed (module docstring).

    Args:
        a: ``backend``, ``path``, ``cache_dir``.

    Returns:
        ``build_s``, ``first_batch_s``, ``startup_s`` (their sum), ``summary``.
    """
    import robomimic.algo  # noqa: F401 - registers the observation modalities' encoders
    import robomimic.utils.obs_utils as ObsUtils
    import torch
    from robomimic.config import config_factory

    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = a["path"]
        config.observation.modalities.obs.low_dim = list(LOW_DIM)
        config.observation.modalities.obs.rgb = []
        config.train.seq_length = 10
        config.train.batch_size = 100
        config.train.num_data_workers = 0
        config.train.hdf5_cache_mode = "all"
        config.train.seed = 1
    ObsUtils.initialize_obs_utils_with_config(config)
    t = time.perf_counter()
    if a["backend"] == "native":
        import robomimic.utils.train_utils as TrainUtils

        ds = TrainUtils.dataset_factory(config, list(LOW_DIM))
        loader = torch.utils.data.DataLoader(ds, batch_size=100, shuffle=True, num_workers=0, drop_last=True)
        batches, summary = iter(loader), f"SequenceDataset, {len(ds)} samples"
    else:
        from robo_loaders_plugin.core.iteration import summary_of
        from robo_loaders_plugin.robomimic import dataset_factory
        from robo_loaders_plugin.robomimic.integration import epoch_loader

        with config.values_unlocked():
            config.train.data_backend = a["backend"]
            config.train.data_backend_kwargs = {"cache_dir": a["cache_dir"]}
        ds = dataset_factory(config, list(LOW_DIM))
        loader = torch.utils.data.DataLoader(
            ds, sampler=ds.get_dataset_sampler(), batch_size=100, shuffle=True, num_workers=0, drop_last=True
        )
        batches, summary = iter(epoch_loader(loader)), summary_of(ds)
    build_s = time.perf_counter() - t
    next(batches)
    first_batch_s = time.perf_counter() - t - build_s
    startup_s = build_s + first_batch_s
    return {"build_s": build_s, "first_batch_s": first_batch_s, "startup_s": startup_s, "summary": summary}


def make_data(directory: str, demos: int = 1000) -> str:
    """The low-dim file (generated once; a pure function of its arguments).

    Args:
        directory: Where it goes (outside the repository).
        demos: How many demos of 80-120 steps (10,000: issue 45's million steps).

    Returns:
        Its path.
    """
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    path = os.path.join(directory, f"lowdim_{demos}.hdf5")
    if not os.path.exists(path):
        write_robomimic_hdf5(path, demos=demos, cameras=0, min_length=80, max_length=120, seed=0, progress=False)
    return path


def one_run(backend: str, path: str, cache_dir: str) -> dict:
    """:func:`child` in a fresh process; its row with the load average before it.

    Args:
        backend: ``native`` or a plugin backend.
        path: The HDF5 file.
        cache_dir: The cache directory of the round.

    Returns:
        The row.
    """
    load = os.getloadavg()
    args = json.dumps({"backend": backend, "path": path, "cache_dir": cache_dir})
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.tiers_reuse", "child", args], capture_output=True, text=True, check=True
    )
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["load_before"] = [round(x, 2) for x in load]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="run")
    parser.add_argument("args", nargs="?")
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "robo-loaders-tiers-reuse"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--demos", type=int, default=1000, help="demos in the file (10000: a million steps)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, in the order run")
    parser.add_argument("--out", default="benchmarks/results/tiers_reuse.json")
    a = parser.parse_args()
    if a.what == "child":
        print(json.dumps(child(json.loads(a.args))))
        return
    os.makedirs(a.data, exist_ok=True)
    path = make_data(a.data, a.demos)
    backends = tuple(a.backends.split(","))
    import h5py

    with h5py.File(path, "r") as f:
        steps = int(f["data"].attrs["total"])
    rows: list[dict] = []
    for r in range(a.rounds):
        for backend in backends:
            with tempfile.TemporaryDirectory(dir=a.data, prefix=f"cache-{backend}-") as cache_dir:
                for run in ("first", "second"):
                    row = dict(one_run(backend, path, cache_dir), backend=backend, run=run, round=r)
                    rows.append(row)
                    print(
                        f"round {r} {backend:14s} {run:6s} build {row['build_s']:6.2f} s  first batch "
                        f"{row['first_batch_s']:5.2f} s  load {row['load_before'][0]:.2f}",
                        flush=True,
                    )
                    write(a.out, steps, a.demos, rows)  # after every run: a run stopped early keeps what it measured


def write(out: str, steps: int, demos: int, rows: list[dict]) -> None:
    """The results file: every run's row and, per backend and run, the median start-up over the rounds so far.

    Args:
        out: The JSON file.
        steps: The workload's steps.
        demos: The workload's demos.
        rows: The runs so far.
    """
    medians = {
        f"{b} {run}": statistics.median(x["startup_s"] for x in sel)
        for b in dict.fromkeys(x["backend"] for x in rows)
        for run in ("first", "second")
        if (sel := [x for x in rows if x["backend"] == b and x["run"] == run])
    }
    result = {
        "what": "start-up to the first batch (build + first batch), seconds, first vs second run, median of rounds",
        "workload": f"robomimic low-dim, {demos} demos, {steps} steps, seq_length 10, batch 100, hdf5_cache_mode=all",
        "machine": {"cpus": os.cpu_count(), "note": "1-minute load average before each run recorded per row"},
        "code": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "median_startup_s": medians,
        "rows": rows,
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
