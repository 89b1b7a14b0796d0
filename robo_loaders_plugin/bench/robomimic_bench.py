"""``robo-loaders bench robomimic``: each backend in its own process, memory sampled from outside."""

from __future__ import annotations

import os
import tempfile

from robo_loaders_plugin.bench.conversion import conversion_table, time_conversions
from robo_loaders_plugin.bench.report import add_ratios, code_version, machine, table
from robo_loaders_plugin.bench.runner import (
    FRESH_CACHE,
    USER_CACHE,
    backend_of,
    check_labels,
    in_rounds,
    options_for,
    run_child,
)
from robo_loaders_plugin.core.files import atomic_write_json

BASELINES = ["native:low_dim", "native:all"]
CACHE_MODES = {"low_dim": "low_dim", "all": "all", "none": None}


def parse_backend(label: str):
    """A benchmark label as (backend, robomimic ``hdf5_cache_mode``).

    ``native:all`` -> (native, all); ``compressed_cache`` -> (compressed_cache, low_dim); a ``#tag`` is left out
    (``gpu_resampler#third`` -> (gpu_resampler, low_dim)); ``:none`` gives ``None``.

    Args:
        label: The label.

    Returns:
        ``(backend name, cache mode)``.

    Raises:
        ValueError: a cache mode other than ``low_dim``, ``all`` or ``none``.
    """
    name, _, mode = backend_of(label).partition(":")
    mode = mode or "low_dim"
    if mode not in CACHE_MODES:
        raise ValueError(f"--backends: {label!r}: the cache mode after ':' must be one of {', '.join(CACHE_MODES)}")
    return name, CACHE_MODES[mode]


def check_backends(backends: list[str], kwargs: dict) -> None:
    """The labels' cache modes, backend names and options, before anything runs (``runner.check_labels``).

    Args:
        backends: The ``--backends`` labels.
        kwargs: Options per label or backend (``--backend-kwargs``).

    Raises:
        ValueError: a bad cache mode after ``:``.
        RoboLoadersError: an unknown backend or a bad option (``runner.check_labels``).
    """
    for b in backends:
        parse_backend(b)
    check_labels("robomimic", backends, kwargs)


def array_bytes(path: str) -> int:
    """Bytes of every array under ``data/`` of a robomimic file: what a conversion reads and stores.

    Args:
        path: The robomimic HDF5 file.
    """
    import h5py

    total = 0

    def visit(name, obj):
        nonlocal total
        if isinstance(obj, h5py.Dataset):
            total += obj.nbytes

    with h5py.File(path, "r") as f:
        f["data"].visititems(visit)
    return total


def run_one(label: str, common: dict, kwargs: dict, log_dir: str, timeout: float, fresh_cache: bool = True) -> dict:
    """One backend's benchmark in its own child process (``bench.robomimic_run``).

    Args:
        label: The backend's label (``parse_backend``).
        common: The settings every run shares (dataset, sizes, workers, batches, obs keys).
        kwargs: Backend options by label or name (``runner.options_for`` picks this label's).
        log_dir: Where the child's log goes.
        timeout: Seconds the child may take.
        fresh_cache: Whether the child starts from an empty cache directory.

    Returns:
        The child's result row (``error`` set when it failed).
    """
    name, mode = parse_backend(label)
    opts = options_for(label, kwargs)
    args = dict(common, label=label, backend=name, cache_mode=mode, kwargs=opts)
    return run_child("robo_loaders_plugin.bench.robomimic_run", args, label, log_dir, timeout, fresh_cache)


def bench_robomimic(
    dataset: str,
    backends: list[str],
    seq_length: int,
    frame_stack: int,
    batch_size: int,
    num_workers: int,
    batches: int,
    kwargs: dict,
    json_out: str | None,
    obs_keys=None,
    timeout: float = 3600,
    echo=print,
    repeats: int = 1,
    fresh_cache: bool = True,
) -> dict:
    """``robo-loaders bench robomimic``: every backend in its own process, with ratios to the native baselines
    measured in the same run.

    When ``datapipe`` is benchmarked without given shards or cache directory, the conversion is timed on its own
    first (the user's command, a fresh process, at 1 and N workers) and datapipe then reads the N-worker shards, so
    its build time is opening them, like a second training run.

    Args:
        dataset: The robomimic HDF5 file.
        backends: Labels (``native:low_dim``, ``compressed_cache``, ``name#tag``, ...).
        seq_length: robomimic's ``train.seq_length``.
        frame_stack: robomimic's ``train.frame_stack``.
        batch_size: Samples per batch.
        num_workers: robomimic's ``train.num_data_workers``.
        batches: Batches timed per backend.
        kwargs: Backend options by label or name; ``kwargs["datapipe"]`` is set (shards path) when the benchmark
            converts for datapipe.
        json_out: Where to write the result JSON (``None``: not written).
        obs_keys: Only these observation keys (default: every key of the file).
        timeout: Seconds one child (or conversion) may take.
        echo: Prints progress and the table.
        repeats: > 1: every backend that many times, each reported by its median run (``runner.in_rounds``).
        fresh_cache: Every run starts from an empty cache directory (``runner.run_child``), so no backend reuses
            what an earlier run or the user's cache holds (a conversion on first use is then paid by every backend
            that has one, as in a first training run); false: the user's cache directory.

    Returns:
        The result payload (settings, machine, results with ratios, conversion rows, notes).

    Raises:
        ValueError: a bad cache mode in a label.
        RoboLoadersError: an unknown backend or a bad option (:func:`check_backends`), before anything runs.
    """
    check_backends(backends, kwargs)
    common = dict(
        dataset=os.path.abspath(dataset),
        seq_length=seq_length,
        frame_stack=frame_stack,
        batch_size=batch_size,
        num_workers=num_workers,
        batches=batches,
        obs_keys=obs_keys,
    )
    conversion = None
    with tempfile.TemporaryDirectory(prefix="robo-loaders-bench-") as log_dir:
        kwargs = {label: dict(options) for label, options in kwargs.items()}  # the caller's stay as given
        dp = kwargs.setdefault("datapipe", {})
        if "datapipe" in backends and not dp.get("shards") and not dp.get("cache_dir"):
            # conversion timed on its own (user's command, fresh process) at 1 and N workers; datapipe then reads
            # the N-worker shards, so its build time is opening them, like a second training run
            n = int(dp.get("convert_workers") or max(1, num_workers))
            conversion = time_conversions(
                ["robomimic", common["dataset"]],
                os.path.join(log_dir, "shards"),
                sorted({1, n}),
                os.path.getsize(dataset),
                array_bytes(dataset),
                echo,
                timeout,
            )
            echo(conversion_table(conversion))
            dp["shards"] = conversion[-1]["out"]
        results = in_rounds(
            backends, repeats, lambda label: run_one(label, common, kwargs, log_dir, timeout, fresh_cache), echo
        )
    baselines = [b for b in BASELINES if b in backends]
    add_ratios(results, baselines, fields=("samples_per_s", "peak_mem_bytes", "data_mem_bytes"))
    payload = {
        "framework": "robomimic",
        "settings": dict(common, repeats=repeats, cache=FRESH_CACHE if fresh_cache else USER_CACHE),
        "machine": machine(),
        "code": code_version(),
        "results": results,
        "conversion": conversion,
        "episode_mix_note": "mean over one shuffled pass of (distinct demos in a batch / batch size), from the "
        "sampler robomimic's DataLoader uses (native, compressed_cache) or datapipe's plan",
        "memory_note": "peak_mem_bytes = peak over the run of PSS summed over the process tree, plus the "
        "size of the tree's RAM-only cache files in /dev/shm (their mapped pages not counted "
        "twice); "
        "data_mem_bytes = peak_mem_bytes minus the benchmark process's PSS just before the "
        "dataset was built (interpreter, torch, robomimic)",
    }
    echo(table(results, baselines))
    if json_out:
        atomic_write_json(json_out, payload, indent=2)
    return payload
