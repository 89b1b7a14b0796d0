"""Child process of ``python -m benchmarks.harness growth run``: one backend on one workload.

It builds the dataset the way the framework's training does (robomimic's ``dataset_factory`` with the config
``robo-loaders bench robomimic`` uses; LeRobot's ``LeRobotDataset`` then the backend, as ``lerobot-train``), times
the first batch and the steady batches (``bench.runner.time_loader``), then, untimed: the CPU time of planning one
pass (batch-kind backends) and the bytes the dataset object holds that are not frame data (:func:`held_bytes`).
Run alone: ``python -m benchmarks.harness.growth_child '<json args>' OUT.json``.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import numpy as np

# what a dataset holds that is frame data (or another library's), left out of held_bytes: attribute names
DATA_ATTRIBUTES = {
    "_native",  # LeRobotSamples: LeRobot's own dataset (measured as native's)
    "hdf5_cache",  # robomimic SequenceDataset: the loaded arrays (data)
    "hdf5_file",
    "_hdf5_file",
    "store",  # CompressedFrames: the compressed episode file (mapped)
    "cache",  # EpisodeFrames: the loaded episodes (data, bounded)
    "_small",  # EpisodeFrames: every episode's small (low-dim) fields, kept between loads (data)
    "tensors",  # TensorFrames: every frame (data)
    "_pool",  # batch buffers recycled (bounded, data)
}


def held_bytes(root, skip=DATA_ATTRIBUTES) -> int:
    """Bytes held by the objects reachable from ``root`` through attributes, dicts, lists and tuples: every numpy
    array's buffer (counted once, by its base), every other object's ``sys.getsizeof``; attributes named in
    ``skip`` (frame data, another library's dataset) are not followed, nor are modules and classes; functions
    are followed into their closures (a closure reading episodes holds its reader's index).

    Why a walk and not the process's memory: the index arrays and tables are a few megabytes among hundreds
    (torch, the interpreter, data), below the noise of a process-memory measurement; the walk counts exactly what
    the dataset keeps per frame and per episode."""
    import types

    from robo_loaders_plugin.core.lru import LoadOnceLRU

    seen: set[int] = set()
    arrays: set[int] = set()
    total = 0
    stack = [root]
    skip_types = (types.ModuleType, type, types.BuiltinFunctionType)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip_types):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):  # a closure holds what it reads from (a shard index, a source)
            stack.extend(c.cell_contents for c in (obj.__closure__ or ()) if c.cell_contents is not None)
            continue
        if isinstance(obj, types.MethodType):
            stack.append(obj.__self__)
            continue
        if isinstance(obj, LoadOnceLRU):  # loaded episodes (data), also reached through a bound method (load_ahead)
            continue
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in arrays and base.base is None:  # not a view of someone else's buffer (an mmap)
                arrays.add(id(base))
                total += base.nbytes
            continue
        type_name = type(obj).__module__
        if type_name.startswith(("torch", "h5py", "pyarrow", "datasets", "threading", "concurrent", "mmap")):
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                stack.extend(v for k, v in attrs.items() if k not in skip)
            for slot in getattr(type(obj), "__slots__", ()):
                if slot not in skip and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def held_by_part(root, depth: int = 2, skip=DATA_ATTRIBUTES) -> dict:
    """:func:`held_bytes` of each attribute of ``root`` (and, to ``depth``, of theirs): where the bytes are."""
    out = {}
    attrs = getattr(root, "__dict__", {})
    for k, v in attrs.items():
        if k in skip:
            continue
        out[k] = held_bytes(v, skip)
        if depth > 1 and hasattr(v, "__dict__"):
            for k2, v2 in held_by_part(v, depth - 1, skip).items():
                out[f"{k}.{k2}"] = v2
    return out


def _robomimic(a: dict):
    import robomimic.utils.obs_utils as ObsUtils
    import torch

    from robo_loaders_plugin.bench.robomimic_run import make_config
    from robo_loaders_plugin.bench.runner import baseline_pss
    from robo_loaders_plugin.robomimic import dataset_factory
    from robo_loaders_plugin.robomimic.compat import register_observation_encoders
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    register_observation_encoders()
    torch.manual_seed(0)
    np.random.seed(0)
    config, obs_keys = make_config(a)
    with config.values_unlocked():
        config.train.hdf5_load_next_obs = bool(a.get("load_next_obs", True))
    ObsUtils.initialize_obs_utils_with_config(config)
    baseline = baseline_pss()
    t = time.perf_counter()
    ds = dataset_factory(config, obs_keys)
    build_s = time.perf_counter() - t
    loader = epoch_loader(
        torch.utils.data.DataLoader(
            ds, sampler=None, batch_size=a["batch_size"], shuffle=True, num_workers=a["num_workers"], drop_last=True
        )
    )
    return ds, loader, (lambda b: len(b["actions"])), build_s, baseline


def _lerobot(a: dict):
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.bench.lerobot_run import train_loader
    from robo_loaders_plugin.bench.runner import baseline_pss
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose, cycle
    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    torch.manual_seed(0)
    meta = LeRobotDatasetMetadata(a["repo_id"], root=a["root"])
    delta = delta_timestamps(a["preset"], meta)
    del meta
    baseline = baseline_pss()
    t = time.perf_counter()
    ds = LeRobotDataset(a["repo_id"], root=a["root"], delta_timestamps=delta, return_uint8=True)
    native_s = time.perf_counter() - t
    if a["backend"] != "native":
        ds = build_dataset(ds, choose(a["backend"], **(a.get("kwargs") or {})))
    build_s = time.perf_counter() - t
    loader = train_loader(ds, a["batch_size"], a["num_workers"])  # lerobot-train's DataLoader
    a["native_build_s"] = native_s
    return ds, cycle(loader), (lambda b: len(b["index"])), build_s, baseline


def probe(ds, batch_size: int) -> dict:
    """Untimed measures: CPU seconds to plan one pass (batch-kind datasets: its pass source; the least of three
    passes planned, each listed; the last two held as training holds them), and :func:`held_bytes` of the dataset
    (with that pass source)."""
    from robo_loaders_plugin.core.iteration import BatchDataset, SamplingPlan

    if not isinstance(ds, BatchDataset):
        return {"plan_cpu_s": None, "held_bytes": held_bytes(ds)}
    source = ds.batch_source(SamplingPlan(batch_size=batch_size, drop_last=True))
    try:
        # CPU time of this thread only: process_time also counted the threads a run leaves behind (the timed loop's
        # loading and prefetching threads winding down), 0.32 s "per million" against 0.18 s planning alone; and
        # the least of three passes planned: on a 2-vCPU machine whose other vCPU is busy (the run's workers
        # exiting), one plan's CPU time swung 0.18-0.27 s (time stolen from the vCPU is counted as this thread's)
        times = []
        for epoch in (7, 8, 9):
            start = time.thread_time()
            source.plan_node.plan_of(epoch)
            times.append(time.thread_time() - start)
        return {
            "plan_cpu_s": min(times),
            "plan_cpu_each_s": times,
            "plan_items": int(source.plan_node.counts.sum()),
            "held_bytes": held_bytes([ds, source]),
        }
    finally:
        source.shutdown()


def _imports(framework: str) -> None:
    import torch  # noqa: F401

    if framework == "robomimic":
        import robomimic.algo
        import robomimic.config
        import robomimic.utils.obs_utils  # noqa: F401

        import robo_loaders_plugin.robomimic.buffered
        import robo_loaders_plugin.robomimic.integration
    else:
        import robo_loaders_plugin.lerobot.dataset
        import robo_loaders_plugin.lerobot.integration
    import robo_loaders_plugin.pipeline.batches  # noqa: F401


def _stats_text(prof, top: int) -> dict:
    """``by_tottime`` and ``by_cumulative``: a profile's ``top`` functions by own and by cumulative time, as text."""
    import io
    import pstats

    out = {}
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        out[f"by_{key}"] = buf.getvalue()
    return out


def profiled(a: dict, top: int = 30) -> dict:
    """cProfile of the factory call, the first batch and planning a pass (num_workers 0, so the first batch is
    assembled in this process): the functions with the most own time and the most cumulative time."""
    import cProfile

    _imports(a["framework"])  # not profiled: what any process using the framework imports anyway
    if a.get("profile_batches"):
        return profiled_batches(a, top)
    prof = cProfile.Profile()
    prof.enable()
    t = time.perf_counter()
    ds, loader, _count, build_s, _ = (_robomimic if a["framework"] == "robomimic" else _lerobot)(a)
    first = next(iter(loader))
    total = time.perf_counter() - t
    plan = probe(ds, a["batch_size"])["plan_cpu_s"]
    prof.disable()
    out = {"build_s": build_s, "to_first_batch_s": total, "plan_cpu_s": plan}
    out.update(_stats_text(prof, top))
    del first
    return out


def profiled_batches(a: dict, top: int = 30, warmup: int = 50) -> dict:
    """cProfile of ``a["profile_batches"]`` batches in steady state (after ``warmup``; num_workers 0, so the
    batches are assembled in this process): where a backend's time per batch goes, to compare two sizes."""
    import cProfile

    _ds, loader, count, build_s, _ = (_robomimic if a["framework"] == "robomimic" else _lerobot)(a)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    prof = cProfile.Profile()
    served, t = 0, time.perf_counter()
    prof.enable()
    for _ in range(a["profile_batches"]):
        served += count(next(it))
    prof.disable()
    out = {"build_s": build_s, "batches": a["profile_batches"], "samples_per_s": served / (time.perf_counter() - t)}
    out.update(_stats_text(prof, top))
    return out


def pass_samples(framework: str, num_samples: int, batch_size: int) -> int:
    """Samples in one pass as each framework's training DataLoader serves them: robomimic's drops the last partial
    batch (``drop_last=True``), lerobot-train's does not."""
    return num_samples // batch_size * batch_size if framework == "robomimic" else num_samples


def time_pass(loader, batch_size_of, samples: int) -> dict:
    """One whole pass, timed: the first batch (iterator creation included), then every batch until ``samples``
    have been served (an endless loader such as lerobot-train's ``cycle`` is stopped there; an epoch loader that
    ends is iterated again, which a pass of exactly ``samples`` never needs).

    Returns:
        ``first_batch_s``, ``pass_s`` (iterator creation to the pass's last batch), ``pass_samples`` (served:
        ``samples`` when the pass ended on a batch boundary as it should), ``samples_per_s`` (after the first batch,
        so comparable with the sampled runs) and ``batch_latency_ms`` percentiles.
    """
    from robo_loaders_plugin.bench.runner import next_batch

    t0 = time.perf_counter()
    it = iter(loader)
    first_samples = batch_size_of(next(it))
    first = time.perf_counter() - t0
    served, lat = first_samples, []
    while served < samples:
        t = time.perf_counter()
        it, batch = next_batch(it, loader)
        lat.append(time.perf_counter() - t)
        served += batch_size_of(batch)
    total = time.perf_counter() - t0
    lat_ms = np.array(lat or [0.0]) * 1e3
    rest = float(np.sum(lat))
    return {
        "first_batch_s": first,
        "pass_s": total,
        "pass_samples": served,
        "pass_batches": len(lat) + 1,
        "samples_per_s": (served - first_samples) / rest if rest else None,
        "batch_latency_ms": {p: float(np.percentile(lat_ms, int(p[1:]))) for p in ("p50", "p95", "p99")},
    }


def run(a: dict) -> dict:
    from robo_loaders_plugin.bench.runner import time_loader
    from robo_loaders_plugin.core.iteration import summary_of

    if a.get("profile"):
        return profiled(dict(a, num_workers=0))
    ds, loader, count, build_s, baseline = (_robomimic if a["framework"] == "robomimic" else _lerobot)(a)
    if a.get("full_pass"):
        timing = time_pass(loader, count, pass_samples(a["framework"], len(ds), a["batch_size"]))
    else:
        timing = time_loader(loader, a["batches"], count, warmup=a.get("warmup", 0))
    del loader
    gc.collect()
    out = dict(
        timing,
        build_s=build_s,
        num_samples=len(ds),
        baseline_pss_bytes=baseline,
        summary=summary_of(ds),
        **probe(ds, a["batch_size"]),
    )
    if "native_build_s" in a:
        out["native_build_s"] = a["native_build_s"]
    return out


def main():
    out = run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
