"""Shared benchmark plumbing: one subprocess per backend (clean memory accounting), batch timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from robo_loaders_plugin.bench.memory import TreeMemorySampler


def backend_of(label: str) -> str:
    """``gpu_resampler#third`` -> ``gpu_resampler``: a ``#tag`` runs a backend again under another label, with the
    options given for that label (``--backend-kwargs 'gpu_resampler#third={...}'``).

    Args:
        label: A benchmark label (``native:low_dim`` keeps its ``:mode``).

    Returns:
        The label without its ``#tag``.
    """
    return label.split("#", 1)[0]


def options_for(label: str, kwargs: dict) -> dict:
    """The options given for this label, else for its backend (so a ``#tag`` may have its own, and a plain backend
    name covers every label of it).

    Args:
        label: A benchmark label.
        kwargs: Options per label or backend name (``--backend-kwargs``).

    Returns:
        A copy of those options (empty when none were given).
    """
    return dict(kwargs[label] if label in kwargs else kwargs.get(backend_of(label).split(":")[0], {}))


def check_labels(framework: str, labels: list[str], kwargs: dict, special: tuple[str, ...] = ()) -> None:
    """Every label's backend and options, checked as its child will choose them, before anything runs.

    Why: a misspelled name (``compresed_cache``) or a bad option was found by its own child process only, after the
    backends before it had run, and came back as that child's traceback cut to its last 2,000 characters and a
    table cell naming ``train.data_backend``, a setting the benchmark's user never set.

    Args:
        framework: ``robomimic`` or ``lerobot``.
        labels: The ``--backends`` labels (``name[:mode][#tag]``; the robomimic ``:mode`` is checked by its bench).
        kwargs: Options per label or backend (``--backend-kwargs``).
        special: Labels that are no backend (LeRobot's ``streaming``): named as known, their options not checked.

    Raises:
        UnknownBackendError: naming ``--backends``, the closest name and every known one.
        BackendOptionError: an option is unknown or has a bad value (naming ``--backend-kwargs`` and the label).
        RoboLoadersError: no label; a backend that does not serve ``framework``; ``--backend-kwargs`` for a label
            or backend ``--backends`` does not list.
    """
    from robo_loaders_plugin.core.errors import RoboLoadersError, UnknownBackendError
    from robo_loaders_plugin.core.registry import choose_backend, list_backends

    if not labels:
        raise RoboLoadersError("--backends: no backend given; name at least one (robo-loaders list shows them)")
    names = [backend_of(label).split(":")[0] for label in labels]
    for label, name in zip(labels, names):
        if name in special:
            continue
        if name not in list_backends():
            raise UnknownBackendError(name, list_backends() + list(special), "--backends")
        choose_backend(
            framework,
            name,
            options_for(label, kwargs),
            name_where="--backends",
            options_where=f"--backend-kwargs {label}",
        )
    for key in kwargs:
        if key not in labels and key not in names:
            raise RoboLoadersError(
                f"--backend-kwargs {key}=...: --backends lists no {key!r} (it lists "
                f"{', '.join(labels)}); give the options to a label or backend it lists"
            )


def median_run(runs: list[dict]) -> dict:
    """The run with the median samples/s (the lower middle one of an even count), with every run's samples/s and
    first batch beside it (the median run's first batch alone can be any of them); a failed run is returned as the
    result, so that a failure is never hidden by the others.

    Args:
        runs: One label's result rows, at least one.

    Returns:
        The first failed run; else the only run; else a copy of the median run with ``samples_per_s_runs``,
        when the runs have one ``first_batch_s_runs``, and ``load_1min`` spanning every run's.
    """
    failed = [r for r in runs if r.get("error")]
    if failed or len(runs) == 1:
        return failed[0] if failed else runs[0]
    ordered = sorted(runs, key=lambda r: r["samples_per_s"])
    median = dict(ordered[(len(ordered) - 1) // 2], samples_per_s_runs=[r["samples_per_s"] for r in runs])
    if all("first_batch_s" in r for r in runs):
        median["first_batch_s_runs"] = [r["first_batch_s"] for r in runs]
    loads = [x for r in runs for x in r.get("load_1min") or ()]
    if loads:  # the machine's load over all the label's runs, not only the median one's
        median["load_1min"] = [min(loads), max(loads)]
    return median


def in_rounds(labels: list[str], repeats: int, run_one, echo=print) -> list[dict]:
    """``run_one(label)`` for every label, ``repeats`` times in rounds (all labels, then all again), each label
    reported by its median run: on a shared 2-core machine one run of a fast loader varies by +-15%, and rounds
    spread a slow spell of the machine over every loader instead of one.

    Args:
        labels: The benchmark labels, in the order run and returned.
        repeats: Rounds.
        run_one: ``label -> result row`` (a row with ``error`` is a failed run).
        echo: Prints progress and failures.

    Returns:
        One row per label (:func:`median_run` of its runs).
    """
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    for round_ in range(repeats):
        for label in labels:
            echo(f"[bench] {label} ..." + (f" (run {round_ + 1} of {repeats})" if repeats > 1 else ""))
            r = run_one(label)
            if r.get("error"):
                echo(f"[bench] {label} FAILED\n{r['error']}")
            runs[label].append(r)
    return [median_run(runs[label]) for label in labels]


FRESH_CACHE = "fresh per run"
USER_CACHE = "the user's cache directory (reused)"


def run_child(module: str, args: dict, label: str, log_dir: str, timeout: float, fresh_cache: bool = True) -> dict:
    """Run ``python -m module '<json args>' OUT.json`` while sampling its process tree's memory: one process per
    run, so one backend's memory is never counted in another's.

    Args:
        module: The child module (e.g. ``robo_loaders_plugin.bench.lerobot_run``).
        args: Its arguments, passed as JSON.
        label: The benchmark label, recorded as the row's ``backend`` and naming the output and log files.
        log_dir: The directory of the child's output, log and (fresh) cache directory.
        timeout: Seconds before the child is killed (its row then says ``exit timeout``).
        fresh_cache: The run gets an empty cache directory of its own (``ROBO_LOADERS_CACHE``), removed after it,
            so every backend pays its first-run cost (a conversion on first use, a persisted cache) the same way,
            whatever an earlier run or the user's cache holds; false: the user's cache directory, reused as in
            training.

    Returns:
        The child's result row plus the memory peaks (``peak_mem_bytes``: PSS with RAM cache files,
        ``peak_rss_sum_bytes``, ``shm_bytes``, ``peak_anon_bytes``, ``peak_disk_bytes``), ``cache_dir_bytes``,
        ``wall_s``, ``sampler_cpu_s`` (the memory sampling's own CPU seconds, from the cores the child runs on),
        ``data_mem_bytes`` and ``load_1min`` (the 1-minute load average before and after); or
        ``{"backend", "error"}`` with the exit status and the log's last 2,000 characters (from the start of a
        line) when the child failed or wrote no result.
    """
    import shutil
    import tempfile

    safe = label.replace(":", "_").replace("/", "_")
    out_path = os.path.join(log_dir, f"{safe}.json")
    log_path = os.path.join(log_dir, f"{safe}.log")
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix=f"cache-{safe}-", dir=log_dir) if fresh_cache else None
    if cache:
        env["ROBO_LOADERS_CACHE"] = cache
    load_before = os.getloadavg()[0]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(args), out_path], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        t = time.time()
        with TreeMemorySampler(proc.pid, disk_dir=cache or log_dir) as mem:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "timeout"
    cache_dir_bytes = 0
    if cache:
        from robo_loaders_plugin.bench.conversion import dir_bytes

        cache_dir_bytes = dir_bytes(cache)
        shutil.rmtree(cache, ignore_errors=True)
    if rc != 0 or not os.path.exists(out_path):
        with open(log_path) as f:
            log = f.read()
        tail = log[-2000:]
        if len(log) > 2000 and "\n" in tail:  # from a line's start: not cut mid-word
            tail = tail.split("\n", 1)[1]
        return {"backend": label, "error": f"exit {rc}:\n{tail}"}
    with open(out_path) as f:
        res = json.load(f)
    res.update(
        backend=label,
        # the child's own PSS before its data (baseline_pss_bytes) is a moment of the tree's life the 0.5-s samples
        # can miss, and PSS moves as other processes map the same libraries: the peak is at least that moment
        peak_mem_bytes=max(mem.peak_pss, int(res.get("baseline_pss_bytes") or 0)),
        peak_rss_sum_bytes=mem.peak_rss,
        shm_bytes=mem.peak_shm,
        peak_anon_bytes=mem.peak_anon,
        peak_disk_bytes=mem.peak_disk,
        cache_dir_bytes=cache_dir_bytes,
        wall_s=time.time() - t,
        sampler_cpu_s=round(mem.cpu_s, 3),  # the memory sampling's own CPU, from the same cores as the child's
        # the machine's 1-minute load before and after: a 2-core machine shared with other jobs serves less, and a
        # result says how busy it was (issue 45: every table records its load)
        load_1min=[round(load_before, 2), round(os.getloadavg()[0], 2)],
    )
    # what loading data costs on top of the interpreter, torch and the framework (~0.9 GB with CUDA-build torch)
    res["data_mem_bytes"] = max(0, res["peak_mem_bytes"] - res["baseline_pss_bytes"])
    return res


def baseline_pss() -> int:
    """This process's PSS in bytes, taken by a child before it builds the dataset: what the interpreter, torch and
    the framework cost, subtracted from the peak to give ``data_mem_bytes``."""
    import psutil

    return psutil.Process().memory_full_info().pss


def next_batch(it, loader):
    """The next batch of iterator ``it`` over ``loader``, iterating ``loader`` again when a pass ends (as training
    loops do).

    Args:
        it: The current iterator.
        loader: What it iterates.

    Returns:
        ``(iterator, batch)``: the iterator to go on with (a new one after a pass ended) and the batch.
    """
    try:
        return it, next(it)
    except StopIteration:
        it = iter(loader)
        return it, next(it)


def time_loader(
    loader,
    batches: int,
    batch_size_of,
    warmup: int = 0,
    rounds: int = 1,
    min_round_s: float = 0.0,
    warmup_s: float = 0.0,
) -> dict:
    """First-batch latency (iterator creation included), then ``rounds`` rounds of at least ``batches`` timed
    batches each (re-iterating when an epoch ends, as training loops do), a round going on until it has lasted
    ``min_round_s``.

    Why rounds of a minimum duration: a fast loader serves 30 batches in 0.1 s, a window in which one scheduling
    hiccup of its threads moves the rate by half; the rate reported is the median of the rounds' rates, each
    timed over the same stretch of wall time whatever the loader's speed.

    Args:
        loader: Any iterable of batches (a DataLoader).
        batches: Batches timed after the first (and the warm-up), at least, per round.
        batch_size_of: ``batch -> number of samples in it``.
        warmup: Batches served untimed between the first and the timed ones (what a pass does once at its start,
            e.g. planning the next pass in a background thread, kept out of a steady rate).
        rounds: Timed rounds (the median rate is reported).
        min_round_s: Seconds a round lasts at least (``0``: exactly ``batches`` batches).
        warmup_s: Seconds, from the first batch served, that the warm-up goes on at least (after its ``warmup``
            batches). Why by time: what a loader does once per process, spread over its first batches (a video
            decoder opened per file at its first read: ~800 files, ~15 s, in a 400-component mixture), would
            otherwise be timed as its steady rate; it is reported as ``warmup_samples_per_s`` instead.

    Returns:
        ``first_batch_s`` (seconds), ``samples_per_s`` (the median of the rounds'), ``round_samples_per_s`` (each
        round's), ``timed_batches`` (over all rounds), ``batch_latency_ms`` (``p50``, ``p95``, ``p99`` in
        milliseconds, over every timed batch), and with a ``warmup_s``: ``warmup_s`` (the warm-up's seconds) and
        ``warmup_samples_per_s`` (its rate).
    """
    t = time.perf_counter()
    it = iter(loader)
    batch = next(it)
    first = time.perf_counter() - t
    t = time.perf_counter()
    warm_samples, warm_batches = 0, 0
    while warm_batches < warmup or time.perf_counter() - t < warmup_s:
        it, batch = next_batch(it, loader)
        warm_batches += 1
        if warmup_s:
            warm_samples += batch_size_of(batch)
    warm_took = time.perf_counter() - t
    lat: list[float] = []
    rates = []
    for _ in range(max(1, int(rounds))):
        took, samples, count = 0.0, 0, 0
        while count < batches or took < min_round_s:
            t = time.perf_counter()
            it, batch = next_batch(it, loader)
            lat.append(time.perf_counter() - t)
            took += lat[-1]
            samples += batch_size_of(batch)
            count += 1
        rates.append(samples / took if took else 0.0)
    lat_ms = np.array(lat) * 1e3
    warm = {"warmup_s": warm_took, "warmup_samples_per_s": warm_samples / warm_took} if warmup_s else {}
    return {
        **warm,
        "first_batch_s": first,
        "samples_per_s": float(np.median(rates)),
        "round_samples_per_s": [round(r, 2) for r in rates],
        "timed_batches": len(lat),
        "batch_latency_ms": {p: float(np.percentile(lat_ms, int(p[1:]))) for p in ("p50", "p95", "p99")},
    }
