"""``python -m benchmarks.harness growth report``: the cost-growth results (``kind: growth``, written by
``growth run``; ``growth_findings`` and ``growth_conversion``) as tables and plots: how each backend's start-up,
one-time build or conversion, speed and memory grow with the number of frames, on log-log axes, and the table of
issue 22's goals at the largest size. Also the tables of ``python -m benchmarks.harness readme`` for these results.

These measure the project itself, so they live here, beside ``growth.py``, and not in the package: ``robo-loaders
report`` skips them with one line naming this command. The figures use the package report's colours and captions
(``robo_loaders_plugin.bench.plots``), so a growth plot reads like every other one.

A growth result holds rows of one backend on one workload size: ``frames``, ``startup_s`` (factory call to first
batch, one-time work excluded), ``once`` (the one-time conversion or cache build, with its MB/s per worker),
``samples_per_s``, ``peak_mem_bytes`` (process tree PSS), ``held_bytes_per_frame`` (what the dataset object keeps
that is not frame data) and ``plan_s_per_million`` (CPU time of planning a pass, batch-kind backends).
"""

from __future__ import annotations

import os

from robo_loaders_plugin.bench.tables import TableError, load_result, machine_caption, settings_caption

GOAL_STARTUP_SLACK_S = 2.0
GOAL_PLAN_S_PER_MILLION = 0.2
GOAL_HELD_BYTES_PER_FRAME = 64
GOAL_SPEED_KEPT = 0.8  # samples/s at the largest size over the smallest's


def _ok(rows):
    return [r for r in rows if not r.get("error")]


def series(payload: dict) -> dict:
    """The successful rows of a growth result by backend.

    Args:
        payload: A growth result (``kind: growth``).

    Returns:
        ``{backend: rows sorted by frames}``.
    """
    out: dict = {}
    for r in _ok(payload["rows"]):
        out.setdefault(r["backend"], []).append(r)
    return {b: sorted(rs, key=lambda r: r["frames"]) for b, rs in out.items()}


PANELS = [
    ("startup_s", "factory call to first batch (s)", lambda r: r.get("startup_s")),
    ("once_s", "one-time build / conversion (s)", lambda r: (r.get("once") or {}).get("wall_s")),
    ("samples_per_s", "samples/s (steady)", lambda r: r.get("samples_per_s")),
    (
        "peak_mem",
        "peak memory, process tree (MiB)",
        lambda r: r["peak_mem_bytes"] / 2**20 if r.get("peak_mem_bytes") else None,
    ),
]


def plot_growth(payload: dict, path: str, color, caption) -> str | None:
    """One figure, four log-log panels against frames (time to first batch, build/convert, samples/s, peak
    memory), a line per backend.

    Args:
        payload: A loaded growth result (``robo_loaders_plugin.bench.tables.load_result``).
        path: Where the PNG goes.
        color: The report's palette (one colour per backend).
        caption: Writes the figure's caption (source, machine, settings) from the payload.

    Returns:
        ``path``, or None when no row succeeded.
    """
    from matplotlib.figure import Figure

    lines = series(payload)
    if not lines:
        return None
    fig = Figure(figsize=(11, 7.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for ax, (_, title, value) in zip(axes.flat, PANELS):
        drawn = False
        for backend, rows in lines.items():
            pts = [(r["frames"], value(r)) for r in rows if value(r)]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label=backend, color=color(backend))
            drawn = True
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("frames in the dataset")
        ax.grid(True, which="both", alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "nothing measured", ha="center", va="center", transform=ax.transAxes)
    axes.flat[0].legend(fontsize=8)
    workload = payload.get("workload") or ""
    named = payload["framework"] + (f" ({workload})" if workload and workload != payload["framework"] else "")
    fig.suptitle(f"{named}: cost growth with the number of frames")
    caption(fig, payload)
    fig.savefig(path, dpi=110)
    return path


def goals(payload: dict) -> list[dict]:
    """Issue 22's goals per backend at the largest size measured: start-up against native's plus 2 s, planning
    CPU time per million items, bytes held per frame beyond frame data, samples/s kept from the smallest size.

    Args:
        payload: A growth result.

    Returns:
        One dict per backend: the measures and ``*_ok`` (True, False, or None when it does not apply).
    """
    lines = series(payload)
    native = lines.get("native") or lines.get("native:low_dim")
    out = []
    for backend, rows in lines.items():
        big, small = rows[-1], rows[0]
        base = next((r for r in (native or []) if r["frames"] == big["frames"]), None)
        # a row from a rerun (``rerun_native_startup_s``: native measured in that run) is judged against its run's
        row = {
            "backend": backend,
            "frames": big["frames"],
            "startup_s": big.get("startup_s"),
            "native_startup_s": big.get("rerun_native_startup_s") or (base.get("startup_s") if base else None),
            "plan_s_per_million": big.get("plan_s_per_million"),
            "held_bytes_per_frame": big.get("held_bytes_per_frame"),
            "speed_kept": (big["samples_per_s"] / small["samples_per_s"]) if small is not big else None,
        }
        row["startup_ok"] = (
            None
            if base is None or backend == base["backend"]
            else row["startup_s"] <= row["native_startup_s"] + GOAL_STARTUP_SLACK_S
        )
        row["plan_ok"] = (
            None if row["plan_s_per_million"] is None else row["plan_s_per_million"] <= GOAL_PLAN_S_PER_MILLION
        )
        row["held_ok"] = (
            None if row["held_bytes_per_frame"] is None else row["held_bytes_per_frame"] <= GOAL_HELD_BYTES_PER_FRAME
        )
        row["speed_ok"] = None if row["speed_kept"] is None else row["speed_kept"] >= GOAL_SPEED_KEPT
        out.append(row)
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _mark(ok):
    return "" if ok is None else (" ok" if ok else " **missed**")


def growth_tables(payload: dict) -> str:
    """Markdown: every row (size x backend), then the goals at the largest size.

    Args:
        payload: A growth result.

    Returns:
        The tables, failed rows named under them.
    """
    passes = any(r.get("pass_s") is not None for r in payload["rows"])  # ``growth run --full-pass``
    head = [
        "backend",
        "frames",
        "start-up s",
        "one-time s",
        "MB/s per worker",
        "samples/s",
        "peak MiB",
        "held B/frame",
        "plan s/M items",
    ] + (["full pass s (samples)"] if passes else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for backend, rows in series(payload).items():
        for r in rows:
            once = r.get("once") or {}
            cells = [
                f"`{backend}`",
                f"{r['frames']:,}",
                _fmt(r.get("startup_s"), ".2f"),
                _fmt(once.get("wall_s"), ".1f"),
                _fmt(once.get("mb_per_s_per_worker"), ".1f"),
                _fmt(r.get("samples_per_s"), ".0f"),
                _fmt(r["peak_mem_bytes"] / 2**20 if r.get("peak_mem_bytes") else None, ".0f"),
                _fmt(r.get("held_bytes_per_frame"), ".1f"),
                _fmt(r.get("plan_s_per_million"), ".3f"),
            ]
            if passes:
                cells.append("sampled" if r.get("pass_s") is None else f"{r['pass_s']:.0f} ({r['pass_samples']:,})")
            lines.append("| " + " | ".join(cells) + " |")
    failed = [r for r in payload["rows"] if r.get("error")]
    out = "\n".join(lines) + "\n"
    if failed:
        out += (
            "\nFailed: "
            + "; ".join(
                f"`{r['backend']}` at {r.get('frames', '?'):,} frames ({r['error'].strip().splitlines()[-1][:100]})"
                for r in failed
            )
            + "\n"
        )
    g = goals(payload)
    if g:
        out += (
            f"\nGoals at {g[0]['frames']:,} frames (start-up <= native's + {GOAL_STARTUP_SLACK_S:g} s; planning <= "
            f"{GOAL_PLAN_S_PER_MILLION:g} s per million items; <= {GOAL_HELD_BYTES_PER_FRAME} bytes held per "
            f"frame beyond frame data; samples/s >= {GOAL_SPEED_KEPT:.0%} of the smallest size's):\n\n"
        )
        out += "| backend | start-up s (native's) | plan s/M | held B/frame | samples/s kept |\n|---|---|---|---|---|\n"
        for r in g:
            out += (
                f"| `{r['backend']}` | {_fmt(r['startup_s'], '.2f')} ({_fmt(r['native_startup_s'], '.2f')})"
                f"{_mark(r['startup_ok'])} | {_fmt(r['plan_s_per_million'], '.3f')}{_mark(r['plan_ok'])} | "
                f"{_fmt(r['held_bytes_per_frame'], '.1f')}{_mark(r['held_ok'])} | "
                f"{_fmt(r['speed_kept'], '.2f')}{_mark(r['speed_ok'])} |\n"
            )
    return out


def growth_section(payload: dict, out_dir: str, stem: str, color, caption) -> list[str]:
    """The report's markdown lines for one growth result (tables and its plot).

    Args:
        payload: A loaded growth result.
        out_dir: The report's directory (the plot is written there).
        stem: The plot's file name stem.
        color: The report's palette.
        caption: Writes a figure's caption.

    Returns:
        Markdown lines.
    """
    md = [growth_tables(payload)]
    png = plot_growth(payload, os.path.join(out_dir, f"{stem}_growth.png"), color, caption)
    if png:
        md.append(f"![cost growth]({os.path.relpath(png, out_dir).replace(os.sep, '/')})\n")
    return md


def findings_table(payload: dict) -> str:
    """Markdown: each O(dataset) cost profiling found, before and after (``growth findings``).

    Args:
        payload: A ``growth_findings`` result.

    Returns:
        The table.
    """
    r = payload["results"]
    rows = []

    def add(what, before, after, unit="s"):
        rows.append(f"| {what} | {_fmt(before, '.3g')} {unit} | {_fmt(after, '.3g')} {unit} |")

    if "planner" in r:
        add(r["planner"]["what"], r["planner"]["before_s"], r["planner"]["after_s"])
    for key in ("lerobot_index", "lerobot_sampler"):
        if key in r:
            add(r[key]["what"], r[key]["before_s"], r[key]["after_s"])
    if "robomimic_validation" in r:
        v = r["robomimic_validation"]
        add(v["what"] + " (first run)", v["before_s"], v["after_s"])
        add(v["what"] + " (file unchanged since it passed)", v["before_s"], v["recorded_s"])
        add("robomimic read of one dataset", v["read_us_per_dataset_before"], v["read_us_per_dataset_after"], "us")
    if "store" in r:
        st = r["store"]
        add(
            st["what"] + ": locating its frame blobs (each checked before its first decode now)",
            st["blob_bounds_before_s"],
            st["blob_bounds_after_s"],
        )
        add(
            st["what"] + ": a raw field made readable (concatenated before, offsets now)",
            st["raw_concat_before_s"],
            st["raw_concat_after_s"],
        )
    out = "| cost (each process, at start) | before | after |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    if "store" in r:
        st = r["store"]
        out += (
            f"\nA persisted cache's data CRC reads the whole file: {st['crc_s']:.2f} s for "
            f"{st['crc_bytes'] / 1e6:.0f} MB ({st['crc_bytes'] / st['crc_s'] / 1e6:.0f} MB/s), now once per "
            "version of the file.\n"
        )
    if r.get("gather"):
        out += (
            "\nThe in-memory gather alone (64 random windows of 10 frames copied out of one array, no dataset "
            "code): windows/s by the array's frames, and the share of the smallest kept:\n\n| row | frames | "
            "windows/s | kept |\n|---|---|---|---|\n"
            + "\n".join(
                f"| {g['row']} | {g['frames']:,} | {g['windows_per_s']:,.0f} | {g['kept']:.2f} |" for g in r["gather"]
            )
            + "\n"
        )
    if r.get("digests"):
        out += (
            "\nContent digest of a source whose stat changed (SHA-256 of every byte):\n\n| source | MB | s | MB/s |\n"
        )
        out += (
            "|---|---|---|---|\n"
            + "\n".join(
                f"| `{d['source']}` | {d['bytes'] / 1e6:.0f} | {d['digest_s']:.1f} | {d['mb_per_s']:.0f} |"
                for d in r["digests"]
            )
            + "\n"
        )
    return out


def conversion_table(payload: dict) -> str:
    """Markdown: conversions at size per executor, and the killed-and-resumed run (``growth convert``).

    Args:
        payload: A ``growth_conversion`` result.

    Returns:
        The tables.
    """
    out = [
        "| workload | frames | executor | workers | wall s | source MB/s | MB/s per worker | units |",
        "|---|---|---|---|---|---|---|---|",
    ]
    killed = []
    for res in payload["results"]:
        for run in res["runs"]:
            out.append(
                f"| `{res['workload']}` | {res['frames']:,} | {run['executor']} | {run['workers']} | "
                f"{run['wall_s']:.0f} | {_fmt(run.get('source_mb_per_s'), '.2f')} | "
                f"{_fmt(run.get('mb_per_s_per_worker'), '.2f')} | {run.get('units', '-')} |"
                + (" FAILED" if run.get("error") else "")
            )
        k = res.get("killed")
        if k:
            killed.append(
                f"| `{res['workload']}` | {k['killed_after_s']:.0f} | {k['shards_done_at_kill']} of "
                f"{k['shards_total']} | {k['shards_kept']} | {k['shards_written_by_rerun']} | "
                f"{k['rerun_s']:.0f} ({k['full_run_s']:.0f}) | {'yes' if k['rerun_ok'] else 'no'} |"
            )
    text = "\n".join(out) + "\n"
    if killed:
        text += (
            "\nKilled (SIGKILL to the process group) once a third of the units were done, then the same "
            "command again:\n\n| workload | killed after s | shards done at kill | kept (same inode and mtime) "
            "| written by the rerun | rerun s (full run s) | completed |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(killed)
            + "\n"
        )
    return text


def growth_table(payload: dict, table: str = "results") -> str:
    """The markdown of any cost-growth result, for :func:`growth_report` and README markers
    (``python -m benchmarks.harness readme``).

    Args:
        payload: A loaded ``growth``, ``growth_findings`` or ``growth_conversion`` result.
        table: ``results`` (everything), or for a growth result ``goals`` (the goals table only).

    Returns:
        Markdown.

    Raises:
        TableError: an unknown table for this result.
    """
    kind = payload.get("_kind") or payload.get("kind")
    if kind == "growth_findings":
        return findings_table(payload)
    if kind == "growth_conversion":
        return conversion_table(payload)
    if table == "goals":
        text = growth_tables(payload)
        return text[text.index("Goals at") :] if "Goals at" in text else text
    if table != "results":
        raise TableError(f"table={table!r}: a growth result has the tables 'results' and 'goals'")
    return growth_tables(payload)


def growth_report(result_paths, out_dir: str, skipped: list) -> str:
    """Plots (PNG) and ``report.md`` in ``out_dir`` for every cost-growth result given, as ``robo-loaders report``
    writes its page: per file a section with the machine, the settings, the tables and (``kind: growth``) the
    log-log plot ``<file stem>_growth.png`` (the committed ``benchmarks/results/growth/plots/`` are those).

    Args:
        result_paths: The result files (e.g. ``benchmarks/results/growth/*.json``).
        out_dir: Where the plots and ``report.md`` go (created).
        skipped: A list to which every file that is not a cost-growth result adds one line saying why.

    Returns:
        The path of ``report.md``.

    Raises:
        TableError: none of the files given is a cost-growth result.
    """
    from robo_loaders_plugin.bench.plots import Palette, figure_caption

    payloads = []
    for path in result_paths:
        try:
            p = load_result(path)
        except TableError as exc:
            skipped.append(str(exc))
            continue
        if not p["_kind"].startswith("growth"):
            skipped.append(f"{path}: not a cost-growth result (`robo-loaders report` plots it)")
            continue
        payloads.append(p)
    if not payloads:
        raise TableError(
            f"none of the {len(result_paths)} file(s) given is a cost-growth result "
            "(kind growth, growth_findings or growth_conversion)"
        )
    os.makedirs(out_dir, exist_ok=True)
    color, used = Palette(), set()
    md = [
        "# Cost-growth report\n",
        f"Generated by `python -m benchmarks.harness growth report` from {len(payloads)} result file(s). How every "
        "number is measured: `docs/benchmarks.md`.\n",
    ]
    for p in payloads:
        base = stem = os.path.splitext(os.path.basename(p["_path"]))[0]
        k = 2
        while stem in used:
            stem, k = f"{base}_{k}", k + 1
        used.add(stem)
        md.append(f"## {p['framework']}: `{os.path.basename(p['_path'])}` ({p['_kind']})\n")
        md.append(f"Machine: {machine_caption(p.get('machine'))}.")
        s = settings_caption(p)
        md.append(f"Settings: {s}.\n" if s else "")
        if p["_kind"] == "growth":
            md.append(
                "Cost growth with the number of frames (`python -m benchmarks.harness growth run`; "
                "`docs/benchmarks.md`):\n"
            )
            md += growth_section(p, out_dir, stem, color, figure_caption)
        else:
            md.append(growth_table(p, "results") + "\n")
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(line for line in md if line) + "\n")
    return path
