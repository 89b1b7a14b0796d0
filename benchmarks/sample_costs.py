"""Where a served sample's time goes, per backend (issue 45 item 3): each backend built as the framework builds it
(robomimic's ``train()``, ``lerobot-train``), its batches iterated through the framework's loop path for a fixed
time while ``py-spy`` samples every thread of the process and of its DataLoader workers, and each sample of a busy
thread put in one stage by the innermost frame that names one (:data:`STAGES`).

``python benchmarks/sample_costs.py OUT.json --workload w1|w2 [--backends a,b] [--seconds S] [--raw DIR]``

- ``w1``: robomimic's Lift-sized image set of ``benchmarks/robomimic_lift.sh`` (``$ROBO_LOADERS_WORKLOADS/
  lift_like.hdf5``, generated there when missing), BC-RNN windows of 10, batch 64, 2 workers/threads;
- ``w2``: LeRobot v3 of ``benchmarks/lerobot.sh`` (``$ROBO_LOADERS_WORKLOADS/lerobot_lift_x10``: the shared renders
  written 10 times), diffusion windows, batch 64, 2 workers; ``streaming`` is LeRobot's ``StreamingLeRobotDataset``.

Why a sampling profiler: the backends serve from threads (``SamplerBatches``, the pipelines' nodes) and the native
loaders from worker processes, where ``cProfile`` sees only the thread that enabled it; py-spy (``pip install
py-spy``, a benchmark-only tool) reads every thread's stack from outside without changing what it measures more
than a few percent (``--nonblocking``: the process is never stopped). Only busy samples are counted (py-spy leaves
out idle threads), so the stages are shares of the CPU time spent serving, the training process's waits excluded;
``samples_per_s`` is the rate of the same profiled loop (a few percent under an unprofiled one).

Each result row: the backend, ``samples_per_s``, ``cpu_s_per_1k_samples`` (busy CPU seconds of every thread and
worker per 1,000 samples served) and ``stages`` (each stage's share of those and its ms per 1,000 samples).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from robo_loaders_plugin.bench.runner import backend_of, options_for

# (stage, function-name prefixes, file-path parts), each list space-separated: the innermost frame of a sample that
# any rule names decides its stage, the first rule naming that frame wins; a stack that no rule names is "other"
STAGE_RULES: list[tuple[str, str, str]] = [
    ("queue", "_new_shared rebuild_ _rebuild dumps loads _worker_loop",
     "/multiprocessing/ /queue.py /threading.py /concurrent/futures/"),
    ("decode", "decompress decode _decode",
     "/storage/codec.py /encoded_frames.py /blosc2/ /torchcodec/ /av/ /lz4/ /zstandard/ /video_utils.py"),
    ("read", "read _read pread readinto",
     "/h5py/ /pyarrow/ /storage/shards/ /fsspec/ /datasets/arrow_dataset.py /datasets/formatting/"),
    ("copy", "copy_served pad_sequence copyto astype contiguous permute concatenate", "/storage/frame_layout.py"),
    ("gather", "take gather copy_windows index_select _gather_rows host_gather",
     "/robo_loaders_plugin/frames/ /gpu_resampler/tensors.py /gpu_resampler/tiers.py"),
    ("collate", "collate __getitem__ __getitems__ get_item get_sequence get_obs_sequence from_numpy to_torch row",
     "/robo_loaders_plugin/windows/ /_utils/collate.py /_utils/fetch.py /robomimic/utils/dataset.py "
     "/lerobot/datasets/lerobot_dataset.py"),
    ("plan", "plan permutation shuffle",
     "/robo_loaders_plugin/pipeline/ /torch/utils/data/sampler.py /lerobot/datasets/sampler.py /torchdata/nodes/"),
]  # fmt: skip
STAGES = [(stage, tuple(funcs.split()), tuple(paths.split())) for stage, funcs, paths in STAGE_RULES]


def _parts(frame: str) -> tuple[str, str]:
    """``function (file:line)`` as (function's last name, file)."""
    func, _, rest = frame.partition(" (")
    return func.rpartition(".")[2], "/" + rest.rpartition(":")[0]  # py-spy's paths are relative to sys.path


def stage_of(stack: list[str]) -> str:
    """The stage of one sampled stack (root first): that of the innermost frame any rule of :data:`STAGES` names
    (by the function's name or its file's path).

    Args:
        stack: py-spy's frames of one sample, root first, each ``function (file:line)``.

    Returns:
        A stage name, or ``"other"``.
    """
    for frame in reversed(stack):
        func, path = _parts(frame)
        for stage, funcs, paths in STAGES:
            if func.startswith(funcs) or any(p in path for p in paths):
                return stage
    return "other"


def read_raw(path: str) -> collections.Counter:
    """py-spy's raw (folded) output as sample counts per stage.

    Args:
        path: The file ``py-spy record -f raw`` wrote (``frame;frame;... count`` per line).

    Returns:
        Samples per stage.
    """
    counts: collections.Counter = collections.Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, n = line.rpartition(" ")
            counts[stage_of(stack.split(";"))] += int(n)
    return counts


class Profiled:
    """py-spy recording this process and its children for as long as the ``with`` block runs."""

    def __init__(self, out: str, rate: int = 250):
        self.out, self.rate = out, rate

    def __enter__(self):
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if not os.path.exists(spy):
            raise SystemExit("sample_costs: py-spy is not installed here: pip install py-spy")
        cmd = [spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--nonblocking", "-r", str(self.rate)]
        cmd += ["-f", "raw", "-o", self.out]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches to every thread and worker before the timed loop
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(2)  # SIGINT: py-spy writes what it recorded and exits
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode not in (0, -2) or not os.path.exists(self.out):
            raise SystemExit(f"sample_costs: py-spy failed: {err.decode(errors='replace')[-500:]}")


def cpu_seconds() -> tuple[float, float, int]:
    """User and system CPU seconds and minor page faults of this process and every process under it (a
    DataLoader's workers), from ``/proc``: ``getrusage`` counts children only once they have exited.

    Returns:
        ``(user s, system s, minor faults)``.
    """
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            parents[int(name)], stats[int(name)] = int(fields[1]), fields
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in mine} - mine
        grew, mine = bool(more), mine | more
    mine = {p for p in mine if "py-spy" not in _comm(p)}
    user = sum(int(stats[p][11]) for p in mine if p in stats) / tick
    system = sum(int(stats[p][12]) for p in mine if p in stats) / tick
    faults = sum(int(stats[p][7]) for p in mine if p in stats)
    return user, system, faults


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read()
    except OSError:
        return ""


WARM_UP_BATCHES = 13  # untimed: every spawned DataLoader worker started and its prefetch (2 workers x 4) filled


def timed_loop(loader, seconds: float, count, profile=None) -> tuple[int, float, tuple]:
    """Iterate ``loader`` for ``seconds``, pass after pass as a training run does, after :data:`WARM_UP_BATCHES`
    untimed and unprofiled ones (worker start-up is not what a sample costs).

    Args:
        loader: What the framework's loop iterates.
        seconds: How long to time it.
        count: ``count(batch)``: the samples in a batch.
        profile: A context manager around the timed part only (:class:`Profiled`), or ``None``.

    Returns:
        ``(samples served, seconds, (user s, system s, minor faults) spent meanwhile)``.
    """
    import contextlib

    it = iter(loader)
    for _ in range(WARM_UP_BATCHES):
        next(it)
    with profile if profile is not None else contextlib.nullcontext():
        before = cpu_seconds()
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds:
            try:
                batch = next(it)
            except StopIteration:
                it = iter(loader)
                continue
            n += count(batch)
        dt = time.perf_counter() - t
        after = cpu_seconds()
    return n, dt, tuple(y - x for x, y in zip(before, after))


def w1_loader(backend: str, options: dict):
    """A robomimic backend built as ``train()`` builds it, and what an epoch iterates (``bench.robomimic_run``)."""
    import numpy as np
    import robomimic.utils.obs_utils as ObsUtils
    import torch

    from robo_loaders_plugin.bench.robomimic_bench import parse_backend
    from robo_loaders_plugin.bench.robomimic_run import make_config
    from robo_loaders_plugin.robomimic import dataset_factory
    from robo_loaders_plugin.robomimic.compat import register_observation_encoders
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    register_observation_encoders()
    torch.manual_seed(0)
    np.random.seed(0)
    name, mode = parse_backend(backend_of(backend))
    a = dict(
        dataset=w1_data(),
        seq_length=10,
        frame_stack=1,
        batch_size=64,
        num_workers=2,
        cache_mode=mode,
        backend=name,
        kwargs=options,
    )
    config, keys = make_config(a)
    ObsUtils.initialize_obs_utils_with_config(config)
    ds = dataset_factory(config, keys)
    loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=2, drop_last=True)
    return epoch_loader(loader), lambda b: len(b["actions"])


def w2_loader(backend: str, options: dict):
    """A LeRobot backend built as ``lerobot-train`` builds it and what its patched ``cycle`` yields
    (``bench.lerobot_run``), or LeRobot's ``StreamingLeRobotDataset`` as ``--dataset.streaming=true`` builds it."""
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose, cycle
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    torch.manual_seed(0)
    root, repo = w2_data()
    meta = LeRobotDatasetMetadata(repo, root=root)
    delta = delta_timestamps("diffusion", meta)
    if backend == "streaming":
        from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

        ds = StreamingLeRobotDataset(repo, root=root, delta_timestamps=delta, max_num_shards=2, return_uint8=True)
        loader = torch.utils.data.DataLoader(
            ds,
            batch_size=64,
            num_workers=2,
            prefetch_factor=4,
            persistent_workers=True,
            multiprocessing_context="spawn",
        )
        return loader, lambda b: len(b["index"])
    ds = LeRobotDataset(repo, root=root, delta_timestamps=delta, return_uint8=True)
    if backend != "native":
        ds = build_dataset(ds, choose(backend_of(backend), **options))
    return cycle(train_loader(ds, 64, 2)), lambda b: len(b["index"])


def workloads_dir() -> str:
    d = os.environ.get("ROBO_LOADERS_WORKLOADS")
    if not d:
        raise SystemExit("sample_costs: set ROBO_LOADERS_WORKLOADS to a directory outside the repository")
    os.makedirs(d, exist_ok=True)
    return d


def _sample_data(kind: str, out: str, options: str, *more: str) -> None:
    """``robo-loaders sample-data KIND OUT`` with ``options`` (space-separated) and ``more`` (paths, kept whole): a
    workload generated where it is missing."""
    subprocess.run(["robo-loaders", "sample-data", kind, out, *options.split(), *more], check=True)


def w1_data() -> str:
    path = os.path.join(workloads_dir(), "lift_like.hdf5")
    if not os.path.exists(path):
        _sample_data("robomimic", path, "--demos 200 --min-length 45 --max-length 55 --seed 0")
    return path


def w2_data() -> tuple[str, str]:
    here = os.path.dirname(os.path.abspath(__file__))
    shared = os.path.join(here, "..", "..", "shared", "data", "robosuite_lift_84_20demos.hdf5")
    if not os.path.exists(shared):
        raise SystemExit(f"sample_costs: w2 needs the shared renders {shared}")
    root = os.path.join(workloads_dir(), "lerobot_lift_x10")
    if not os.path.isdir(root):
        _sample_data("lerobot", root, "--repo-id local/lerobot_lift_x10 --repeat 10 --from-robomimic", shared)
    return root, "local/lerobot_lift_x10"


WORKLOAD_TITLES = {
    "w1": "W1: robomimic Lift-sized image set (200 demos, 2 cameras 84x84), BC-RNN windows of 10",
    "w2": "W2: LeRobot v3 of the shared Lift renders x10 (2 cameras 84x84, AV1), diffusion windows",
}


def costs_table(payload: dict) -> str:
    """A ``sample_costs`` result as a markdown table (the README tables' marker renders it).

    Args:
        payload: The loaded result.

    Returns:
        One row per backend: samples/s, CPU per sample, cores busy, page faults per sample, and each stage's share.
    """
    stages = payload["stages"]
    lines = [
        "| backend | samples/s | CPU ms per sample (user + system) | cores busy | page faults per sample | "
        + " | ".join(stages)
        + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(stages),
    ]
    for r in payload["results"]:
        cpu = r["user_ms_per_sample"] + r["system_ms_per_sample"]
        shares = r["stages"]
        cells = [
            f"`{r['backend']}`",
            f"{r['samples_per_s']:.0f}",
            f"{r['user_ms_per_sample']:.3f} + {r['system_ms_per_sample']:.3f}",
            f"{cpu * r['samples_per_s'] / 1000:.2f}",
            f"{r['minor_faults_per_sample']:.1f}",
        ] + [f"{shares[s]['share']:.0%}" if shares.get(s, {}).get("share", 0) >= 0.005 else "-" for s in stages]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


DEFAULT_BACKENDS = {
    "w1": "native:low_dim,compressed_cache,datapipe,gpu_resampler",
    "w2": "native,streaming,compressed_cache,compressed_cache#dataloader,datapipe,gpu_resampler,video_stream",
}
# a "#tag" runs its backend again with these options (more with --backend-kwargs LABEL=JSON): compressed_cache's
# LeRobot default builds batches in threads; #dataloader is its default where image transforms are enabled
LABEL_OPTIONS = {"compressed_cache#dataloader": {"loader": "dataloader"}}


def child(workload: str, backend: str, options: dict, seconds: float, raw: str) -> dict:
    """One backend's profiled loop (run in a fresh process: a backend's threads and workers end with it)."""
    loader, count = (w1_loader if workload == "w1" else w2_loader)(backend, options)
    n, dt, (user, system, faults) = timed_loop(loader, seconds, count, Profiled(raw))
    counts = read_raw(raw)
    total = sum(counts.values())
    return dict(
        backend=backend,
        options=options,
        samples=n,
        seconds=dt,
        samples_per_s=n / dt,
        busy_samples=total,
        stage_samples=dict(counts),
        user_ms_per_sample=1e3 * user / n,
        system_ms_per_sample=1e3 * system / n,
        minor_faults_per_sample=faults / n,
        load_1min=[os.getloadavg()[0]],
    )


def summarize(row: dict, rate: int) -> dict:
    """A child's row with CPU seconds per 1,000 samples, per stage and in all (py-spy samples at ``rate`` Hz)."""
    total = row["busy_samples"]
    cpu_s = total / rate
    per_k = 1000.0 / row["samples"]
    stages = {
        s: dict(share=c / total, ms_per_1k_samples=1000.0 * c / rate * per_k)
        for s, c in sorted(row["stage_samples"].items(), key=lambda kv: -kv[1])
    }
    return dict(row, cpu_s_per_1k_samples=cpu_s * per_k, stages=stages)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--workload", choices=["w1", "w2"], default="w1")
    p.add_argument("--backends", default=None)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rate", type=int, default=250)
    p.add_argument("--raw", default=None, help="keep py-spy's raw stacks in this directory")
    p.add_argument(
        "--backend-kwargs", action="append", default=[], help="LABEL=JSON: options of a backend or name#tag label"
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        raw_path = os.path.join(a.raw, f"{a.workload}_{a.child}.txt")
        row = child(a.workload, a.child, json.loads(a.options), a.seconds, raw_path)
        with open(a.out, "w") as f:
            json.dump(row, f)
        return
    raw = a.raw or tempfile.mkdtemp(prefix="sample_costs_")
    os.makedirs(raw, exist_ok=True)
    given = dict(LABEL_OPTIONS)
    for spec in a.backend_kwargs:
        label, _, js = spec.partition("=")
        given[label] = json.loads(js)
    rows = []
    for backend in (a.backends or DEFAULT_BACKENDS[a.workload]).split(","):
        out = os.path.join(raw, f"{a.workload}_{backend}.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            out,
            "--workload",
            a.workload,
            "--seconds",
            str(a.seconds),
            "--rate",
            str(a.rate),
            "--raw",
            raw,
            "--child",
            backend,
            "--options",
            json.dumps(options_for(backend, given)),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            rows.append(summarize(json.load(f), a.rate))
        r = rows[-1]
        top = ", ".join(f"{s} {v['share']:.0%}" for s, v in r["stages"].items())
        print(
            f"{backend}: {r['samples_per_s']:.0f} samples/s, CPU {r['user_ms_per_sample']:.3f} + "
            f"{r['system_ms_per_sample']:.3f} ms per sample (user + system), {top}"
        )
    from robo_loaders_plugin.bench.report import code_version, machine

    settings = dict(batch_size=64, num_workers=2, seconds=a.seconds, rate_hz=a.rate)
    settings.update(seq_length=10) if a.workload == "w1" else settings.update(preset="diffusion")
    result = dict(
        kind="sample_costs",
        framework="robomimic" if a.workload == "w1" else "lerobot",
        workload=WORKLOAD_TITLES[a.workload],
        settings=settings,
        stages=[s for s, _, _ in STAGES] + ["other"],
        machine=machine(),
        code=code_version(),
        results=rows,
    )
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
