"""Mixtures of datasets, LeRobot and robomimic: each backend's speed against a hand-written mixture, and start-up as
components are added.

``python -m benchmarks.mixtures run --json benchmarks/results/mixtures.json --plots benchmarks/results/mixtures_plots``
(``bash benchmarks/mixtures.sh``) generates its datasets outside the repository (a fresh directory in
``$ROBO_LOADERS_WORKLOADS``, else in the system's temporary directory; removed afterwards unless ``--keep``), then
measures every loader in its own process (``robo_loaders_plugin.bench.runner.run_child``), each one against the
**reference** measured in the same run: what a user writes by hand without the plugin, a ``ConcatDataset`` of the
framework's own datasets, each renamed to the common keys, with a ``WeightedRandomSampler``, in the DataLoader the
framework's training script builds (``benchmarks/mixtures_child.py`` for LeRobot,
``benchmarks/mixtures_robomimic_child.py`` for robomimic).

1. **throughput** (``kind: throughput`` rows, part ``throughput``: LeRobot; part ``robomimic``): mixtures with
   weights 1/2/3 (cycling over the components), in three settings per framework:

   - ``layouts``: three components at the same rate with different camera layouts, every backend. LeRobot (ACT's
     delta timestamps): 1 camera; 2 cameras whose second is renamed ``wrist``; 2 cameras recorded the other way
     round, renamed back, so the mixture serves the one camera every component has. robomimic (an image BC-RNN's
     windows, ``benchmarks/mixtures_robomimic.py``): both cameras in every component, the wrist camera stored under
     another name in the second and the two cameras swapped in the third, renamed back.
   - ``rates``: the same layouts recorded at 20, 10 and 30 fps (robomimic: ``control_freq``), served at
     ``target_fps`` 20 by ``gpu_resampler`` (the backend that converts rates); the reference serves each component
     at its own rate (neither framework converts rates: same shapes, other time spans).
   - ``many``: 100 small components (2 episodes of 20-24 frames), every backend: a mixture's per-component costs
     at scale (LeRobot: the start-up datasets below, one camera; robomimic: the three layouts in turn).

2. **start-up** (``kind: startup`` rows, part ``startup``, LeRobot): the first metadata read to the first batch of
   mixtures of 1, 10, 30 and 100 small datasets (2 episodes of 20-24 frames), and of 10 datasets 10x and 100x as
   long, for the reference, the plugin's ``native`` and ``compressed_cache`` (its cache persisted by a first run with
   its ``cache_dir`` option, timed as ``once_s``, and reused by the measured one, as in every training run after the
   first). HF ``datasets``' Arrow copy of each parquet file, which every ``LeRobotDataset`` makes on its first load
   whatever serves it, is made before the measured runs (timed as ``prepare_s``).

``plot RESULT --out DIR`` draws the figures, ``table RESULT`` prints the markdown tables of docs/benchmarks.md
(``benchmarks/mixtures_report.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks.harness.growth import WORKLOADS_ENV
from benchmarks.mixtures_report import REFERENCE, plot, tables

__all__ = ["REFERENCE", "SIZES", "main", "plot", "run", "tables", "work_dir"]

CAM = "observation.images.cam0"
CAM1 = "observation.images.cam1"
WRIST = "observation.images.wrist"
BACKENDS = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")
WEIGHTS = (1.0, 2.0, 3.0)
# the three layouts: (cameras, rename); "b" keeps cam0 and calls its second camera wrist, "c" recorded its main
# camera as cam1 and its wrist camera as cam0
LAYOUTS = {"a": (1, {}), "b": (2, {CAM1: WRIST}), "c": (2, {CAM1: CAM, CAM: WRIST})}
RATES = {"a": 20, "b": 10, "c": 30}
TARGET_FPS = 20

SIZES = {
    # what benchmarks/mixtures.sh runs (about 20-25 minutes on 2 quiet cores, 34 on them shared)
    "full": {
        "episodes": 8,
        "lengths": (90, 110),
        "image_size": (64, 64),
        "batch_size": 64,
        "batches": 60,
        "num_workers": 2,
        "backends": BACKENDS,
        "startup_components": (1, 10, 30, 100),
        "startup_scales": (1, 10, 100),  # episode lengths times this, at startup_scaled components
        "startup_scaled": 10,
        "startup_lengths": (20, 24),
        "startup_image_size": (32, 32),
        "startup_batch_size": 32,
        "startup_batches": 3,
        "startup_backends": (REFERENCE, "native", "compressed_cache"),
        "many_components": 100,  # the startup_components-sized datasets of that count, served by every backend
        "many_batch_size": 32,
        "many_batches": 30,
        "robomimic": {
            "demos": 20,
            "lengths": (45, 55),
            "image_size": 84,  # Lift-PH's two 84x84 cameras
            "seq_length": 10,  # BC-RNN's windows
            "cache_mode": "low_dim",  # robomimic's image configs, and the robomimic benchmark's native:low_dim
            "batch_size": 64,
            "batches": 60,
            "backends": BACKENDS,
            "many_components": 100,
            "many_lengths": (20, 24),
            "many_image_size": 32,
            "many_batch_size": 32,
            "many_batches": 30,
        },
    },
    # the quick test's (benchmarks/tests/test_mixtures_bench.py): seconds, in process
    "small": {
        "episodes": 2,
        "lengths": (20, 24),
        "image_size": (24, 32),
        "batch_size": 8,
        "batches": 2,
        "num_workers": 0,
        "backends": ("native", "compressed_cache", "gpu_resampler"),
        "startup_components": (1, 3),
        "startup_scales": (1, 2),
        "startup_scaled": 1,
        "startup_lengths": (10, 12),
        "startup_image_size": (16, 16),
        "startup_batch_size": 8,
        "startup_batches": 1,
        "startup_backends": (REFERENCE, "compressed_cache"),
        "many_components": 3,
        "many_batch_size": 8,
        "many_batches": 1,
        "robomimic": {
            "demos": 2,
            "lengths": (12, 16),
            "image_size": 16,
            "seq_length": 3,
            "cache_mode": "low_dim",
            "batch_size": 8,
            "batches": 2,
            "backends": ("native", "compressed_cache", "gpu_resampler"),
            "many_components": 3,
            "many_lengths": (10, 12),
            "many_image_size": 16,
            "many_batch_size": 8,
            "many_batches": 1,
        },
    },
}
# docs/benchmarks.md holds tables() of the committed result between these lines (benchmarks/tests checks it)
DOC_BEGIN = "<!-- python -m benchmarks.mixtures table benchmarks/results/mixtures.json -->"
DOC_END = "<!-- /python -m benchmarks.mixtures table -->"
MIN_FREE_BYTES = 2 * 10**9  # the full size writes ~0.5 GB of datasets and caches; refuse a nearly full disk anyway


def echo(*args):
    """Progress on stderr (the tables go to stdout)."""
    print(*args, file=sys.stderr, flush=True)


def write_result(result: dict, out: str) -> None:
    """Write a benchmark's result as the committed JSON files are written (indented, a final newline), its
    directory made first.

    Args:
        result: The result.
        out: The file's path.
    """
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def work_dir(given: str | None) -> tuple[str, str | None]:
    """A fresh directory for the datasets, caches and logs, removed after the run: inside ``given``, else
    ``$ROBO_LOADERS_WORKLOADS``, else the system's temporary directory; never inside the repository.

    Returns:
        ``(the fresh directory, the parent created here or None)``.

    Raises:
        SystemExit: the directory is inside the repository, or its disk has less than 2 GB free.
    """
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parent = os.path.abspath(given or os.environ.get(WORKLOADS_ENV) or tempfile.gettempdir())
    if os.path.commonpath([parent, repo]) == repo:
        raise SystemExit(f"{parent} is inside the repository; give --workdir (or ${WORKLOADS_ENV}) outside it")
    created = None if os.path.exists(parent) else parent
    os.makedirs(parent, exist_ok=True)
    free = shutil.disk_usage(parent).free
    if free < MIN_FREE_BYTES:
        raise SystemExit(f"{parent}: {free / 1e9:.1f} GB free, the benchmark wants 2 GB; free space or give --workdir")
    return tempfile.mkdtemp(prefix="robo-loaders-mixtures-", dir=parent), created


def lengths(rng, n: int, bounds, scale: int = 1) -> list[int]:
    """``n`` episode lengths drawn in ``bounds``, times ``scale``."""
    return [int(x) * scale for x in rng.integers(bounds[0], bounds[1] + 1, size=n)]


def write(root: str, repo_id: str, **kw) -> float:
    """Write one dataset with the plugin's fast LeRobot writer (LeRobot's file layout and metadata), timed."""
    from robo_loaders_plugin.sample_data.lerobot_fast import write_lerobot_fast

    t = time.perf_counter()
    write_lerobot_fast(root, repo_id=repo_id, mode="h264", progress=False, overwrite=True, **kw)
    return time.perf_counter() - t


def prepare(components: list[dict]) -> float:
    """Load every component once with ``LeRobotDataset`` (HF ``datasets`` makes its Arrow copy of the parquet
    files on a first load): what every loader pays once per file, kept out of the measured start-ups.

    Returns:
        The seconds it took.
    """
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t = time.perf_counter()
    for c in components:
        LeRobotDataset(c["repo_id"], root=c["root"])
    return time.perf_counter() - t


def generate_throughput(base: str, size: dict) -> dict:
    """The ``layouts`` and ``rates`` components (module docstring)."""
    import numpy as np

    rng = np.random.default_rng(0)
    out: dict = {"layouts": [], "rates": []}
    for setting in ("layouts", "rates"):
        for k, (name, (cameras, rename)) in enumerate(LAYOUTS.items()):
            fps = RATES[name] if setting == "rates" else TARGET_FPS
            repo = f"mix/{name}{fps}"
            root = os.path.join(base, f"{name}{fps}")
            eps = lengths(rng, size["episodes"], size["lengths"])
            write(root, repo, episode_lengths=eps, cameras=cameras, image_size=size["image_size"], fps=fps, seed=k)
            out[setting].append({"repo_id": repo, "root": root, "weight": WEIGHTS[k], "rename": rename})
    return out


def startup_settings(size: dict) -> list[tuple[int, int]]:
    """The start-up settings, ``(components, frames scale)`` (module docstring)."""
    settings = [(n, 1) for n in size["startup_components"]]
    return settings + [
        (size["startup_scaled"], s) for s in size["startup_scales"] if (size["startup_scaled"], s) not in settings
    ]


def generate_startup(base: str, size: dict, settings: list[tuple[int, int]]) -> dict:
    """The small datasets of the start-up settings (and of LeRobot's ``many`` setting).

    Args:
        base: The run's directory.
        size: The size's settings.
        settings: ``(components, frames scale)`` pairs to write.

    Returns:
        ``{(components, scale): [component, ...]}``; the datasets of one scale are shared by its settings (the 10
        of 10 components are the first 10 of 100).
    """
    import numpy as np

    out = {}
    for n, scale in settings:
        comps = []
        for i in range(n):
            repo = f"mix/s{scale}_{i:03d}"
            root = os.path.join(base, f"startup_x{scale}", f"{i:03d}")
            if not os.path.exists(root):
                write(
                    root,
                    repo,
                    episode_lengths=lengths(np.random.default_rng(1000 + i), 2, size["startup_lengths"], scale),
                    cameras=1,
                    image_size=size["startup_image_size"],
                    seed=i,
                )
            comps.append({"repo_id": repo, "root": root, "weight": WEIGHTS[i % len(WEIGHTS)], "rename": {}})
        out[(n, scale)] = comps
    return out


def measure(args: dict, label: str, log_dir: str, in_process: bool, cache: str | None, timeout: float, child=None):
    """One run: a child process (``run_child``: memory sampled, the cache directory ``cache`` or a fresh one), or
    the child module's ``run`` here (the quick test).

    Args:
        args: The child's arguments.
        label: The row's ``backend``.
        log_dir: The directory of the child's output and log.
        in_process: Run here (a failure raises).
        cache: The cache directory to use (``None``: a fresh one).
        timeout: Seconds before a child is killed.
        child: The child module (default: ``benchmarks.mixtures_child``, LeRobot's).

    Returns:
        The row, with ``measured_at`` (UTC) and ``load_avg`` (the machine's 1-minute load average before and after
        the run: other users' work on a shared machine, beside its timings); a child's has ``error`` when it failed
        (in process, the failure raises).
    """
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    before = os.getloadavg()[0]
    row = _measure(args, label, log_dir, in_process, cache, timeout, child or LEROBOT_CHILD)
    return dict(row, measured_at=at, load_avg=[round(before, 2), round(os.getloadavg()[0], 2)])


LEROBOT_CHILD = "benchmarks.mixtures_child"


def _measure(args: dict, label: str, log_dir: str, in_process: bool, cache: str | None, timeout: float, child: str):
    import importlib

    from robo_loaders_plugin.bench.runner import run_child

    old = os.environ.get("ROBO_LOADERS_CACHE")
    try:
        if in_process:  # a failure raises, with its traceback (the quick test)
            os.environ["ROBO_LOADERS_CACHE"] = cache or tempfile.mkdtemp(prefix="cache-", dir=log_dir)
            return dict(importlib.import_module(child).run(args), backend=label)
        if cache is None:
            return run_child(child, args, label, log_dir, timeout, fresh_cache=True)
        os.environ["ROBO_LOADERS_CACHE"] = cache
        return run_child(child, args, label, log_dir, timeout, fresh_cache=False)
    finally:
        if old is None:
            os.environ.pop("ROBO_LOADERS_CACHE", None)
        else:
            os.environ["ROBO_LOADERS_CACHE"] = old


OPTIONS = {"gpu_resampler": {"device": "cpu"}}  # this machine has no GPU; the option is recorded in the result


def compare(framework: str, setting: str, labels, base: dict, log_dir: str, in_process: bool, repeats: int,
            timeout: float, child: str) -> list:  # fmt: skip
    """Every loader of ``labels`` on one mixture, each in its own process, in rounds; ratios against the reference
    measured in the same run.

    Args:
        framework: ``lerobot`` or ``robomimic`` (recorded in the rows).
        setting: ``layouts``, ``rates`` or ``many`` (recorded in the rows).
        labels: The reference first, then the backends.
        base: The child's arguments but ``backend`` and ``kwargs``; its ``target_fps`` is not given to the
            reference (no framework converts rates).
        log_dir: Where the runs' logs go.
        in_process: Measure here (the quick test).
        repeats: Rounds (each row its median run).
        timeout: Seconds before a child is killed.
        child: The child module.

    Returns:
        The rows.
    """
    from robo_loaders_plugin.bench.report import add_ratios
    from robo_loaders_plugin.bench.runner import in_rounds

    log = os.path.join(log_dir, f"{framework}_{setting}")
    os.makedirs(log, exist_ok=True)

    def one(label):
        args = dict(base, backend=label, kwargs=OPTIONS.get(label, {}))
        if label == REFERENCE:
            args["target_fps"] = None
        return measure(args, label, log, in_process, None, timeout, child)

    echo(f"[mixtures] {framework} throughput, {setting}: {', '.join(labels)}")
    found = in_rounds(list(labels), repeats, one, echo=echo)
    add_ratios(found, [REFERENCE], fields=("samples_per_s", "peak_mem_bytes", "startup_s"))
    for r in found:
        r.update(kind="throughput", framework=framework, setting=setting, options=OPTIONS.get(r["backend"], {}))
        echo(
            f"[mixtures]   {r['backend']}: "
            + (r["error"].strip().splitlines()[-1] if r.get("error") else f"{r['samples_per_s']:.0f} samples/s")
        )
    return found


def run_throughput(comps: dict, many: list, size: dict, log_dir: str, in_process: bool, repeats: int,
                   timeout: float) -> list:  # fmt: skip
    """LeRobot: every backend and the reference on the ``layouts`` and ``many`` mixtures, ``gpu_resampler`` and the
    reference on the ``rates`` mixture.

    Args:
        comps: The ``layouts`` and ``rates`` components (:func:`generate_throughput`).
        many: The ``many`` setting's components (its Arrow copies made here first, as for the start-up rows).
        size: The size's settings.
        log_dir: Where the runs' logs go.
        in_process: Measure here (the quick test).
        repeats: Rounds (each row its median run).
        timeout: Seconds before a child is killed.

    Returns:
        The rows.
    """
    common = {"preset": "act", "num_workers": size["num_workers"], "seed": 0}
    rows = []
    for setting in ("layouts", "rates"):
        if setting == "rates" and "gpu_resampler" not in size["backends"]:
            continue
        labels = (REFERENCE, *size["backends"]) if setting == "layouts" else (REFERENCE, "gpu_resampler")
        base = dict(
            common,
            components=comps[setting],
            batch_size=size["batch_size"],
            batches=size["batches"],
            target_fps=TARGET_FPS if setting == "rates" else None,
        )
        rows += compare("lerobot", setting, labels, base, log_dir, in_process, repeats, timeout, LEROBOT_CHILD)
    prepare(many)
    base = dict(
        common, components=many, batch_size=size["many_batch_size"], batches=size["many_batches"], target_fps=None
    )
    labels = (REFERENCE, *size["backends"])
    return rows + compare("lerobot", "many", labels, base, log_dir, in_process, repeats, timeout, LEROBOT_CHILD)


def run_startup(comps: dict, size: dict, log_dir: str, in_process: bool, timeout: float) -> list:
    """Start-up of every start-up setting for each start-up backend (``compressed_cache``: a first run builds its
    cache, ``once_s``; the measured run reuses it)."""
    rows = []
    for (n, scale), components in comps.items():
        echo(f"[mixtures] start-up, {n} components x{scale} frames")
        prepare_s = prepare(components)
        args = {
            "components": components,
            "preset": "act",
            "batch_size": size["startup_batch_size"],
            "num_workers": size["num_workers"],
            "batches": size["startup_batches"],
            "seed": 0,
        }
        log = os.path.join(log_dir, f"startup_{n}x{scale}")
        os.makedirs(log, exist_ok=True)
        for label in size["startup_backends"]:
            cache = tempfile.mkdtemp(prefix=f"cache-{label}-", dir=log)
            once, run_args = None, dict(args, backend=label)
            # compressed_cache: persisted in a fresh cache_dir (its option; by default it keeps the store in the
            # default cache directory between runs, when the disk has room) and reused
            if label == "compressed_cache":
                run_args["kwargs"] = {"cache_dir": cache}
                first = measure(run_args, label, log, in_process, cache, timeout)
                once = None if first.get("error") else first["startup_s"]
            r = measure(run_args, label, log, in_process, cache, timeout)
            shutil.rmtree(cache, ignore_errors=True)
            r.update(
                kind="startup",
                framework="lerobot",
                components=n,
                frames_scale=scale,
                prepare_s=prepare_s,
                options=run_args.get("kwargs", {}),
            )
            if once is not None:
                r["once_s"] = once
            echo(
                f"[mixtures]   {label}: "
                + (r["error"].splitlines()[-1] if r.get("error") else f"{r['startup_s']:.2f} s")
            )
            rows.append(r)
    return rows


PARTS = ("throughput", "startup", "robomimic")


def part_of(row: dict) -> str:
    """The part of the run that measured a row (``--parts``; ``--merge`` keeps the others' rows)."""
    return "robomimic" if row.get("framework") == "robomimic" else row["kind"]


def runs_per_part(rows: list[dict]) -> dict:
    """Runs behind each part's rows (``--repeats``; rows merged from an earlier run keep theirs).

    Returns:
        ``{part: runs}``, from the rows (a row of several runs lists each one's samples/s).
    """
    out: dict = {}
    for r in rows:
        out[part_of(r)] = max(out.get(part_of(r), 1), len(r.get("samples_per_s_runs", ())))
    return out


def described(comps: list[dict], key: str) -> list[dict]:
    """Components as the result records them: the path's last element only (the data is removed afterwards)."""
    return [dict(c, **{key: os.path.basename(c[key])}) for c in comps]


def run(
    size_name: str = "full",
    out: str | None = None,
    plots: str | None = None,
    workdir: str | None = None,
    keep: bool = False,
    in_process: bool = False,
    repeats: int = 1,
    parts=PARTS,
    timeout: float = 600.0,
    merge: bool = False,
) -> dict:
    """Generate, measure, write the result (and plots); remove the generated data unless ``keep``.

    Args:
        size_name: ``full`` (benchmarks/mixtures.sh) or ``small`` (the quick test).
        out: The result JSON's path (``None``: not written).
        plots: A directory for the figures (``None``: none drawn).
        workdir: The directory in which a fresh one holds the datasets (default: ``$ROBO_LOADERS_WORKLOADS``, else
            the system's temporary directory).
        keep: Keep the generated datasets.
        in_process: Measure in this process (no memory sampling; the quick test).
        repeats: Rounds of the throughput runs, each row its median run.
        parts: ``throughput`` (LeRobot), ``startup`` (LeRobot) and/or ``robomimic`` (its throughput settings).
        timeout: Seconds before a child is killed.
        merge: Keep the rows of the parts not run from ``out`` (an earlier run of the same size).

    Returns:
        The result (``kind: mixtures``).

    Raises:
        SystemExit: an unknown part.
    """
    from benchmarks import mixtures_robomimic
    from robo_loaders_plugin.bench.report import machine

    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; choose among {', '.join(PARTS)}")
    size = SIZES[size_name]
    kept, kept_components, kept_generation = [], {}, {}
    if merge and out and os.path.exists(out):  # the other parts' rows of an earlier run of the same size
        with open(out) as f:
            earlier = json.load(f)
        if earlier.get("size") == size_name:
            kept = [r for r in earlier["rows"] if part_of(r) not in parts]
            kept_components = {k: v for k, v in earlier.get("components", {}).items() if k not in parts}
            kept_generation = {k: v for k, v in earlier.get("generation_s", {}).items() if k not in parts}
    base, created = work_dir(workdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(base, "hf_datasets_cache")  # its Arrow copies stay in here
    log_dir = tempfile.mkdtemp(prefix="logs-", dir=base)
    echo(f"[mixtures] data and logs under {base}")
    result = {
        "kind": "mixtures",
        "version": 2,
        "frameworks": ["lerobot", "robomimic"],
        "size": size_name,
        "machine": machine(),
        "settings": plain(size),
        "rows": kept,
        "generation_s": kept_generation,
        "components": kept_components,
    }
    result["settings"].update(preset="act", weights=list(WEIGHTS), rates=list(RATES.values()), target_fps=TARGET_FPS)
    try:
        if "throughput" in parts:
            t = time.perf_counter()
            comps = generate_throughput(base, size)
            many = generate_startup(base, size, [(size["many_components"], 1)])[(size["many_components"], 1)]
            result["generation_s"]["throughput"] = round(time.perf_counter() - t, 2)
            result["components"]["throughput"] = {s: described(cs, "root") for s, cs in comps.items()}
            result["components"]["throughput"]["many"] = f"{len(many)} of the start-up datasets (x1)"
            result["rows"] += run_throughput(comps, many, size, log_dir, in_process, repeats, timeout)
        if "startup" in parts:
            t = time.perf_counter()
            startup = generate_startup(base, size, startup_settings(size))
            result["generation_s"]["startup"] = round(time.perf_counter() - t, 2)
            result["rows"] += run_startup(startup, size, log_dir, in_process, timeout)
        if "robomimic" in parts:
            t = time.perf_counter()
            comps = mixtures_robomimic.generate(os.path.join(base, "robomimic"), size["robomimic"])
            result["generation_s"]["robomimic"] = round(time.perf_counter() - t, 2)
            result["components"]["robomimic"] = {
                s: described(cs, "path") if s != "many" else f"{len(cs)} files, the three layouts in turn"
                for s, cs in comps.items()
            }
            result["rows"] += mixtures_robomimic.run_rows(comps, size, log_dir, in_process, repeats, timeout)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
            if created:
                shutil.rmtree(created, ignore_errors=True)
    result["settings"]["repeats"] = runs_per_part(result["rows"])
    if out:
        write_result(result, out)
    if plots:
        plot(result, plots, os.path.basename(out) if out else "mixtures.json")
    return result


def plain(size: dict) -> dict:
    """A size's settings as JSON holds them (tuples as lists, the backends left out: the rows name them)."""
    return {
        k: plain(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v
        for k, v in size.items()
        if k != "backends"
    }


def main(argv=None) -> int:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.mixtures", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate, measure, write the result")
    r.add_argument("--size", choices=sorted(SIZES), default="full")
    r.add_argument("--json", help="the result's path")
    r.add_argument("--plots", help="a directory for the figures")
    r.add_argument(
        "--workdir",
        help=f"a fresh directory in it holds the datasets (default: ${WORKLOADS_ENV}, else the temporary dir)",
    )
    r.add_argument("--keep", action="store_true", help="keep the generated datasets")
    r.add_argument("--repeats", type=int, default=1, help="rounds of the throughput runs (median reported)")
    r.add_argument("--parts", default=",".join(PARTS), help="throughput (LeRobot), startup (LeRobot) and/or robomimic")
    r.add_argument("--merge", action="store_true", help="keep the other parts' rows of the --json file")
    pl = sub.add_parser("plot", help="draw the figures of a result")
    pl.add_argument("result")
    pl.add_argument("--out", required=True)
    t = sub.add_parser("table", help="print the markdown tables of a result")
    t.add_argument("result")
    a = p.parse_args(argv)
    if a.cmd == "run":
        result = run(
            a.size,
            a.json,
            a.plots,
            a.workdir,
            a.keep,
            repeats=a.repeats,
            parts=tuple(a.parts.split(",")),
            merge=a.merge,
        )
        print(tables(result))
        failed = [r["backend"] for r in result["rows"] if r.get("error")]
        return 1 if failed else 0
    with open(a.result) as f:
        result = json.load(f)
    if a.cmd == "plot":
        for path in plot(result, a.out, os.path.basename(a.result)):
            print(path)
    else:
        print(tables(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
