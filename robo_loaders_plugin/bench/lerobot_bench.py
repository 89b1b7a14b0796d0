"""``robo-loaders bench lerobot``: each backend in its own process, ratios to ``native`` (LeRobotDataset) and,
when selected, to ``streaming`` (LeRobot's StreamingLeRobotDataset, as ``--dataset.streaming=true`` builds it)."""

from __future__ import annotations

import os
import tempfile

import numpy as np
from tabulate import tabulate

from robo_loaders_plugin.bench.conversion import conversion_table, dir_bytes, time_conversions
from robo_loaders_plugin.bench.report import add_ratios, code_version, machine
from robo_loaders_plugin.bench.runner import (
    FRESH_CACHE,
    USER_CACHE,
    backend_of,
    check_labels,
    in_rounds,
    options_for,
    run_child,
)
from robo_loaders_plugin.bench.tables import error_cell
from robo_loaders_plugin.core.files import atomic_write_json
from robo_loaders_plugin.core.units import format_bytes

STREAMING = "streaming"  # not a backend: LeRobot's own StreamingLeRobotDataset, timed by its own child


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def lerobot_table(results) -> str:
    """The results as the table ``robo-loaders bench lerobot`` prints: one row per backend, a failed or refused run
    as its error cell; a ``vs streaming`` column only when LeRobot's streaming dataset was timed.

    Args:
        results: The result rows of :func:`bench_lerobot`, with their ratios (``report.add_ratios``).

    Returns:
        The table as text.
    """
    rows = []
    streaming = any(r["backend"] == STREAMING for r in results)
    for r in results:
        if r.get("error"):
            rows.append([r["backend"], error_cell(r, 90)])
            continue
        rr = r["ratios"]
        rows.append(
            [
                r["backend"],
                f"{r['samples_per_s']:.0f}",
                f"{r['decoded_frames_per_s']:.0f}",
                f"{r['first_batch_s']:.2f}",
                f"{r['build_s']:.1f}",
                format_bytes(r["peak_mem_bytes"]),
                format_bytes(r["data_mem_bytes"]),
                f"{format_bytes(r['cache_bytes'])}"
                + (
                    f" ({r['cache_bytes'] / r['raw_decoded_frames_bytes']:.0%})"
                    if r["raw_decoded_frames_bytes"]
                    else ""
                ),
                "/".join(f"{r['batch_latency_ms'][p]:.0f}" for p in ("p50", "p95", "p99")),
                f"{_ms(r['fetch_ms_per_sample'])} / {_ms(r['decode_ms_per_sample'])}",
                f"{r['episode_mix']:.2f}",
                f"{rr.get('samples_per_s_vs_native', float('nan')):.2f}x",
            ]
            + ([f"{rr.get('samples_per_s_vs_streaming', float('nan')):.2f}x"] if streaming else [])
        )
    return tabulate(
        rows,
        headers=[
            "backend",
            "samples/s",
            "frames/s",
            "first batch s",
            "build s",
            "peak mem",
            "data mem",
            "frames stored (vs raw)",
            "batch ms p50/p95/p99",
            "ms/sample fetch / decode",
            "episode mix",
            "vs native",
        ]
        + (["vs streaming"] if streaming else []),
    )


def raw_frame_bytes(root: str) -> int:
    """Every camera frame of the dataset decoded to uint8, the yardstick of what a backend stores (from
    meta/info.json: no framework import here).

    Args:
        root: The LeRobot v3 dataset root.

    Returns:
        Bytes: ``total_frames`` times the size of one frame of every video or image feature.
    """
    import json

    with open(os.path.join(root, "meta", "info.json")) as f:
        info = json.load(f)
    per_frame = sum(int(np.prod(ft["shape"])) for ft in info["features"].values() if ft["dtype"] in ("video", "image"))
    return int(info["total_frames"]) * per_frame


def check_backends(backends: list[str], kwargs: dict) -> None:
    """The labels' backend names and options, before anything runs (``runner.check_labels``; ``streaming`` is
    LeRobot's own dataset, not a backend).

    Args:
        backends: The ``--backends`` labels.
        kwargs: Options per label or backend (``--backend-kwargs``).

    Raises:
        RoboLoadersError: an unknown backend or a bad option.
    """
    check_labels("lerobot", backends, kwargs, special=(STREAMING,))


def bench_lerobot(
    root: str,
    repo_id: str,
    backends: list[str],
    batch_size: int,
    num_workers: int,
    batches: int,
    preset: str,
    kwargs: dict,
    json_out: str | None,
    timeout: float = 3600,
    echo=print,
    repeats: int = 1,
    fresh_cache: bool = True,
    profile_samples: int = 200,
) -> dict:
    """Time LeRobot backends, each in its own process (``runner.run_child``), print the table and return the
    results with ratios to ``native`` and, when selected, ``streaming``.

    When ``datapipe`` is benchmarked without ``shards`` or ``cache_dir``, the conversion it needs is timed first
    (with 1 and ``num_workers`` workers) and the last one's shards are served, so its run does not pay it.

    Args:
        root: The LeRobot v3 dataset root.
        repo_id: Its repo id.
        backends: Labels to time: backend names, ``streaming`` (LeRobot's StreamingLeRobotDataset), with an
            optional ``#tag`` (``runner.backend_of``).
        batch_size: Samples per batch.
        num_workers: DataLoader workers.
        batches: Batches timed per run.
        preset: ``delta_timestamps`` preset: ``none``, ``act`` or ``diffusion``.
        kwargs: Options per label or backend (``runner.options_for``); not modified.
        json_out: A file the payload is also written to (``None``: none).
        timeout: Seconds one run may take before it is killed (reported as failed).
        echo: Prints progress and the table.
        repeats: Runs per backend; > 1: in rounds, each backend reported by its median run (``runner.in_rounds``).
        fresh_cache: Every run starts from an empty cache directory (``runner.run_child``); false: the user's.
        profile_samples: Random single items of the fetch/decode split after the timed batches (each may load a
            whole episode: fewer on large datasets).

    Returns:
        The payload: ``framework``, ``settings``, ``machine``, ``results`` (one row per label), ``conversion``
        (``None`` when none was timed) and ``memory_note``.

    Raises:
        RoboLoadersError: an unknown backend or a bad option (:func:`check_backends`), before anything runs.
    """
    check_backends(backends, kwargs)
    common = dict(
        root=os.path.abspath(root),
        repo_id=repo_id,
        batch_size=batch_size,
        num_workers=num_workers,
        batches=batches,
        preset=preset,
        repeats=repeats,
        cache=FRESH_CACHE if fresh_cache else USER_CACHE,
        profile_samples=profile_samples,
    )
    conversion = None
    with tempfile.TemporaryDirectory(prefix="robo-loaders-bench-") as log_dir:
        kwargs = {label: dict(options) for label, options in kwargs.items()}  # the caller's stay as given
        dp = kwargs.setdefault("datapipe", {})
        if "datapipe" in backends and not dp.get("shards") and not dp.get("cache_dir"):
            conversion = time_conversions(
                ["lerobot", common["root"], "--repo-id", repo_id],
                os.path.join(log_dir, "shards"),
                sorted({1, max(1, num_workers)}),
                dir_bytes(common["root"]),
                raw_frame_bytes(common["root"]),
                echo,
            )
            echo(conversion_table(conversion))
            dp["shards"] = conversion[-1]["out"]
        args = {k: v for k, v in common.items() if k not in ("repeats", "cache")}

        def run_one(name):
            child = "lerobot_streaming_run" if backend_of(name) == STREAMING else "lerobot_run"
            return run_child(
                f"robo_loaders_plugin.bench.{child}",
                dict(args, backend=backend_of(name), kwargs=options_for(name, kwargs)),
                name,
                log_dir,
                timeout,
                fresh_cache,
            )

        results = in_rounds(backends, repeats, run_one, echo)
    add_ratios(
        results,
        [b for b in ("native", STREAMING) if b in backends],
        fields=("samples_per_s", "peak_mem_bytes", "data_mem_bytes", "first_batch_s"),
    )
    payload = {
        "framework": "lerobot",
        "settings": common,
        "machine": machine(),
        "code": code_version(),
        "results": results,
        "conversion": conversion,
        "memory_note": "peak_mem_bytes: peak PSS of the process tree plus its RAM-only cache files; "
        "data_mem_bytes: minus the process's PSS before the dataset was built; "
        "raw_decoded_frames_bytes: every camera frame of the dataset decoded to uint8",
    }
    echo(lerobot_table(results))
    if json_out:
        atomic_write_json(json_out, payload, indent=2)
    return payload
