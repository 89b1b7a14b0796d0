"""Cost-growth results (``kind: growth``, written by the project harness's ``growth run``): how each backend's
start-up, one-time build or conversion, speed and memory grow with the number of frames, on log-log axes, and the
table of issue 22's goals at the largest size.

A growth result holds rows of one backend on one workload size: ``frames``, ``startup_s`` (factory call to first
batch, one-time work excluded), ``once`` (the one-time conversion or cache build, with its MB/s per worker),
``samples_per_s``, ``peak_mem_bytes`` (process tree PSS), ``held_bytes_per_frame`` (what the dataset object keeps
that is not frame data) and ``plan_s_per_million`` (CPU time of planning a pass, batch-kind backends).
"""
from __future__ import annotations

import os

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
    ("peak_mem", "peak memory, process tree (MiB)", lambda r: r["peak_mem_bytes"] / 2 ** 20
     if r.get("peak_mem_bytes") else None),
]


def plot_growth(payload: dict, path: str, color, caption) -> str | None:
    """One figure, four log-log panels against frames (time to first batch, build/convert, samples/s, peak
    memory), a line per backend.

    Args:
        payload: A loaded growth result (``bench.tables.load_result``).
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
    fig.suptitle(f"{payload['framework']} ({payload.get('workload', '')}): cost growth with the number of frames")
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
        row = {"backend": backend, "frames": big["frames"], "startup_s": big.get("startup_s"),
               "native_startup_s": base.get("startup_s") if base else None,
               "plan_s_per_million": big.get("plan_s_per_million"),
               "held_bytes_per_frame": big.get("held_bytes_per_frame"),
               "speed_kept": (big["samples_per_s"] / small["samples_per_s"]) if small is not big else None}
        row["startup_ok"] = (None if base is None or backend == base["backend"] else
                             row["startup_s"] <= row["native_startup_s"] + GOAL_STARTUP_SLACK_S)
        row["plan_ok"] = None if row["plan_s_per_million"] is None else \
            row["plan_s_per_million"] <= GOAL_PLAN_S_PER_MILLION
        row["held_ok"] = None if row["held_bytes_per_frame"] is None else \
            row["held_bytes_per_frame"] <= GOAL_HELD_BYTES_PER_FRAME
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
    head = ["backend", "frames", "start-up s", "one-time s", "MB/s per worker", "samples/s", "peak MiB",
            "held B/frame", "plan s/M items"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for backend, rows in series(payload).items():
        for r in rows:
            once = r.get("once") or {}
            lines.append("| " + " | ".join([
                f"`{backend}`", f"{r['frames']:,}", _fmt(r.get("startup_s"), ".2f"), _fmt(once.get("wall_s"), ".1f"),
                _fmt(once.get("mb_per_s_per_worker"), ".1f"), _fmt(r.get("samples_per_s"), ".0f"),
                _fmt(r["peak_mem_bytes"] / 2 ** 20 if r.get("peak_mem_bytes") else None, ".0f"),
                _fmt(r.get("held_bytes_per_frame"), ".1f"), _fmt(r.get("plan_s_per_million"), ".3f")]) + " |")
    failed = [r for r in payload["rows"] if r.get("error")]
    out = "\n".join(lines) + "\n"
    if failed:
        out += "\nFailed: " + "; ".join(f"`{r['backend']}` at {r.get('frames', '?'):,} frames "
                                        f"({r['error'].strip().splitlines()[-1][:100]})" for r in failed) + "\n"
    g = goals(payload)
    if g:
        out += (f"\nGoals at {g[0]['frames']:,} frames (start-up <= native's + {GOAL_STARTUP_SLACK_S:g} s; planning <= "
                f"{GOAL_PLAN_S_PER_MILLION:g} s per million items; <= {GOAL_HELD_BYTES_PER_FRAME} bytes held per "
                f"frame beyond frame data; samples/s >= {GOAL_SPEED_KEPT:.0%} of the smallest size's):\n\n")
        out += "| backend | start-up s (native's) | plan s/M | held B/frame | samples/s kept |\n|---|---|---|---|---|\n"
        for r in g:
            out += (f"| `{r['backend']}` | {_fmt(r['startup_s'], '.2f')} ({_fmt(r['native_startup_s'], '.2f')})"
                    f"{_mark(r['startup_ok'])} | {_fmt(r['plan_s_per_million'], '.3f')}{_mark(r['plan_ok'])} | "
                    f"{_fmt(r['held_bytes_per_frame'], '.1f')}{_mark(r['held_ok'])} | "
                    f"{_fmt(r['speed_kept'], '.2f')}{_mark(r['speed_ok'])} |\n")
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
