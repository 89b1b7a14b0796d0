"""``robo-loaders report``: result files -> PNG plots and one markdown page (its tables: ``bench/tables.py``).

Inputs are any mix of ``robo-loaders bench`` results, and the project harness's matrix results, training-benchmark
results and loss-curve files (``benchmarks/harness/``: ``matrix.py``, ``train/``, ``loss_curves.py``; their formats
in docs/benchmarks.md); the harness's cost-growth results are plotted by the harness itself
(``python -m benchmarks.harness growth report``, ``benchmarks/harness/growth_plots.py``). Every figure names its
source file, the machine and the settings in its caption. matplotlib is used through its object API on the Agg
canvas (``Figure.savefig``): no pyplot, no global backend switch, nothing shown on screen.
"""

from __future__ import annotations

import math
import os
import textwrap
import zlib

import click

from robo_loaders_plugin.bench import tables
from robo_loaders_plugin.bench.tables import (
    AXIS_LABEL,
    TableError,
    conversion_for,
    load_result,
    machine_caption,
    settings_caption,
)
from robo_loaders_plugin.core.command_help import Command
from robo_loaders_plugin.core.units import format_bytes, plural

KNOWN_COLORS = {
    "native": "#3b3b3b",
    "native:low_dim": "#3b3b3b",
    "native:all": "#9a9a9a",
    "native:none": "#c7c7c7",
    "compressed_cache": "#1f77b4",
    "datapipe": "#ff7f0e",
    "gpu_resampler": "#2ca02c",
    "video_stream": "#d62728",
}
OTHER_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78"]
DPI = 110


def base_backend(label: str) -> str:
    """``gpu_resampler#third`` -> ``gpu_resampler``: a ``#tag`` runs a backend under another label's options.

    Args:
        label: A result row's backend label.

    Returns:
        The backend's name.
    """
    return label.split("#", 1)[0]


def color_of(label: str) -> str:
    """The colour of a backend, the same in every figure of every report.

    The built-in backends' are fixed (``KNOWN_COLORS``; native and native:low_dim share one: they never meet in one
    file), another backend's is chosen by its name. A ``#tag`` run has its backend's colour.

    Args:
        label: A result row's backend label.

    Returns:
        A hex colour.
    """
    name = base_backend(label)
    if name in KNOWN_COLORS:
        return KNOWN_COLORS[name]
    return OTHER_COLORS[zlib.crc32(name.encode()) % len(OTHER_COLORS)]


class Palette:
    """A backend label -> its colour (:func:`color_of`): one fixed mapping, not the order backends appear in."""

    def __call__(self, label: str) -> str:
        return color_of(label)


def tagged(label: str) -> bool:
    """Whether ``label`` is a ``#tag`` run (a backend again under other options).

    Args:
        label: A result row's backend label.
    """
    return "#" in label


def significant(v: float, digits: int = 3) -> str:
    """``2.27``, ``14.6``, ``1,292``: ``digits`` significant digits, never rounded to an integer below 100.

    Args:
        v: The value.
        digits: Significant digits.

    Returns:
        The value as text (``0``, infinities and NaN as ``format(v, "g")``).
    """
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    return f"{v:,.{decimals}f}"


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def figure_caption(fig, payload: dict, extra: str = "") -> None:
    """Write a figure's caption: its source file, the machine, the result's settings and ``extra``, wrapped to the
    figure's width (the project harness's growth plots, ``benchmarks/harness/growth_plots.py``, use it too, so every
    figure reads the same).

    Args:
        fig: The matplotlib ``Figure``.
        payload: The loaded result the figure shows (``tables.load_result``).
        extra: Words added at the end (``""``: none).
    """
    src = os.path.basename(payload["_path"])
    parts = [f"Source: {src}", f"machine: {machine_caption(payload.get('machine'))}"]
    s = settings_caption(payload) if payload["_kind"] != "loss_curves" else ""
    if s:
        parts.append(f"settings: {s}")
    if extra:
        parts.append(extra)
    width = int(fig.get_figwidth() * 15)
    fig.supxlabel(textwrap.fill(" | ".join(parts), width), fontsize=8, color="#444444")


def _save(fig, path: str) -> str:
    fig.savefig(path, dpi=DPI)
    return path


def _ok(rows):
    return [r for r in rows if not r.get("error")]


def _plotted(rows):
    """Rows the per-backend plots show: not failed, not ``#tag`` runs (another label's options, so another
    workload: in the report's table, not beside the backends they would seem to compare with)."""
    return [r for r in _ok(rows) if not tagged(r["backend"])]


def _mem_unit(values):
    top = max(values) if values else 0
    return ("GB", 1e9) if top >= 2e9 else ("MB", 1e6)  # core.units' decimal units, as the bar labels


# -- one benchmark result --------------------------------------------------------------------------------------------
def _training(payload: dict) -> bool:
    return payload["_kind"] == "training"


LOG_SPREAD = 10.0  # a throughput plot whose fastest bar is this many times its slowest gets a log axis


def plot_throughput(payload: dict, path: str, color: Palette) -> str | None:
    """Samples/s per backend as horizontal bars, with the ratio to the first baseline (a log axis when the fastest
    is 10 times the slowest or more).

    Args:
        payload: A loaded bench or training result (``tables.load_result``).
        path: The PNG to write.
        color: The backend colours.

    Returns:
        ``path``, or ``None`` when no row has a throughput (nothing written).
    """
    rows = [r for r in _plotted(tables.rows_of(payload)) if r.get("samples_per_s")]
    if not rows:
        return None
    base = tables.baselines_in(rows, payload)
    field = "steps_per_s" if _training(payload) else "samples_per_s"
    fig = _figure(9, 0.55 * len(rows) + 1.8)
    ax = fig.add_subplot()
    labels = [r["backend"] for r in rows][::-1]
    vals = [r["samples_per_s"] for r in rows][::-1]
    log = max(vals) / min(vals) >= LOG_SPREAD  # else the slowest bars are invisible next to the fastest
    if log:  # bars from a power of ten below the slowest, so each one's length shows on the log axis
        left = 10 ** math.floor(math.log10(min(vals) / 2))
        ax.set_xscale("log")
        ax.barh(labels, [v - left for v in vals], left=left, color=[color(b) for b in labels])
        ax.set_xlim(left, max(vals) * (40 if _training(payload) else 20))
    else:
        ax.barh(labels, vals, color=[color(b) for b in labels])
        ax.set_xlim(0, max(vals) * (1.6 if _training(payload) else 1.35))
    for y, r in enumerate(rows[::-1]):
        ratio = (r.get("ratios") or {}).get(f"{field}_vs_{base[0]}") if base else None
        note = significant(r["samples_per_s"]) + (f"  ({ratio:.2f}x {base[0]})" if ratio is not None else "")
        if _training(payload) and r.get("stall_fraction") is not None:
            note += f"  data stall {r['stall_fraction']:.1%}"
        ax.text(r["samples_per_s"], y, "  " + note, va="center", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    scale = "; log scale" if log else ""
    if _training(payload):
        ax.set_xlabel(f"training samples/s (steps/s x batch size, epochs 2..N; higher is better{scale})")
        ax.set_title(f"{payload['framework']}: training throughput per backend (real training loop)", fontsize=12)
    else:
        ax.set_xlabel(f"samples/s (higher is better{scale})")
        ax.set_title(f"{payload['framework']}: data-loader throughput per backend (no model)", fontsize=12)
    figure_caption(fig, payload)
    return _save(fig, path)


def plot_memory(payload: dict, path: str, color: Palette) -> str | None:
    """Peak memory (and data memory, when every row has it) per backend as horizontal bars.

    Args:
        payload: A loaded bench or training result.
        path: The PNG to write.
        color: The backend colours.

    Returns:
        ``path``, or ``None`` when no row has a peak memory.
    """
    rows = [r for r in _plotted(tables.rows_of(payload)) if r.get("peak_mem_bytes")]
    if not rows:
        return None
    with_data = all(r.get("data_mem_bytes") is not None for r in rows)
    unit, div = _mem_unit([r["peak_mem_bytes"] for r in rows])
    fig = _figure(9, (0.75 if with_data else 0.5) * len(rows) + 1.9)
    ax = fig.add_subplot()
    n = len(rows)
    h = 0.38 if with_data else 0.7
    for i, r in enumerate(rows[::-1]):
        c = color(r["backend"])
        bars = [(i + h / 2 if with_data else i, r["peak_mem_bytes"], 0.45)]
        if with_data:
            bars.append((i - h / 2, r["data_mem_bytes"], 1.0))
        for y, v, alpha in bars:
            ax.barh(y, v / div, h, color=c, alpha=alpha, edgecolor=c)
            ax.text(v / div, y, "  " + format_bytes(v), va="center", fontsize=8)
    ax.set_yticks(range(n), [r["backend"] for r in rows][::-1])
    ax.set_xlim(0, max(r["peak_mem_bytes"] for r in rows) / div * 1.2)
    ax.set_xlabel(f"memory ({unit}, lower is better)")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [
        Patch(
            facecolor="#777777",
            alpha=0.45,
            edgecolor="#777777",
            label="peak memory\n(process tree PSS\n+ /dev/shm caches)",
        )
    ]
    if with_data:
        handles.append(
            Patch(facecolor="#777777", label="data memory\n(peak minus the process\nbefore the dataset was built)")
        )
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    what = "peak and data memory" if with_data else "peak memory"
    fig.suptitle(
        f"{payload['framework']}: {what} per backend" + (" (training)" if _training(payload) else ""), fontsize=12
    )
    figure_caption(fig, payload)
    return _save(fig, path)


def startup_parts(row: dict, payload: dict) -> list[float] | None:
    """The start-up of one row, in seconds, as the parts stacked in :func:`plot_startup`.

    Loader-only: [conversion (datapipe, when the benchmark converted), build, first batch]; training: [dataset
    build (a conversion on first use included), the rest of the launch (imports, model), first epoch].

    Args:
        row: A result row.
        payload: Its result file.

    Returns:
        The three parts, or ``None`` when the row lacks the times.
    """
    if _training(payload):
        total, first, build = row.get("time_to_first_epoch_end_s"), row.get("first_epoch_s"), row.get("dataset_build_s")
        if total is None or first is None:
            return None
        build = build or 0.0
        return [build, max(0.0, total - first - build), first]
    if row.get("build_s") is None or row.get("first_batch_s") is None:
        return None
    return [(conversion_for(row, payload) or {}).get("wall_s", 0.0), row["build_s"], row["first_batch_s"]]


def plot_startup(payload: dict, path: str, color: Palette) -> str | None:
    """Start-up cost per backend as stacked bars (:func:`startup_parts`).

    Args:
        payload: A loaded bench or training result.
        path: The PNG to write.
        color: The backend colours.

    Returns:
        ``path``, or ``None`` when no row has start-up times.
    """
    rows = [r for r in _plotted(tables.rows_of(payload)) if startup_parts(r, payload)]
    if not rows:
        return None
    from matplotlib.patches import Patch

    fig = _figure(9, 0.55 * len(rows) + 2.0)
    ax = fig.add_subplot()
    labels = [r["backend"] for r in rows][::-1]
    parts = [startup_parts(r, payload) for r in rows][::-1]
    colors = [color(b) for b in labels]
    left = [0.0] * len(rows)
    if _training(payload):
        styles = [dict(color=colors, alpha=0.5), dict(color="#d9d9d9", edgecolor="#888888"), dict(color=colors)]
        names = [
            "dataset build\n(conversion on first use\nincluded)",
            "rest of the launch\n(imports, model)",
            "first epoch\n(warm-up)",
        ]
        legend = [
            Patch(facecolor="#777777", alpha=0.5),
            Patch(facecolor="#d9d9d9", edgecolor="#888888"),
            Patch(facecolor="#777777"),
        ]
        xlabel = "seconds from process launch to the end of epoch 1 (lower is better)"
        title, extra = "launch to the end of the first epoch", ""
    else:
        styles = [
            dict(color="#d9d9d9", hatch="//", edgecolor="#888888"),
            dict(color=colors, alpha=0.5),
            dict(color=colors),
        ]
        names = ["conversion\n(robo-loaders convert)", "dataset build", "first batch\n(iterator creation included)"]
        legend = [
            Patch(facecolor="#d9d9d9", hatch="//", edgecolor="#888888"),
            Patch(facecolor="#777777", alpha=0.5),
            Patch(facecolor="#777777"),
        ]
        xlabel = "seconds before the first training batch (lower is better)"
        title, extra = "start-up cost", "conversion counted for datapipe when the benchmark converted the data itself"
    for k, style in enumerate(styles):
        widths = [p[k] for p in parts]
        ax.barh(labels, widths, left=left, **style)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        ax.text(total, y, f"  {total:.1f} s", va="center", fontsize=9)
    ax.set_xlim(0, max(left) * 1.2 + 1e-9)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    for handle, name in zip(legend, names):
        handle.set_label(name)
    fig.legend(handles=legend, loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(f"{payload['framework']}: {title} per backend", fontsize=12)
    figure_caption(fig, payload, extra)
    return _save(fig, path)


def epoch_series(row: dict, payload: dict) -> tuple[float, list[float]] | None:
    """(seconds before epoch 1, seconds of each epoch) of one row.

    Loader-only rows (``epoch_times_s``): conversion (datapipe, when the benchmark converted) + build. Training
    rows (``epochs[].step_s``): process launch to the start of epoch 1 (``time_to_first_epoch_end_s`` minus the
    first epoch).

    Args:
        row: A result row.
        payload: Its result file.

    Returns:
        The series, or ``None`` when the row has no per-epoch times.
    """
    times = tables.epoch_times(row)
    if not times:
        return None
    if _training(payload):
        end1 = row.get("time_to_first_epoch_end_s")
        setup = max(0.0, end1 - times[0]) if end1 is not None else (row.get("dataset_build_s") or 0.0)
    else:
        setup = (conversion_for(row, payload) or {}).get("wall_s", 0.0) + (row.get("build_s") or 0.0)
    return setup, times


def plot_epochs(payload: dict, path: str, color: Palette) -> str | None:
    """Time per epoch, and cumulative wall time from set-up on, per backend (two panels).

    Args:
        payload: A loaded bench or training result.
        path: The PNG to write.
        color: The backend colours.

    Returns:
        ``path``, or ``None`` when no row has per-epoch times.
    """
    series = [(r, epoch_series(r, payload)) for r in _plotted(tables.rows_of(payload))]
    series = [(r, s) for r, s in series if s]
    if not series:
        return None
    fig = _figure(12, 4.6)
    left, right = fig.subplots(1, 2)
    n_max = max(len(times) for _, (_, times) in series)
    for r, (setup, times) in series:
        c = color(r["backend"])
        left.plot(range(1, len(times) + 1), times, marker="o", color=c, label=r["backend"])
        cum = [setup]
        for t in times:
            cum.append(cum[-1] + t)
        right.plot(range(len(times) + 1), cum, marker="o", color=c, label=r["backend"])
    for ax in (left, right):
        ax.set_xticks(range(0 if ax is right else 1, n_max + 1))
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    training = _training(payload)
    left.set_title(
        "time per epoch" + (" of training (epoch 1 = warm-up)" if training else " (epoch 1 includes worker start-up)"),
        fontsize=10,
    )
    left.set_xlabel("epoch")
    left.set_ylabel("seconds per epoch")
    right.set_title(
        "cumulative wall time; epoch 0 = "
        + ("process launch to the start of epoch 1" if training else "set-up (conversion + build)"),
        fontsize=10,
    )
    right.set_xlabel("epochs completed")
    right.set_ylabel("seconds since " + ("launch" if training else "start"))
    right.legend(fontsize=8)
    fig.suptitle(
        f"{payload['framework']}: time per epoch over successive epochs"
        + (" (real training loop)" if training else " (data loader, no model)"),
        fontsize=12,
    )
    figure_caption(fig, payload)
    return _save(fig, path)


# -- matrix ---------------------------------------------------------------------------------------------------------
def _matrix_grid(payload: dict, x_axis: str, color: Palette, path: str) -> str | None:
    axes = payload["axes"]
    order = list(payload["axes"])  # batch_size, seq_length|preset, num_workers
    if len(axes.get(x_axis, [])) < 2:
        return None
    panel_axis = next(a for a in order if a not in (x_axis, "num_workers"))
    workers, panels = axes["num_workers"], axes[panel_axis]
    rows = _ok(payload["rows"])
    categorical = x_axis == "preset"
    xs = list(axes[x_axis]) if categorical else sorted(axes[x_axis])
    fig = _figure(3.6 * len(panels) + 1.0, 3.0 * len(workers) + 1.6)
    grid = fig.subplots(len(workers), len(panels), sharex=True, sharey=True, squeeze=False)
    seen = {}
    for i, w in enumerate(workers):
        for j, pv in enumerate(panels):
            ax = grid[i][j]
            for b in payload["backends"]:
                pts = sorted(
                    (xs.index(r[x_axis]), r["samples_per_s"])
                    for r in rows
                    if r["backend"] == b and r["num_workers"] == w and r[panel_axis] == pv and r[x_axis] in xs
                )
                if not pts:
                    continue
                px = [p for p, _ in pts] if categorical else [xs[p] for p, _ in pts]
                (line,) = ax.plot(
                    px, [v for _, v in pts], "--" if tagged(b) else "-", marker="o", color=color(b), label=b
                )
                seen.setdefault(b, line)
            ax.set_title(f"{AXIS_LABEL[panel_axis]} {pv}, {plural(w, 'worker')}", fontsize=10)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("samples/s")
            if i == len(workers) - 1:
                ax.set_xlabel(
                    {
                        "batch_size": "batch size (samples)",
                        "seq_length": "seq_length (steps per window)",
                        "preset": "delta_timestamps preset",
                    }[x_axis]
                )
    ax0 = grid[0][0]
    ax0.set_ylim(bottom=0)  # once, after every panel's data: the panels share this axis
    if categorical:
        ax0.set_xticks(range(len(xs)), xs)
    elif x_axis == "batch_size":
        ax0.set_xscale("log", base=2)
        ax0.set_xticks(xs, [str(x) for x in xs])
        ax0.minorticks_off()
    else:
        ax0.set_xticks(xs, [str(x) for x in xs])
    fig.legend(list(seen.values()), list(seen), loc="outside upper right", fontsize=9, title="backend")
    what = {"batch_size": "batch size", "seq_length": "sequence length", "preset": "delta_timestamps preset"}[x_axis]
    fig.suptitle(f"{payload['framework']}: samples/s against {what}, per backend", fontsize=12)
    failed = [r for r in payload["rows"] if r.get("error")]
    figure_caption(fig, payload, f"{len(failed)} failed cell(s) not drawn" if failed else "")
    return _save(fig, path)


# -- loss curves ----------------------------------------------------------------------------------------------------
def loss_groups(payload: dict) -> dict:
    """A loss-curves file's runs grouped by label (else backend).

    Args:
        payload: A loaded loss-curves result.

    Returns:
        ``{label: [runs, in file order]}``.
    """
    groups = {}
    for r in payload["runs"]:
        groups.setdefault(r.get("label") or r["backend"], []).append(r)
    return groups


def _stats(runs, metric):
    n = max(len(r["epochs"]) for r in runs)
    mean, lo, hi, sd = [], [], [], []
    for e in range(n):
        v = [r["epochs"][e][metric] for r in runs if e < len(r["epochs"]) and metric in r["epochs"][e]]
        m = sum(v) / len(v) if v else math.nan
        mean.append(m)
        lo.append(min(v) if v else math.nan)
        hi.append(max(v) if v else math.nan)
        sd.append(math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else math.nan)
    return mean, lo, hi, sd


def reference_label(payload: dict, groups: dict) -> str | None:
    """The group the others are compared with: the file's ``reference`` (default ``native``) as a label, else the
    first group whose backend it names.

    Args:
        payload: A loaded loss-curves result.
        groups: Its groups (:func:`loss_groups`).

    Returns:
        The label, or ``None`` when no group matches.
    """
    ref = payload.get("reference", "native")
    if ref in groups:
        return ref
    return next((g for g, runs in groups.items() if runs[0]["backend"] == ref), None)


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">"]


def loss_points(payload: dict) -> str:
    """What a point of a loss-curves file is: ``epoch`` (default) or ``step`` (its ``x``; e.g. lerobot-train's loop,
    one point per training step).

    Args:
        payload: A loaded loss-curves result.
    """
    return "step" if payload.get("x") == "step" else "epoch"


def identical_series(a: list, b: list) -> bool:
    """The same number of points, each equal, NaN equal to NaN (the exact-parity backends' losses are
    bit-identical).

    Args:
        a: One series.
        b: The other.
    """
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


def plot_loss_curves(payload: dict, path: str, color: Palette) -> str | None:
    """Loss curves per run group, one panel per metric: the mean over seeds, and a min-max band.

    The reference is drawn first, thick and pale, under every other group (thin lines, one marker each): groups
    whose curves equal the reference's exactly lie on it and stay visible, and the legend says "identical".

    Args:
        payload: A loaded loss-curves result.
        path: The PNG to write.
        color: The backend colours.

    Returns:
        ``path``, or ``None`` when the file has no runs or no metrics.
    """
    groups = loss_groups(payload)
    metrics = payload.get("metrics") or []
    if not groups or not metrics:
        return None
    ref = reference_label(payload, groups)
    per = loss_points(payload)
    backend_of = {label: runs[0]["backend"] for label, runs in groups.items()}
    same = {
        label: ref is not None
        and label != ref
        and all(identical_series(_stats(runs, m)[0], _stats(groups[ref], m)[0]) for m in metrics)
        for label, runs in groups.items()
    }
    fig = _figure(4.0 * len(metrics) + 2.8, 4.4)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    handles = {}
    order = ([ref] if ref else []) + [g for g in groups if g != ref]
    for ax, metric in zip(axes, metrics):
        for k, label in enumerate(order):
            runs = groups[label]
            mean, lo, hi, _ = _stats(runs, metric)
            x = list(range(1, len(mean) + 1))
            c = color(backend_of[label])
            ax.fill_between(x, lo, hi, color=c, alpha=0.15 if label == ref else 0.12, linewidth=0)
            if label == ref:
                (line,) = ax.plot(x, mean, "-", color=c, alpha=0.35, linewidth=7, solid_capstyle="round", zorder=2)
            else:
                (line,) = ax.plot(
                    x,
                    mean,
                    "--" if "control" in label else "-",
                    color=c,
                    linewidth=1.3,
                    marker=MARKERS[(k - 1) % len(MARKERS)],
                    markersize=6,
                    markerfacecolor="none",
                    markeredgewidth=1.4,
                    zorder=3 + k,
                )
            handles.setdefault(label, (line, len(runs)))
        ax.set_title(metric.replace("_", " "), fontsize=10)
        ax.set_xlabel("training step" if per == "step" else "epoch")
        ax.set_ylabel("loss at that step" if per == "step" else "loss (mean over the epoch)")
        ax.grid(alpha=0.3)
        n = max(len(r["epochs"]) for runs in groups.values() for r in runs)
        ax.set_xticks(range(1, n + 1))

    def legend(g, k):
        text = textwrap.fill(g, 28)
        if same.get(g):
            text += f"\nidentical to {ref}"
        return text + ("\n1 seed" if k == 1 else f"\n{k} seeds: mean, band = min-max")

    fig.legend(
        [h for h, _ in handles.values()],
        [legend(g, k) for g, (_, k) in handles.items()],
        loc="outside right upper",
        fontsize=8,
        labelspacing=1.0,
    )
    name = payload.get("name") or os.path.splitext(os.path.basename(payload["_path"]))[0]
    fig.suptitle(
        f"{payload['framework']}: training losses per {per}, {ref or 'native'} against each backend ({name})",
        fontsize=12,
    )
    figure_caption(fig, payload)
    return _save(fig, path)


def loss_summary(payload: dict) -> str:
    """A markdown table: per run group, its seeds, last-point (epoch or step) mean per metric, and its largest
    distance from the reference mean over all points in reference standard deviations ("identical" when every point
    equals the reference's).

    Args:
        payload: A loaded loss-curves result.

    Returns:
        The table.
    """
    groups, metrics = loss_groups(payload), payload.get("metrics") or []
    ref = reference_label(payload, groups)
    ref_stats = {m: _stats(groups[ref], m) for m in metrics} if ref else {}
    per = loss_points(payload)
    headers = (
        ["runs", "seeds"]
        + [f"last {per} {m}" for m in metrics]
        + ([f"largest abs(mean - {ref} mean) / {ref} std"] if ref else [])
    )
    body = []
    for label, runs in groups.items():
        row = [f"`{label}`", str(len(runs))]
        worst, same = None, bool(ref) and label != ref
        for m in metrics:
            mean, _, _, _ = _stats(runs, m)
            row.append(f"{mean[-1]:.4g}")
            if ref and label != ref:
                rm, _, _, rsd = ref_stats[m]
                same = same and identical_series(mean, rm)
                for a, b, s in zip(mean, rm, rsd):
                    if s and not math.isnan(s) and not math.isnan(a):
                        z = abs(a - b) / s
                        worst = z if worst is None else max(worst, z)
        if ref:
            row.append(
                "(reference)" if label == ref else "identical" if same else ("-" if worst is None else f"{worst:.2f}")
            )
        body.append(row)
    return tables.markdown_table(headers, body, [False] + [True] * (len(headers) - 1))


# -- the report -----------------------------------------------------------------------------------------------------
def _stem(path: str, used: set) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    out, k = stem, 2
    while out in used:
        out, k = f"{stem}_{k}", k + 1
    used.add(out)
    return out


def _img(md, title, path, out_dir):
    if path:
        md.append(f"![{title}]({os.path.relpath(path, out_dir).replace(os.sep, '/')})\n")


# The cost-growth results (``kind: growth``, ``growth_findings``, ``growth_conversion``) measure the project itself:
# their plots and tables are the harness's (``benchmarks/harness/growth_plots.py``), which a wheel does not contain.
GROWTH_ELSEWHERE = (
    "a cost-growth result of the project's benchmark harness: plot it from a clone of the repository "
    "with `python -m benchmarks.harness growth report FILES --out DIR`"
)


SAMPLE_COSTS_ELSEWHERE = (
    "a per-sample cost profile of the project's benchmarks (benchmarks/sample_costs.py): its table is in "
    "docs/benchmarks.md, regenerated by `python -m benchmarks.harness readme docs/benchmarks.md`"
)


def report(result_paths, out_dir: str, skipped: list | None = None) -> str:
    """Plots (PNG) and ``report.md`` in ``out_dir`` for every result file given (loader-only and training
    benchmark results, matrix results, loss curves).

    Args:
        result_paths: The result files.
        out_dir: Where the plots and ``report.md`` go (created).
        skipped: A list to which a file that is none of these (e.g. ``benchmarks/results/codecs.json``, met when
            given ``benchmarks/results/*.json``, or a cost-growth result: :data:`GROWTH_ELSEWHERE`) adds one line
            saying why, instead of failing; without it such a file fails.

    Returns:
        The path of ``report.md``.

    Raises:
        TableError: a file that is not a result (without ``skipped``), or nothing left to report either way.
    """
    payloads, passed_over = [], []
    for path in result_paths:
        try:
            payload = load_result(path)
            if payload["_kind"].startswith("growth"):
                raise TableError(f"{path}: {GROWTH_ELSEWHERE}")
            if payload["_kind"] == "sample_costs":  # its table is the harness's too (benchmarks/sample_costs.py)
                raise TableError(f"{path}: {SAMPLE_COSTS_ELSEWHERE}")
            payloads.append(payload)
        except TableError as exc:
            if skipped is None:
                raise
            passed_over.append(path)
            skipped.append(str(exc))
    if not payloads:
        raise TableError(
            "no result files given"
            if not passed_over
            else f"none of the {len(passed_over)} file(s) given is a benchmark, matrix or loss-curves result"
        )
    os.makedirs(out_dir, exist_ok=True)
    color = Palette()
    for p in payloads:  # colours in the order backends first appear, the same in every figure
        for r in tables.rows_of(p):
            color(r["backend"])
    used = set()
    md = [
        "# Benchmark report\n",
        f"Generated by `robo-loaders report` from {len(payloads)} result file(s). How every number is measured: "
        "`docs/benchmarks.md` in the robo-loaders-plugin repository. Ratios are always against baselines measured "
        "in the same run (same file, same cell).\n",
    ]
    if passed_over:
        md.append(
            "Skipped (not a benchmark, matrix or loss-curves result): "
            + ", ".join(f"`{os.path.basename(p)}`" for p in passed_over)
            + ".\n"
        )
    epochs_seen = False
    for p in payloads:
        stem = _stem(p["_path"], used)
        png = lambda what: os.path.join(out_dir, f"{stem}_{what}.png")  # noqa: E731, B023 (used in this pass only)
        md.append(f"## {p['framework']}: `{os.path.basename(p['_path'])}` ({p['_kind']})\n")
        md.append(f"Machine: {machine_caption(p.get('machine'))}.")
        s = settings_caption(p) if p["_kind"] != "loss_curves" else ""
        ds = (p.get("settings") or {}).get("dataset") or (p.get("settings") or {}).get("root")
        if ds and p["_kind"] in ("bench", "training"):
            s += f"; dataset `{os.path.basename(ds)}`"
        md.append(f"Settings: {s}.\n" if s else "")
        if p["_kind"] in ("bench", "training"):
            if p["_kind"] == "training":
                md.append("Training benchmark (the frameworks' real training loops; `docs/training-benchmark.md`).\n")
            md.append(tables.results_table([p]) + "\n")
            if p.get("conversion"):
                md.append("Conversion (`robo-loaders convert`, a fresh process each):\n")
                md.append(tables.results_table([p], {"table": "conversion"}) + "\n")
            failed = [r["backend"] for r in p["results"] if r.get("error")]
            if failed:
                md.append(f"Failed (not plotted): {', '.join(f'`{b}`' for b in failed)}.\n")
            runs_tagged = [r["backend"] for r in _ok(p["results"]) if tagged(r["backend"])]
            if runs_tagged:
                md.append(
                    f"In the table, not plotted: {', '.join(f'`{b}`' for b in runs_tagged)} (a `#tag` runs a "
                    "backend again with other options, e.g. another rate: another workload, not comparable "
                    "bar for bar).\n"
                )
            _img(md, "throughput", plot_throughput(p, png("throughput"), color), out_dir)
            _img(md, "memory", plot_memory(p, png("memory"), color), out_dir)
            _img(md, "start-up", plot_startup(p, png("startup"), color), out_dir)
            ep = plot_epochs(p, png("epochs"), color)
            epochs_seen |= bool(ep)
            _img(md, "epochs", ep, out_dir)
        elif p["_kind"] == "matrix":
            ax2 = list(p["axes"])[1]
            for w in p["axes"]["num_workers"]:
                for v in p["axes"][ax2]:
                    opts = {"table": "pivot", "by": "batch_size", ax2: str(v), "num_workers": str(w)}
                    try:
                        t = tables.results_table([p], opts)
                    except TableError:
                        continue
                    md.append(f"samples/s, {AXIS_LABEL[ax2]} {v}, {plural(w, 'worker')}:\n\n{t}\n")
            _img(
                md, "samples/s against batch size", _matrix_grid(p, "batch_size", color, png("vs_batch_size")), out_dir
            )
            _img(md, f"samples/s against {ax2}", _matrix_grid(p, ax2, color, png(f"vs_{ax2}")), out_dir)
            failed = {}
            for r in p["rows"]:
                if r.get("error"):
                    failed.setdefault(r["backend"], []).append(r)
            if failed:

                def example(rs):
                    where = ", ".join(f"{a}={rs[0][a]}" for a in p["axes"])  # noqa: B023 (used in this pass only)
                    return f"e.g. {where}: {rs[0]['error'].strip().splitlines()[-1][:120]}"

                md.append(
                    f"{sum(map(len, failed.values()))} failed cell(s), not plotted: "
                    + "; ".join(f"`{b}` in {len(rs)} cell(s) ({example(rs)})" for b, rs in failed.items())
                    + ".\n"
                )
            if any(tables.epoch_times(r) for r in p["rows"]):
                md.append("Per-cell epoch times are in the table below (`epoch times (s)`).\n")
                md.append(
                    tables.results_table(
                        [p], {"columns": ",".join(list(p["axes"]) + ["backend", "build_s", "epoch_times_s"])}
                    )
                    + "\n"
                )
                epochs_seen = True
        else:
            if p.get("notes"):
                md.append(f"{p['notes']}\n")
            _img(md, "loss curves", plot_loss_curves(p, png("loss_curves"), color), out_dir)
            md.append(loss_summary(p) + "\n")
    if not epochs_seen:
        md.append(
            "No result here has per-epoch times (`epoch_times_s` in a loader-only result row, format in "
            "`docs/benchmarks.md`; or a training-benchmark result's `epochs`), so there is no time-per-epoch "
            "plot; the start-up plots show conversion, build and first batch.\n"
        )
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(line for line in md if line) + "\n")
    return path


@click.command("report", cls=Command, options_metavar="--out DIR [OPTIONS]")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    required=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="write PNG plots and report.md for RESULTS here",
)
def report_cmd(results, out_dir):
    """Plots and a markdown page from benchmark, matrix, training-benchmark and loss-curve results (other files
    given, e.g. benchmarks/results/codecs.json or the project's cost-growth results, are skipped with one line
    each).

    Args:
        results: RESULTS, the result JSON files (required: click refuses none, as the usage line says).
        out_dir: ``--out``, where the plots and report.md go (required, as the usage line says).
    """
    from robo_loaders_plugin.core.paths import writable_dir_problem

    problem = writable_dir_problem(out_dir)  # a read-only location was an OSError traceback (a reviewer's)
    if problem:
        raise click.BadParameter(f"{problem}; give a directory you can write to", param_hint="--out")
    skipped = []
    try:
        path = report(results, out_dir, skipped)
    except TableError as exc:
        for line in skipped:
            click.echo(f"skipped {line}")
        raise click.ClickException(str(exc)) from None
    for line in skipped:
        click.echo(f"skipped {line}")
    click.echo(f"wrote {path}")
