"""The tables and figures of ``benchmarks/mixtures.py``'s result (``kind: mixtures``): every number from the result.

Why apart from the run: docs/benchmarks.md's tables are regenerated from the committed result
(``python -m benchmarks.mixtures table``) and checked against it by the quick test, without running anything.
"""

from __future__ import annotations

import os

REFERENCE = "reference"
REFERENCE_COLOR = "#9a9a9a"  # a light grey: the plugin's native mixture has the report's dark grey
FRAMEWORKS = ("lerobot", "robomimic")
FRAMEWORK_NAMES = {"lerobot": "LeRobot", "robomimic": "robomimic"}
SETTINGS = ("layouts", "rates", "many")
HEADER = (
    "| loader | samples/s | vs reference | first batch (s) | build (s) | start-up vs reference | peak mem |\n"
    "|---|---:|---:|---:|---:|---:|---:|"
)


def framework_of(row: dict) -> str:
    """A row's framework (rows of results before robomimic was measured say none: LeRobot)."""
    return row.get("framework", "lerobot")


def _ok(rows):
    return [r for r in rows if not r.get("error")]


def machine_line(result: dict) -> str:
    """The machine, as the captions say it."""
    from robo_loaders_plugin.bench.tables import machine_caption

    return machine_caption(result.get("machine"))


def load_range(result: dict, framework: str | None = None) -> str:
    """The machine's 1-minute load average over a framework's runs (all runs: ``None``) as ``lo-hi``, or ``""``
    when its rows do not say (rows measured before the load was recorded)."""
    rows = [r for r in result["rows"] if framework is None or framework_of(r) == framework]
    loads = [x for r in rows for x in r.get("load_avg", ())]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""


def load_words(result: dict) -> str:
    """The load averages of the runs, per framework, as the captions say them (``""`` when no row says)."""
    parts = []
    for fw in FRAMEWORKS:
        if any(framework_of(r) == fw for r in result["rows"]):
            load = load_range(result, fw)
            parts.append(f"{FRAMEWORK_NAMES[fw]} {load or 'not recorded'}")
    return "" if not any(load_range(result, fw) for fw in FRAMEWORKS) else ", ".join(parts)


def setting_title(result: dict, framework: str, setting: str) -> str:
    """What a throughput setting is, in a few words (the tables' and figures' titles).

    Args:
        result: The result (its ``settings``).
        framework: ``lerobot`` or ``robomimic``.
        setting: ``layouts``, ``rates`` or ``many``.

    Returns:
        The title.
    """
    st = result["settings"]
    target = st.get("target_fps", 20)
    if setting == "layouts":
        return f"3 components, 3 camera layouts, {target:g} fps"
    if setting == "rates":
        rates = "/".join(f"{r:g}" for r in st.get("rates", (20, 10, 30)))
        return f"{rates} fps served at {target:g} fps"
    many = st.get("many_components", 100) if framework == "lerobot" else st["robomimic"]["many_components"]
    return f"{many} small components"


def tables(result: dict) -> str:
    """The markdown tables of docs/benchmarks.md's mixture section (every number from ``result``).

    Args:
        result: A ``kind: mixtures`` result.

    Returns:
        Markdown: a throughput table per framework and setting, then the start-up table.
    """
    from robo_loaders_plugin.bench.plots import significant

    lines = []
    for fw in FRAMEWORKS:
        for setting in SETTINGS:
            rows = [
                r
                for r in result["rows"]
                if r["kind"] == "throughput" and r["setting"] == setting and framework_of(r) == fw
            ]
            if not rows:
                continue
            lines += [f"**{FRAMEWORK_NAMES[fw]}, {setting}**: {setting_title(result, fw, setting)}", "", HEADER]
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
            "**LeRobot, start-up** (first metadata read to first batch, seconds; `compressed_cache`'s cache built by "
            "an earlier run, its first run in brackets)",
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
    load = load_words(result)
    cores = (result.get("machine") or {}).get("cores")
    load = f"; 1-minute load average during the runs (on {cores} cores, shared): {load}" if load else ""
    lines.append(f"<sub>Machine: {machine_line(result)}{load}.</sub>")
    return "\n".join(lines) + "\n"


def plot(result: dict, out_dir: str, source: str = "mixtures.json") -> list[str]:
    """Two figures: ``mixtures_throughput.png`` (samples/s per loader, a panel per framework and setting, the ratio
    to the reference above each bar) and ``mixtures_startup.png`` (LeRobot start-up against components, and against
    frames at a fixed number of components, log-log, a line per loader).

    Args:
        result: A ``kind: mixtures`` result.
        out_dir: Where the PNGs go.
        source: The result's file name, for the captions.

    Returns:
        The paths written.
    """
    os.makedirs(out_dir, exist_ok=True)
    load = load_words(result)
    caption = f"Source: {source} | machine: {machine_line(result)} (shared, noisy" + (
        f"; load average {load})" if load else ")"
    )
    written = []
    path = _plot_throughput(result, out_dir, caption)
    if path:
        written.append(path)
    path = _plot_startup(result, out_dir, caption)
    if path:
        written.append(path)
    return written


def _plot_throughput(result: dict, out_dir: str, caption: str) -> str | None:
    import textwrap

    from matplotlib.figure import Figure

    from robo_loaders_plugin.bench.plots import color_of, significant

    thr = _ok([r for r in result["rows"] if r["kind"] == "throughput"])
    if not thr:
        return None
    fws = [fw for fw in FRAMEWORKS if any(framework_of(r) == fw for r in thr)]
    settings = [s for s in SETTINGS if any(r["setting"] == s for r in thr)]
    widths = [max(2, *(sum(r["setting"] == s and framework_of(r) == fw for r in thr) for fw in fws)) for s in settings]
    fig = Figure(figsize=(13, 4.2 * len(fws) + 0.8), layout="constrained")
    axes = fig.subplots(len(fws), len(settings), squeeze=False, width_ratios=widths)
    for i, fw in enumerate(fws):
        for ax, s in zip(axes[i], settings):
            rows = [r for r in thr if r["setting"] == s and framework_of(r) == fw]
            if not rows:
                ax.set_axis_off()
                continue
            names = [r["backend"] for r in rows]
            values = [r["samples_per_s"] for r in rows]
            bars = ax.bar(names, values, color=[REFERENCE_COLOR if n == REFERENCE else color_of(n) for n in names])
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
            ax.set_title(f"{FRAMEWORK_NAMES[fw]}: {setting_title(result, fw, s)}", fontsize=10)
            ax.margins(y=0.25)
    fig.suptitle(
        "Mixtures: loader-only samples/s against a hand-written ConcatDataset + WeightedRandomSampler "
        "(the ratio is to the reference of the same run)"
    )
    st = result["settings"]
    rm = st.get("robomimic", {})
    text = (
        f"{caption} | LeRobot: ACT deltas, batch {st['batch_size']}, {st['batches']} timed batches "
        f"({st.get('many_batch_size', st['batch_size'])} and {st.get('many_batches', st['batches'])} at "
        f"{st.get('many_components', 100)} components)"
    )
    if rm:
        text += (
            f"; robomimic: seq_length {rm['seq_length']}, hdf5_cache_mode {rm['cache_mode']}, batch "
            f"{rm['batch_size']}, {rm['batches']} timed batches ({rm['many_batch_size']} and {rm['many_batches']} at "
            f"{rm['many_components']} components)"
        )
    text += f"; {st['num_workers']} workers, weights 1/2/3"
    fig.supxlabel(textwrap.fill(text, 170), fontsize=8, color="#444444")
    path = os.path.join(out_dir, "mixtures_throughput.png")
    fig.savefig(path, dpi=110)
    return path


def _plot_startup(result: dict, out_dir: str, caption: str) -> str | None:
    import textwrap

    from matplotlib.figure import Figure

    from robo_loaders_plugin.bench.plots import color_of
    from robo_loaders_plugin.core.units import plural

    st_rows = _ok([r for r in result["rows"] if r["kind"] == "startup"])
    if not st_rows:
        return None
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
            ax_n.plot([r["components"] for r in by_n], [r["startup_s"] for r in by_n], marker="o", color=color, label=b)
        if by_f:
            ax_f.plot([r["frames"] for r in by_f], [r["startup_s"] for r in by_f], marker="o", color=color, label=b)
        for ax, rows, x in ((ax_n, by_n, "components"), (ax_f, by_f, "frames")):
            once = [r for r in rows if r.get("once_s") is not None]
            if once:
                ax.plot(
                    [r[x] for r in once],
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
    return path
