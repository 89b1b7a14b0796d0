"""Tables and JSON for benchmark results (ratios always against baselines measured in the same run)."""

from __future__ import annotations

import os
import platform

import psutil
from tabulate import tabulate

from robo_loaders_plugin.bench.tables import error_cell
from robo_loaders_plugin.core.units import format_bytes


def machine() -> dict:
    """What the results were measured on: CPU, cores, RAM, Python, torch, and the first GPU (``None`` without CUDA)."""
    import torch

    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "ram": format_bytes(psutil.virtual_memory().total),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def code_version(where: str | None = None) -> str | None:
    """The commit of the package's checkout that ran the benchmark (short hash, ``-modified`` when tracked code
    differs from it), so that a committed result says which code it measured; ``None`` outside a git checkout.

    Results and docs do not count as modified code: a benchmark script writes several results in turn, and the
    second would otherwise say its code was modified by the first's JSON.

    Args:
        where: A directory of the checkout (default: this package's).

    Returns:
        The version string, or ``None``.
    """
    import subprocess

    here = where or os.path.dirname(os.path.abspath(__file__))

    def git(*args: str, at: str = here) -> str:
        return subprocess.run(["git", "-C", at, *args], capture_output=True, text=True, timeout=30, check=True).stdout

    try:
        top = git("rev-parse", "--show-toplevel").strip()
        commit = git("rev-parse", "--short=7", "HEAD").strip()
        code = (".", ":(exclude)benchmarks/results", ":(exclude)*.md")
        modified = git("status", "--porcelain", "--untracked-files=no", "--", *code, at=top).strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-modified" if modified else "")


def add_ratios(results: list[dict], baselines: list[str], fields=("samples_per_s", "peak_mem_bytes")) -> None:
    """Add each result's ratios to the baselines measured in the same run, in place (``r["ratios"]``).

    Args:
        results: One dict per backend (``backend``, the fields, ``error`` when it failed).
        baselines: The baseline backends' names; those missing or failed give no ratios.
        fields: The fields to compare; a baseline value of 0 or missing gives no ratio.
    """
    by_name = {r["backend"]: r for r in results}
    for r in results:
        r["ratios"] = {}
        for b in baselines:
            base = by_name.get(b)
            if not base or base.get("error") or r.get("error"):
                continue
            for f in fields:
                if base.get(f):
                    r["ratios"][f"{f}_vs_{b}"] = round(r[f] / base[f], 3)


def table(results: list[dict], baselines: list[str]) -> str:
    """The results as a text table, with speed and memory ratios per baseline (failed backends on one line).

    Args:
        results: The results, with their ratios (:func:`add_ratios`).
        baselines: The baselines whose ratio columns to show.

    Returns:
        The table.
    """
    rows = []
    for r in results:
        if r.get("error"):
            rows.append([r["backend"], error_cell(r)])
            continue
        row = [
            r["backend"],
            f"{r['samples_per_s']:.0f}",
            f"{r['first_batch_s']:.2f}",
            f"{r['build_s']:.1f}",
            format_bytes(r["peak_mem_bytes"]),
            format_bytes(r["data_mem_bytes"]),
            "/".join(f"{r['batch_latency_ms'][p]:.0f}" for p in ("p50", "p95", "p99")),
            "-" if r.get("episode_mix") is None else f"{r['episode_mix']:.2f}",
        ]
        for b in baselines:
            sp = r["ratios"].get(f"samples_per_s_vs_{b}")
            mem = r["ratios"].get(f"peak_mem_bytes_vs_{b}")
            dmem = r["ratios"].get(f"data_mem_bytes_vs_{b}")
            # a ratio is missing where the baseline's value is 0 (a data memory below the sampler's resolution)
            row.append(
                "-"
                if sp is None
                else " / ".join(
                    [
                        "-" if v is None else fmt.format(v)
                        for v, fmt in ((sp, "{:.2f}x"), (mem, "{:.1%}"), (dmem, "{:.1%}"))
                    ]
                )
            )
        rows.append(row)
    headers = [
        "backend",
        "samples/s",
        "first batch s",
        "build s",
        "peak mem",
        "data mem",
        "batch ms p50/p95/p99",
        "episode mix",
    ] + [f"vs {b}: speed / mem / data mem" for b in baselines]
    return tabulate(rows, headers=headers)
