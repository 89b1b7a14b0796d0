"""Where a mixed batch's time goes (issue 44: "where a goal is missed, the benchmark says what bounds it"): the
pretraining-shaped components of ``benchmarks/mixtures_pretraining.py``, one batch at a time on one thread, each
non-native backend's mixture against the same backend on one dataset of the same frames.

``python -m benchmarks.mixture_batch_cost run --components 100 --json benchmarks/results/mixture_batch_cost.json``
generates the first ``--components`` datasets of the pretraining shape (or reads them from ``--data``, a directory
``mixtures_pretraining run --data DIR --generate-only`` filled) and one dataset of as many episodes of the same
lengths, then, in this process, for each backend: builds the mixture (``lerobot.mixture.build_mixture``, the spec the
pretraining benchmark gives: vectors padded to 14, missing cameras zeros) and the one dataset's backend dataset,
and times ``collate`` (what a batch-building thread runs) on batches of the mixture's own weighted order, built both
ways the mixture can, each on batches of its own (the pass's first ``--batches``, then the next):

- **per component**: each component's part built by its own dataset (``MixtureHooks.component_batch``), of it the
  **frame reads** (the frame sources' ``gather``/``gather_fields`` calls, counted), then **padding and filling**
  (``MixtureDataset._complete``) and **joining** (the parts scattered into the mixed batch, ``MixtureHooks.concat``);
- **joined** (``lerobot.joined``, what a run serves where the components allow it): LeRobot's item rules once over
  all components, a camera read in one call across the components where the backend's frame sources can
  (``FrameSource.join_field``: ``compressed_cache``, ``gpu_resampler``), else one call per component and key group;

and the one dataset's batches (a permutation of its rows) through the same ``collate``: for ``datapipe`` and
``video_stream`` that is their random access, not the pipelines that serve one dataset in a run (those are in
``mixtures_pretraining``'s table).

Single-threaded and in process on purpose: what one thread spends per batch is what bounds the samples/s the
threads of ``mixtures_pretraining`` reach, without their scheduling noise. ``table RESULT`` prints
docs/benchmarks.md's table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks.mixtures import echo, work_dir, write_result
from benchmarks.mixtures_pretraining import OPTIONS, SIZES, SPEC, generate, generated

BACKENDS = ("compressed_cache", "datapipe", "gpu_resampler", "video_stream")
PARTS = ("component_parts", "frame_reads", "padding_filling", "joining")
# docs/benchmarks.md holds table() of the committed result between these lines (benchmarks/tests checks it)
DOC_BEGIN = "<!-- python -m benchmarks.mixture_batch_cost table benchmarks/results/mixture_batch_cost.json -->"
DOC_END = "<!-- /python -m benchmarks.mixture_batch_cost table -->"


class _Timers:
    """Seconds and calls per part, with reentrant calls (``gather_fields`` calling ``gather``) counted once."""

    def __init__(self):
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)
        self._depth = dict.fromkeys(PARTS, 0)

    def wrap(self, part: str, fn):
        def timed(*args, **kwargs):
            self._depth[part] += 1
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth[part] -= 1
                if not self._depth[part]:
                    self.seconds[part] += time.perf_counter() - t
                    self.calls[part] += 1

        return timed

    def wrap_done(self, part: str, fn):
        """As :meth:`wrap`, counting only the calls that return true (a hook that may decline, as
        ``JoinedFrames._read_joined`` does): a declined call's time goes to the calls it then makes instead."""

        def timed(*args, **kwargs):
            self._depth[part] += 1
            t = time.perf_counter()
            done = False
            try:
                done = fn(*args, **kwargs)
                return done
            finally:
                self._depth[part] -= 1
                if done and not self._depth[part]:
                    self.seconds[part] += time.perf_counter() - t
                    self.calls[part] += 1

        return timed

    def reset(self):
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)


def _time_frames(dataset, timers: _Timers) -> None:
    """Time a backend dataset's frame reads (its frame source's ``gather`` and ``gather_fields``, per instance)."""
    frames = dataset.frames
    for name in ("gather", "gather_fields"):
        setattr(frames, name, timers.wrap("frame_reads", getattr(frames, name)))


def _natives(comps: list[dict]) -> list:
    """The components' ``LeRobotDataset``\\ s, as ``make_dataset`` builds them (ACT's delta timestamps, uint8)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.presets import delta_timestamps

    out = []
    for c in comps:
        meta = LeRobotDatasetMetadata(c["repo_id"], root=c["root"])
        delta = delta_timestamps("act", meta)
        out.append(LeRobotDataset(c["repo_id"], root=c["root"], delta_timestamps=delta, return_uint8=True))
    return out


def _timed_batches(collate, batches: list[list[int]], warm: int, timers: _Timers) -> float:
    """Seconds per batch of ``collate`` over ``batches`` after ``warm`` untimed ones (the parts reset with it)."""
    for b in batches[:warm]:
        collate(b)
    timers.reset()
    t = time.perf_counter()
    for b in batches[warm:]:
        collate(b)
    return (time.perf_counter() - t) / max(1, len(batches) - warm)


def measure_backend(backend: str, comps: list[dict], single: dict, batch_size: int, batches: int) -> dict:
    """One backend: its mixture's batches and the one dataset's, timed with their parts (module docstring).

    Returns:
        The row: ``paths``, per way of building the mixture's batches (``per_component``: each component's part by
        its own dataset, then renamed, padded, filled and scattered; ``joined``: once over all components,
        ``lerobot.joined``), its ``ms`` per batch, ``parts_ms`` and ``reads_per_batch`` (frame-source calls);
        ``mixture_ms`` (the joined path's, what a run serves), ``single_ms``, ``vs_single`` (``single_ms /
        mixture_ms``: the mixture's samples/s as a share of the one dataset's), the one dataset's reads and
        ``components_per_batch``; ``build_s`` (the mixture built, its components' ``LeRobotDataset``\\ s aside) and
        ``join_s`` of it (the joined batches set up again alone: the low-dim tables read).
    """
    import numpy as np

    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

    timers = _Timers()
    spec = {"components": [{k: c[k] for k in ("repo_id", "root", "weight")} | {"rename": {}} for c in comps]}
    natives = _natives(comps)
    t = time.perf_counter()
    mix = build_mixture(parse(dict(spec, **SPEC)), natives, choose(backend, **OPTIONS.get(backend, {})), seed=0)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    mix.join()  # again, timed alone: what joining adds to the build (the low-dim tables read)
    join_s = time.perf_counter() - t
    try:
        hooks = mix.hooks
        hooks.component_batch = timers.wrap("component_parts", hooks.component_batch)
        hooks.concat = timers.wrap("joining", hooks.concat)
        mix._complete = timers.wrap("padding_filling", mix._complete)
        for d in mix.datasets:
            _time_frames(d, timers)
        order = mix.order(0, True).rank_indices(0, 0, 1)
        # each way on batches of its own (the first half of the pass's batches, then the second), so that neither
        # finds frames the other decoded (video_stream and datapipe keep decoded units)
        every = [order[i * batch_size : (i + 1) * batch_size].tolist() for i in range(2 * batches)]
        comps_per = float(np.mean([len(np.unique(mix._layout.split(b)[0])) for b in every]))
        n = max(1, batches - 3)
        paths = {}
        joined = mix.joined
        if joined is not None:  # a camera read across every component in one call (FrameSource.join_field)
            frames = joined.frames
            frames._read_joined = timers.wrap_done("frame_reads", frames._read_joined)
        for p, path in enumerate(("per_component", "joined")):
            collate = functools.partial(mix.collate, joined=path == "joined")
            per_batch = _timed_batches(collate, every[p * batches : (p + 1) * batches], 3, timers)
            paths[path] = {
                "ms": round(per_batch * 1e3, 3),
                "parts_ms": {p: round(timers.seconds[p] / n * 1e3, 3) for p in PARTS},
                "reads_per_batch": round(timers.calls["frame_reads"] / n, 1),
            }
    finally:
        mix.close()
    from robo_loaders_plugin.lerobot.single import build_dataset

    dataset = build_dataset(_natives([single])[0], choose(backend, **OPTIONS.get(backend, {})), batch_size=batch_size)
    try:
        one_timers = _Timers()
        _time_frames(dataset, one_timers)
        perm = np.random.default_rng(0).permutation(len(dataset))
        chunks = [perm[i * batch_size : (i + 1) * batch_size].tolist() for i in range(batches)]
        single_batch = _timed_batches(dataset.collate, chunks, 3, one_timers)
        single_reads = one_timers.calls["frame_reads"] / n
        single_read_ms = one_timers.seconds["frame_reads"] / n * 1e3
    finally:
        dataset.close()
    return {
        "backend": backend,
        "components": len(comps),
        "components_per_batch": round(comps_per, 2),
        "joined": joined is not None,
        "build_s": round(build_s, 3),
        "join_s": round(join_s, 3),
        "paths": paths,
        "mixture_ms": paths["joined"]["ms"],
        "single_ms": round(single_batch * 1e3, 3),
        "vs_single": round(single_batch * 1e3 / paths["joined"]["ms"], 4),
        "single_reads_per_batch": round(single_reads, 1),
        "single_frame_reads_ms": round(single_read_ms, 3),
    }


def run(
    components: int = 100,
    batches: int = 40,
    batch_size: int = 32,
    out: str | None = None,
    data: str | None = None,
    workdir: str | None = None,
    backends=BACKENDS,
    size_name: str = "full",
) -> dict:
    """Generate (or read ``data``), measure every backend, write the result.

    Args:
        components: How many of the pretraining shape's components the mixture has.
        batches: Batches drawn per measurement (the first 3 untimed).
        batch_size: Rows per batch.
        out: The result JSON's path (``None``: not written).
        data: A directory of ``mixtures_pretraining``'s full datasets (kept); ``None``: the first ``components`` of
            that shape generated here and removed afterwards.
        workdir: Where a fresh directory holds generated data and the caches (default: ``$ROBO_LOADERS_WORKLOADS``,
            else the system's temporary directory).
        backends: The backends measured.
        size_name: The pretraining benchmark's shape (``SIZES``) the components are generated in (``small``: the
            quick test's).

    Returns:
        The result (``kind: mixture_batch_cost``).
    """
    from robo_loaders_plugin.bench.report import machine

    base, created = work_dir(workdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(base, "hf_datasets_cache")
    result: dict = {
        "kind": "mixture_batch_cost",
        "version": 1,
        "machine": machine(),
        "load_before": os.getloadavg()[0],
        "settings": {
            "components": components,
            "batches": batches,
            "batch_size": batch_size,
            "spec": SPEC,
            "shape": size_name,
        },
        "rows": [],
    }
    try:
        if data:
            comps, single, _ = generated(data, "full")
            if components != len(comps):
                raise SystemExit(f"--data {data} holds {len(comps)} components and their one dataset; give no --data")
        else:
            comps, single = generate(os.path.join(base, "data"), dict(SIZES[size_name], components=components))
        for backend in backends:
            os.environ["ROBO_LOADERS_CACHE"] = tempfile.mkdtemp(prefix=f"cache-{backend}-", dir=base)
            row = measure_backend(backend, comps, single, batch_size, batches)
            shutil.rmtree(os.environ.pop("ROBO_LOADERS_CACHE"), ignore_errors=True)
            echo(
                f"[batch cost] {backend}: mixture {row['mixture_ms']:.2f} ms/batch (per component "
                f"{row['paths']['per_component']['ms']:.2f}), one dataset {row['single_ms']:.2f} ms "
                f"({row['vs_single']:.2f}x), parts {row['paths']}"
            )
            result["rows"].append(row)
        result["load_after"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if created:
            shutil.rmtree(created, ignore_errors=True)
    if out:
        write_result(result, out)
    return result


def table(result: dict) -> str:
    """docs/benchmarks.md's table of a result.

    Args:
        result: What :func:`run` returned.

    Returns:
        The Markdown (a caption line and the table).
    """
    s, m = result["settings"], result["machine"]
    lines = [
        f"One batch of {s['batch_size']} at a time on one thread, a mixture of {s['components']} pretraining-shaped "
        f"components against the same backend on one dataset of the same frames; {m.get('arch', m.get('cpu'))}, "
        f"{m.get('cores')} cores, 1-minute load {result['load_before']:.1f} before and "
        f"{result.get('load_after', float('nan')):.1f} after. Milliseconds per batch, by how the mixture's batch is "
        "built: *per component* (each component's part by its own dataset, then renamed, padded, filled and "
        "scattered) and *joined* (once over all components, what a run serves):",
        "",
        "| backend | components per batch | one dataset | per component | of which frame reads (calls) "
        "| padding and filling | joining | joined | of which frame reads (calls) | joined vs one dataset |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        per, joined = r["paths"]["per_component"], r["paths"]["joined"]
        lines.append(
            f"| {r['backend']} | {r['components_per_batch']:.1f} | {r['single_ms']:.2f} "
            f"({r['single_reads_per_batch']:.0f} reads) | {per['ms']:.2f} | {per['parts_ms']['frame_reads']:.2f} "
            f"({per['reads_per_batch']:.0f}) | {per['parts_ms']['padding_filling']:.2f} | "
            f"{per['parts_ms']['joining']:.2f} | {joined['ms']:.2f} | {joined['parts_ms']['frame_reads']:.2f} "
            f"({joined['reads_per_batch']:.0f}) | {r['vs_single']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.mixture_batch_cost")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--components", type=int, default=100)
    r.add_argument("--batches", type=int, default=40)
    r.add_argument("--json", help="the result's path")
    r.add_argument("--data", help="mixtures_pretraining's kept full datasets (with --components 400)")
    r.add_argument("--workdir", help="where generated data and caches go (default: $ROBO_LOADERS_WORKLOADS)")
    t = sub.add_parser("table")
    t.add_argument("result")
    a = p.parse_args(argv)
    if a.cmd == "run":
        run(a.components, a.batches, out=a.json, data=a.data, workdir=a.workdir)
    else:
        with open(a.result) as f:
            sys.stdout.write(table(json.load(f)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
