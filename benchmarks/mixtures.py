"""LeRobot mixtures: each backend's speed against a hand-written mixture, and start-up as components are added.

``python -m benchmarks.mixtures run --json benchmarks/results/mixtures.json --plots benchmarks/results/mixtures_plots``
(``bash benchmarks/mixtures.sh``) generates its datasets outside the repository (a fresh directory in
``$ROBO_LOADERS_WORKLOADS``, else in the system's temporary directory; removed afterwards unless ``--keep``), then:

1. **throughput** (``kind: throughput`` rows): a 3-component mixture, weights 1/2/3, ACT's delta timestamps, served
   by every backend and by the **reference**, what a user writes by hand (a ``ConcatDataset`` of ``LeRobotDataset``
   \\ s, each renamed to the common keys, with a ``WeightedRandomSampler``, in lerobot-train's DataLoader:
   ``benchmarks/mixtures_child.py``), each in its own process, in the same run. Two settings:

   - ``layouts``: three components at the same rate with different camera layouts (1 camera; 2 cameras whose second
     is renamed ``wrist``; 2 cameras recorded the other way round, renamed back), so the mixture serves the one
     camera every component has; every backend.
   - ``rates``: the same layouts recorded at 20, 10 and 30 fps, served at ``target_fps`` 20 by ``gpu_resampler``
     (the backend that converts rates); the reference serves each component at its own rate (LeRobot cannot
     convert rates: same shapes, other time spans).

2. **start-up** (``kind: startup`` rows): the first metadata read to the first batch of mixtures of 1, 10, 30 and 100
   small datasets (2 episodes of 20-24 frames), and of 10 datasets 10x and 100x as long, for the reference, the
   plugin's ``native`` and ``compressed_cache`` (its cache persisted by a first run with its ``cache_dir`` option,
   timed as ``once_s``, and reused by the measured one, as in every training run after the first). HF
   ``datasets``' Arrow copy of each parquet file, which every ``LeRobotDataset`` makes on its first load whatever
   serves it, is made before the measured runs (timed as ``prepare_s``).

``plot RESULT --out DIR`` draws the figures, ``table RESULT`` prints the markdown tables of docs/benchmarks.md.
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

CAM = "observation.images.cam0"
CAM1 = "observation.images.cam1"
WRIST = "observation.images.wrist"
BACKENDS = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")
REFERENCE = "reference"
REFERENCE_COLOR = "#9a9a9a"  # a light grey: the plugin's native mixture has the report's dark grey
WEIGHTS = (1.0, 2.0, 3.0)
# the three layouts: (cameras, rename); "b" keeps cam0 and calls its second camera wrist, "c" recorded its main
# camera as cam1 and its wrist camera as cam0
LAYOUTS = {"a": (1, {}), "b": (2, {CAM1: WRIST}), "c": (2, {CAM1: CAM, CAM: WRIST})}
RATES = {"a": 20, "b": 10, "c": 30}
TARGET_FPS = 20

SIZES = {
    # what benchmarks/mixtures.sh runs (about 10 minutes on 2 cores)
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
    },
}
# docs/benchmarks.md holds tables() of the committed result between these lines (benchmarks/tests checks it)
DOC_BEGIN = "<!-- python -m benchmarks.mixtures table benchmarks/results/mixtures.json -->"
DOC_END = "<!-- /python -m benchmarks.mixtures table -->"
MIN_FREE_BYTES = 2 * 10**9  # the full size writes ~60 MB of datasets and caches; refuse a nearly full disk anyway


def echo(*args):
    """Progress on stderr (the tables go to stdout)."""
    print(*args, file=sys.stderr, flush=True)


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


def generate_startup(base: str, size: dict) -> dict:
    """The start-up settings' components: ``{(components, scale): [component, ...]}`` (module docstring)."""
    import numpy as np

    settings = [(n, 1) for n in size["startup_components"]]
    settings += [
        (size["startup_scaled"], s) for s in size["startup_scales"] if (size["startup_scaled"], s) not in settings
    ]
    out = {}
    for n, scale in settings:
        comps = []
        for i in range(n):
            rng = np.random.default_rng(1000 + i)
            repo = f"mix/s{scale}_{i:03d}"
            root = os.path.join(base, f"startup_x{scale}", f"{i:03d}")
            write(
                root,
                repo,
                episode_lengths=lengths(rng, 2, size["startup_lengths"], scale),
                cameras=1,
                image_size=size["startup_image_size"],
                seed=i,
            )
            comps.append({"repo_id": repo, "root": root, "weight": 1.0 + i % 3, "rename": {}})
        out[(n, scale)] = comps
    return out


def measure(args: dict, label: str, log_dir: str, in_process: bool, cache: str | None, timeout: float) -> dict:
    """One run: a child process (``run_child``: memory sampled, the cache directory ``cache`` or a fresh one), or
    ``mixtures_child.run`` here (the quick test).

    Returns:
        The row, with ``measured_at`` (UTC); a child's has ``error`` when it failed (in process, the failure
        raises).
    """
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return dict(_measure(args, label, log_dir, in_process, cache, timeout), measured_at=at)


def _measure(args: dict, label: str, log_dir: str, in_process: bool, cache: str | None, timeout: float) -> dict:
    if in_process:  # a failure raises, with its traceback (the quick test)
        from benchmarks import mixtures_child

        old = os.environ.get("ROBO_LOADERS_CACHE")
        os.environ["ROBO_LOADERS_CACHE"] = cache or tempfile.mkdtemp(prefix="cache-", dir=log_dir)
        try:
            return dict(mixtures_child.run(args), backend=label)
        finally:
            if old is None:
                os.environ.pop("ROBO_LOADERS_CACHE", None)
            else:
                os.environ["ROBO_LOADERS_CACHE"] = old
    from robo_loaders_plugin.bench.runner import run_child

    if cache is None:
        return run_child("benchmarks.mixtures_child", args, label, log_dir, timeout, fresh_cache=True)
    old = os.environ.get("ROBO_LOADERS_CACHE")
    os.environ["ROBO_LOADERS_CACHE"] = cache
    try:
        return run_child("benchmarks.mixtures_child", args, label, log_dir, timeout, fresh_cache=False)
    finally:
        if old is None:
            os.environ.pop("ROBO_LOADERS_CACHE", None)
        else:
            os.environ["ROBO_LOADERS_CACHE"] = old


OPTIONS = {"gpu_resampler": {"device": "cpu"}}  # this machine has no GPU; the option is recorded in the result


def run_throughput(comps: dict, size: dict, log_dir: str, in_process: bool, repeats: int, timeout: float) -> list:
    """Every backend and the reference on the ``layouts`` mixture, ``gpu_resampler`` and the reference on the
    ``rates`` mixture; ratios against the reference of the same setting, measured in the same run."""
    from robo_loaders_plugin.bench.report import add_ratios
    from robo_loaders_plugin.bench.runner import in_rounds

    rows = []
    for setting, labels in (("layouts", (REFERENCE, *size["backends"])), ("rates", (REFERENCE, "gpu_resampler"))):
        if setting == "rates" and "gpu_resampler" not in size["backends"]:
            continue
        base = {
            "components": comps[setting],
            "preset": "act",
            "batch_size": size["batch_size"],
            "num_workers": size["num_workers"],
            "batches": size["batches"],
            "seed": 0,
            "target_fps": TARGET_FPS if setting == "rates" else None,
        }

        def one(label, base=base, setting=setting):
            args = dict(base, backend=label, kwargs=OPTIONS.get(label, {}))
            if label == REFERENCE:
                args["target_fps"] = None
            log = os.path.join(log_dir, f"throughput_{setting}")
            os.makedirs(log, exist_ok=True)
            return measure(args, label, log, in_process, None, timeout)

        echo(f"[mixtures] throughput, {setting}: {', '.join(labels)}")
        found = in_rounds(list(labels), repeats, one, echo=echo)
        add_ratios(found, [REFERENCE], fields=("samples_per_s", "peak_mem_bytes", "startup_s"))
        for r in found:
            r.update(kind="throughput", setting=setting, options=OPTIONS.get(r["backend"], {}))
        rows += found
    return rows


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
            if label == "compressed_cache":  # persisted (its cache_dir option; RAM only by default) and reused
                run_args["kwargs"] = {"cache_dir": cache}
                first = measure(run_args, label, log, in_process, cache, timeout)
                once = None if first.get("error") else first["startup_s"]
            r = measure(run_args, label, log, in_process, cache, timeout)
            shutil.rmtree(cache, ignore_errors=True)
            r.update(
                kind="startup",
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


def run(
    size_name: str = "full",
    out: str | None = None,
    plots: str | None = None,
    workdir: str | None = None,
    keep: bool = False,
    in_process: bool = False,
    repeats: int = 1,
    parts=("throughput", "startup"),
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
        parts: ``throughput`` and/or ``startup``.
        timeout: Seconds before a child is killed.
        merge: Keep the rows of the parts not run from ``out`` (an earlier run of the same size).

    Returns:
        The result (``kind: mixtures``).
    """
    from robo_loaders_plugin.bench.report import machine

    size = SIZES[size_name]
    kept, kept_parts, kept_generation = [], {}, {}
    if merge and out and os.path.exists(out):  # the other parts' rows of an earlier run of the same size
        with open(out) as f:
            earlier = json.load(f)
        if earlier.get("size") == size_name:
            kept = [r for r in earlier["rows"] if r["kind"] not in parts]
            kept_parts = {k: earlier[k] for k in ("components",) if "throughput" not in parts and k in earlier}
            kept_generation = {k: v for k, v in earlier.get("generation_s", {}).items() if k not in parts}
    base, created = work_dir(workdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(base, "hf_datasets_cache")  # its Arrow copies stay in here
    log_dir = tempfile.mkdtemp(prefix="logs-", dir=base)
    echo(f"[mixtures] data and logs under {base}")
    result = {
        "kind": "mixtures",
        "version": 1,
        "framework": "lerobot",
        "size": size_name,
        "machine": machine(),
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in size.items() if k not in ("backends",)},
        "rows": kept,
        "generation_s": kept_generation,
        **kept_parts,
    }
    result["settings"].update(preset="act", weights=list(WEIGHTS), target_fps=TARGET_FPS, repeats=repeats)
    try:
        t = time.perf_counter()
        if "throughput" in parts:
            comps = generate_throughput(base, size)
            result["generation_s"]["throughput"] = round(time.perf_counter() - t, 2)
            result["components"] = {
                s: [dict(c, root=os.path.basename(c["root"])) for c in cs] for s, cs in comps.items()
            }
            result["rows"] += run_throughput(comps, size, log_dir, in_process, repeats, timeout)
        if "startup" in parts:
            t = time.perf_counter()
            startup = generate_startup(base, size)
            result["generation_s"]["startup"] = round(time.perf_counter() - t, 2)
            result["rows"] += run_startup(startup, size, log_dir, in_process, timeout)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
            if created:
                shutil.rmtree(created, ignore_errors=True)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    if plots:
        plot(result, plots, os.path.basename(out) if out else "mixtures.json")
    return result


# -- tables and figures ----------------------------------------------------------------------------------------------
def _ok(rows):
    return [r for r in rows if not r.get("error")]


def machine_line(result: dict) -> str:
    """The machine, as the captions say it."""
    from robo_loaders_plugin.bench.tables import machine_caption

    return machine_caption(result.get("machine"))


def tables(result: dict) -> str:
    """The markdown tables of docs/benchmarks.md's mixture section (every number from ``result``).

    Args:
        result: A ``kind: mixtures`` result.

    Returns:
        Markdown: a throughput table per setting, then the start-up table.
    """
    from robo_loaders_plugin.bench.plots import significant

    lines = []
    for setting in ("layouts", "rates"):
        rows = [r for r in result["rows"] if r["kind"] == "throughput" and r["setting"] == setting]
        if not rows:
            continue
        lines += [
            f"**{setting}**" + (f" (served at {TARGET_FPS} fps)" if setting == "rates" else ""),
            "",
            "| loader | samples/s | vs reference | first batch (s) | build (s) | start-up vs reference | peak mem |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            if r.get("error"):
                lines.append(f"| `{r['backend']}` | FAILED: {r['error'].strip().splitlines()[-1]} | | | | | |")
                continue
            ratios = r.get("ratios", {})
            vs = ratios.get(f"samples_per_s_vs_{REFERENCE}")
            su = ratios.get(f"startup_s_vs_{REFERENCE}")
            mem = r.get("peak_mem_bytes")
            lines.append(
                f"| `{r['backend']}` | {significant(r['samples_per_s'])} | "
                + ("" if vs is None else f"{vs:.2f}x")
                + f" | {r['first_batch_s']:.2f} | {r['build_s']:.2f} | "
                + ("" if su is None else f"{su:.2f}x")
                + " | "
                + ("" if not mem else f"{mem / 1e9:.2f} GB")
                + " |"
            )
        lines.append("")
    rows = [r for r in result["rows"] if r["kind"] == "startup"]
    if rows:
        labels = list(dict.fromkeys(r["backend"] for r in rows))
        settings = sorted({(r["components"], r["frames_scale"]) for r in rows})
        lines += [
            "**start-up** (first metadata read to first batch, seconds; `compressed_cache`'s cache built by an earlier "
            "run, its first run in brackets)",
            "",
            "| components | frames | " + " | ".join(f"`{b}`" for b in labels) + " |",
            "|---:|---:|" + "---:|" * len(labels),
        ]
        for n, scale in settings:
            cells = []
            frames = None
            for b in labels:
                r = next((r for r in rows if (r["components"], r["frames_scale"], r["backend"]) == (n, scale, b)), None)
                if r is None or r.get("error"):
                    cells.append("FAILED" if r else "")
                    continue
                frames = r["frames"]
                cells.append(f"{r['startup_s']:.2f}" + (f" ({r['once_s']:.2f})" if r.get("once_s") is not None else ""))
            lines.append(f"| {n} | {'' if frames is None else f'{frames:,}'} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"<sub>Machine: {machine_line(result)}.</sub>")
    return "\n".join(lines) + "\n"


def plot(result: dict, out_dir: str, source: str = "mixtures.json") -> list[str]:
    """Two figures: ``mixtures_throughput.png`` (samples/s per loader and setting, the ratio to the reference above
    each bar) and ``mixtures_startup.png`` (start-up against components, and against frames at a fixed number of
    components, log-log, a line per loader).

    Args:
        result: A ``kind: mixtures`` result.
        out_dir: Where the PNGs go.
        source: The result's file name, for the captions.

    Returns:
        The paths written.
    """
    import textwrap

    from matplotlib.figure import Figure

    from robo_loaders_plugin.bench.plots import color_of, significant
    from robo_loaders_plugin.core.units import plural

    os.makedirs(out_dir, exist_ok=True)
    caption = f"Source: {source} | machine: {machine_line(result)} (shared, noisy)"
    written = []
    thr = _ok([r for r in result["rows"] if r["kind"] == "throughput"])
    if thr:
        settings = [s for s in ("layouts", "rates") if any(r["setting"] == s for r in thr)]
        fig = Figure(figsize=(11, 4.8), layout="constrained")
        axes = fig.subplots(
            1,
            len(settings),
            squeeze=False,
            width_ratios=[max(2, sum(r["setting"] == s for r in thr)) for s in settings],
        )[0]
        for ax, s in zip(axes, settings):
            rows = [r for r in thr if r["setting"] == s]
            names = [r["backend"] for r in rows]
            values = [r["samples_per_s"] for r in rows]
            bars = ax.bar(
                names,
                values,
                color=[REFERENCE_COLOR if n == REFERENCE else color_of(n) for n in names],
            )
            for bar, r in zip(bars, rows):
                vs = r.get("ratios", {}).get(f"samples_per_s_vs_{REFERENCE}")
                ax.annotate(
                    significant(r["samples_per_s"]) + ("" if vs is None else f"\n{vs:.2f}x"),
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
            if max(values) >= 10 * min(values):
                ax.set_yscale("log")
                ax.set_ylabel("samples/s (log scale)")
            else:
                ax.set_ylabel("samples/s")
            ax.tick_params(axis="x", rotation=30, labelsize=8)
            title = {
                "layouts": "3 components, 3 camera layouts, 20 fps",
                "rates": f"20/10/30 fps served at {TARGET_FPS} fps",
            }
            ax.set_title(title[s], fontsize=10)
            ax.margins(y=0.2)
        fig.suptitle(
            "LeRobot mixture: loader-only samples/s against a hand-written ConcatDataset + WeightedRandomSampler"
        )
        st = result["settings"]
        fig.supxlabel(
            textwrap.fill(
                f"{caption} | batch {st['batch_size']}, {st['num_workers']} workers, ACT deltas, {st['batches']} timed "
                "batches, weights 1/2/3; the ratio is to the reference of the same run",
                160,
            ),
            fontsize=8,
            color="#444444",
        )
        path = os.path.join(out_dir, "mixtures_throughput.png")
        fig.savefig(path, dpi=110)
        written.append(path)
    st_rows = _ok([r for r in result["rows"] if r["kind"] == "startup"])
    if st_rows:
        fig = Figure(figsize=(11, 4.8), layout="constrained")
        ax_n, ax_f = fig.subplots(1, 2)
        labels = list(dict.fromkeys(r["backend"] for r in st_rows))
        scaled = result["settings"]["startup_scaled"]
        for b in labels:
            color = REFERENCE_COLOR if b == REFERENCE else color_of(b)
            by_n = sorted(
                (r for r in st_rows if r["backend"] == b and r["frames_scale"] == 1), key=lambda r: r["components"]
            )
            by_f = sorted(
                (r for r in st_rows if r["backend"] == b and r["components"] == scaled), key=lambda r: r["frames"]
            )
            if by_n:
                ax_n.plot(
                    [r["components"] for r in by_n], [r["startup_s"] for r in by_n], marker="o", color=color, label=b
                )
            if by_f:
                ax_f.plot([r["frames"] for r in by_f], [r["startup_s"] for r in by_f], marker="o", color=color, label=b)
            once = [r for r in by_n if r.get("once_s") is not None]
            if once:
                ax_n.plot(
                    [r["components"] for r in once],
                    [r["once_s"] for r in once],
                    ls=":",
                    marker=".",
                    color=color,
                    label=f"{b}, first run (builds its cache)",
                )
            once = [r for r in by_f if r.get("once_s") is not None]
            if once:
                ax_f.plot(
                    [r["frames"] for r in once],
                    [r["once_s"] for r in once],
                    ls=":",
                    marker=".",
                    color=color,
                    label=f"{b}, first run (builds its cache)",
                )
        lo, hi = result["settings"]["startup_lengths"]
        for ax, xlabel, title in (
            (ax_n, f"components (each 2 episodes of {lo}-{hi} frames)", "against the number of components"),
            (
                ax_f,
                f"frames in all ({plural(scaled, 'component')})",
                f"against their frames, {plural(scaled, 'component')}",
            ),
        ):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("first metadata read to first batch (s)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        ax_n.legend(fontsize=8)
        fig.suptitle("LeRobot mixture start-up: against the number of components, and against their frames")
        st = result["settings"]
        fig.supxlabel(
            textwrap.fill(
                f"{caption} | batch {st['startup_batch_size']}, {st['num_workers']} workers, ACT deltas; HF datasets' "
                "Arrow copies made beforehand",
                160,
            ),
            fontsize=8,
            color="#444444",
        )
        path = os.path.join(out_dir, "mixtures_startup.png")
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


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
    r.add_argument("--parts", default="throughput,startup", help="throughput and/or startup")
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
