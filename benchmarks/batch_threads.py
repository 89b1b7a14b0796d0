"""How many batch threads serve fastest (issues 44 and 45: "where a goal is missed, say what bounds it, measured"):
``compressed_cache`` and ``gpu_resampler`` through ``lerobot-train``'s DataLoader and ``cycle``, at 0, 1, 2 and 4
batch threads (their count is the DataLoader's ``num_workers``; 0 builds each batch on the training thread).

Why: both backends build a batch in the training process, by threads that share one GIL. Their per-batch work at
small frames (32x32 to 84x84) is Python and small numpy calls, and frames under 64 kB are decompressed with the GIL
held (``storage.codec``), so a second thread mostly takes turns with the first, each turn a hand-off between
threads. This measures what that costs, on every thread count in one process, round by round in turn, so the
machine's drift (large on these shared 2-core machines) falls on every count alike.

``python -m benchmarks.batch_threads run --json benchmarks/results/batch_threads.json`` measures the Lift dataset of
``../shared/data`` (``--root``/``--repo-id`` for another LeRobot dataset) with ACT and diffusion windows; with
``--pretrain DIR`` (a directory ``mixtures_pretraining run --data DIR --generate-only`` filled) also its
400-component mixture and its one dataset of the same frames. ``table RESULT`` prints docs/benchmarks.md's table.
Caches go to a fresh directory in ``$ROBO_LOADERS_WORKLOADS`` (else the system's temporary directory), removed after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

from benchmarks.mixtures import echo, work_dir, write_result

BACKENDS = ("compressed_cache", "gpu_resampler")
OPTIONS = {"gpu_resampler": {"device": "cpu"}}
THREADS = (0, 1, 2, 4)
PRESETS = ("act", "diffusion")
SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
LIFT = (os.path.join(SHARED, "robosuite_lift_84_20demos_lerobot"), "local/robosuite_lift")
# docs/benchmarks.md holds table() of the committed result between these lines (benchmarks/tests checks it)
DOC_BEGIN = "<!-- python -m benchmarks.batch_threads table benchmarks/results/batch_threads.json -->"
DOC_END = "<!-- /python -m benchmarks.batch_threads table -->"


def rates_by_threads(dataset, threads, batch_size: int, rounds: int, round_s: float, warm_s: float) -> dict:
    """Samples/s of ``dataset`` served by ``lerobot-train``'s DataLoader and ``cycle`` at each thread count.

    Every count gets its own loader on the same dataset, served ``warm_s`` untimed, then the counts are timed in
    turn, one round of ``round_s`` each, ``rounds`` times.

    Args:
        dataset: A backend's dataset (or a mixture) as ``lerobot-train`` builds it.
        threads: The thread counts (DataLoader ``num_workers``).
        batch_size: Samples per batch.
        rounds: Rounds per count.
        round_s: Seconds per round.
        warm_s: Seconds served untimed first, per count.

    Returns:
        ``{threads: [samples/s of each round]}``.
    """
    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.lerobot.integration import cycle

    loaders = {n: cycle(train_loader(dataset, batch_size, n)) for n in threads}
    for it in loaders.values():
        t = time.perf_counter()
        next(it)
        while time.perf_counter() - t < warm_s:
            next(it)
    rates: dict = {n: [] for n in threads}
    for _ in range(rounds):
        for n, it in loaders.items():
            t, served = time.perf_counter(), 0
            while True:
                served += len(next(it)["index"])
                if time.perf_counter() - t >= round_s:
                    break
            rates[n].append(served / (time.perf_counter() - t))
    for it in loaders.values():  # end the passes' threads before the next dataset
        getattr(it, "close", lambda: None)()
    return rates


def _rows(workload: str, backend: str, preset: str, rates: dict) -> list[dict]:
    medians = {n: statistics.median(v) for n, v in rates.items()}
    one = medians.get(1)
    return [
        {
            "workload": workload,
            "backend": backend,
            "preset": preset,
            "threads": n,
            "samples_per_s": round(m, 1),
            "rounds": [round(r, 1) for r in rates[n]],
            "vs_one_thread": round(m / one, 3) if one else None,
        }
        for n, m in medians.items()
    ]


def _lift(root: str, repo_id: str, backend: str, preset: str, s: dict) -> list[dict]:
    from lerobot.datasets import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.presets import delta_timestamps
    from robo_loaders_plugin.lerobot.single import build_dataset

    delta = delta_timestamps(preset, LeRobotDatasetMetadata(repo_id, root=root))
    native = LeRobotDataset(repo_id, root=root, delta_timestamps=delta, return_uint8=True)
    ds = build_dataset(native, choose(backend, **OPTIONS.get(backend, {})), batch_size=s["batch_size"])
    try:
        rates = rates_by_threads(ds, s["threads"], s["batch_size"], s["rounds"], s["round_s"], s["warm_s"])
    finally:
        ds.close()
    return _rows(os.path.basename(os.path.normpath(root)), backend, preset, rates)


def _pretraining(data: str, backend: str, s: dict) -> list[dict]:
    """The 400-component mixture of ``mixtures_pretraining`` and its one dataset, at each thread count."""
    from benchmarks.mixture_batch_cost import _natives
    from benchmarks.mixtures_pretraining import SPEC, _child_components, generated
    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

    comps, single, _ = generated(data, "full")
    rows = []
    for name, part in (("pretraining, 400 components", comps[:400]), ("pretraining, one dataset", [single])):
        spec = {"components": _child_components(part), **(SPEC if len(part) > 1 else {})}
        mix = build_mixture(parse(spec), _natives(part), choose(backend, **OPTIONS.get(backend, {})), seed=0)
        try:
            rates = rates_by_threads(mix, s["threads"], s["batch_size"], s["rounds"], s["round_s"], s["warm_s"])
        finally:
            mix.close()
        rows += _rows(name, backend, "act", rates)
    return rows


def run(
    root: str,
    repo_id: str,
    backends=BACKENDS,
    presets=PRESETS,
    threads=THREADS,
    pretrain: str | None = None,
    pretrain_threads=(1, 2),
    batch_size: int = 32,
    rounds: int = 5,
    round_s: float = 2.0,
    warm_s: float = 3.0,
    workdir: str | None = None,
) -> dict:
    """Every backend, preset and thread count on one LeRobot dataset (and the pretraining mixture, ``pretrain``).

    Args:
        root: The LeRobot dataset's root.
        repo_id: Its repo id.
        backends: The backends measured.
        presets: The policies' windows (``lerobot.presets``).
        threads: The thread counts on the dataset.
        pretrain: ``mixtures_pretraining``'s kept full datasets, or ``None``.
        pretrain_threads: The thread counts on the pretraining mixture and its one dataset.
        batch_size: Samples per batch.
        rounds: Rounds per thread count (the median reported).
        round_s: Seconds per round.
        warm_s: Seconds served untimed first, per thread count.
        workdir: Where the caches go (default: ``$ROBO_LOADERS_WORKLOADS``).

    Returns:
        The result: ``settings``, ``machine``, ``code``, ``load_avg`` (1-minute, before and after) and ``rows``.
    """
    from robo_loaders_plugin.bench.report import code_version, machine

    work, made = work_dir(workdir)
    old = os.environ.get("ROBO_LOADERS_CACHE")
    os.environ["ROBO_LOADERS_CACHE"] = os.path.join(work, "cache")
    settings = {"batch_size": batch_size, "rounds": rounds, "round_s": round_s, "warm_s": warm_s}
    before = os.getloadavg()[0]
    rows: list[dict] = []
    try:
        for backend in backends:
            for preset in presets:
                echo(f"[batch_threads] {backend}, {preset} windows, {repo_id}")
                rows += _lift(root, repo_id, backend, preset, dict(settings, threads=tuple(threads)))
            if pretrain:
                echo(f"[batch_threads] {backend}, the pretraining mixture and its one dataset")
                rows += _pretraining(pretrain, backend, dict(settings, threads=tuple(pretrain_threads)))
    finally:
        if old is None:
            os.environ.pop("ROBO_LOADERS_CACHE", None)
        else:
            os.environ["ROBO_LOADERS_CACHE"] = old
        shutil.rmtree(made or work, ignore_errors=True)
    return {
        "settings": dict(settings, threads=list(threads), pretrain_threads=list(pretrain_threads)),
        "machine": machine(),
        "code": code_version(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg": [round(before, 2), round(os.getloadavg()[0], 2)],
        "rows": rows,
    }


def table(result: dict) -> str:
    """docs/benchmarks.md's table of a result: samples/s at each thread count, and against one thread.

    Args:
        result: What :func:`run` returned.

    Returns:
        The Markdown.
    """
    s, m = result["settings"], result["machine"]
    counts = sorted({r["threads"] for r in result["rows"]})
    groups: dict = {}
    for r in result["rows"]:
        groups.setdefault((r["workload"], r["backend"], r["preset"]), {})[r["threads"]] = r
    lines = [
        f"Samples/s by batch threads (the DataLoader's `num_workers`; 0: the training thread), batch "
        f"{s['batch_size']}, the median of {s['rounds']} rounds of {s['round_s']:g} s taken in turn (x one thread); "
        f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, torch {m['torch']}, code {result['code']}, "
        f"1-minute load {result['load_avg'][0]} before and {result['load_avg'][1]} after:",
        "",
        "| workload | backend | windows | " + " | ".join(f"{n} thread{'s' if n != 1 else ''}" for n in counts) + " |",
        "|---|---|---|" + "---:|" * len(counts),
    ]
    for (workload, backend, preset), by in groups.items():
        cells = []
        for n in counts:
            r = by.get(n)
            ratio = f" ({r['vs_one_thread']:.2f}x)" if r and r["vs_one_thread"] is not None and n != 1 else ""
            cells.append("" if r is None else f"{r['samples_per_s']:.0f}{ratio}")
        lines.append(f"| {workload} | {backend} | {preset} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_threads")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--root", default=LIFT[0], help="a LeRobot dataset's root (default: ../shared/data's Lift)")
    r.add_argument("--repo-id", default=LIFT[1])
    r.add_argument("--pretrain", help="mixtures_pretraining's kept full datasets (its --data)")
    r.add_argument("--rounds", type=int, default=5)
    r.add_argument("--json", help="the result's path")
    r.add_argument("--workdir", help="where the caches go (default: $ROBO_LOADERS_WORKLOADS, else a temp dir)")
    t = sub.add_parser("table")
    t.add_argument("result")
    a = parser.parse_args(argv)
    if a.cmd == "table":
        with open(a.result) as f:
            print(table(json.load(f)), end="")
        return 0
    if not os.path.isdir(a.root):
        raise SystemExit(f"--root {a.root} is not a directory: give a LeRobot dataset's root (../shared/data's Lift)")
    result = run(a.root, a.repo_id, pretrain=a.pretrain, rounds=a.rounds, workdir=a.workdir)
    if a.json:
        write_result(result, a.json)
    print(table(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
