"""``python -m benchmarks.harness growth findings``: the O(dataset) costs issue 22's profiling found, each timed
before (the code it replaced, kept here or in the tests as a reference) and after, in one process on the
million-frame workloads; writes ``benchmarks/results/growth/profiling_findings.json`` (docs/benchmarks.md quotes
it). Run under ``flock /work/bench.lock``: the ratios are only as good as the machine is quiet.
"""

from __future__ import annotations

import os
import time

import numpy as np


def _timed(fn, *args, repeat: int = 1, **kwargs) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t)
    return best


def planner(echo) -> dict:
    import importlib.util

    from robo_loaders_plugin.pipeline.plan import plan_windows

    # the replaced loop is kept in the tests as their reference; loaded by path (a package named ``tests`` installed
    # by some dependency shadows the repository's directory)
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "test_plan_scale.py")
    spec = importlib.util.spec_from_file_location("_growth_reference_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference_plan = module.reference_plan

    counts = np.full(10_000, 100)
    before = _timed(reference_plan, counts, 1, 0, 16)
    after = _timed(plan_windows, counts, 1, 0, 16, repeat=3)
    cpu = time.process_time()
    plan_windows(counts, 1, 0, 16)
    echo(f"planner: {before:.2f} s -> {after:.3f} s")
    return {
        "what": "planning a pass, 1M items in 10k episodes, buffer 16",
        "before_s": before,
        "after_s": after,
        "after_cpu_s": time.process_time() - cpu,
    }


def lerobot_index(root: str, repo_id: str, echo) -> dict:
    """LeRobotSamples' index arrays: a row of LeRobot's episode table read per episode and a Python list per row
    (before) against two column reads and per-run windows (after)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.dataset import episode_bounds
    from robo_loaders_plugin.windows import lerobot as rules

    meta = LeRobotDatasetMetadata(repo_id, root=root)
    frm = np.asarray(meta.episodes["dataset_from_index"])
    to = np.asarray(meta.episodes["dataset_to_index"])
    runs = [(e, int(a), int(b)) for e, (a, b) in enumerate(zip(frm, to))]

    def old():
        abs_index = np.concatenate(
            [
                np.arange(
                    int(meta.episodes[ep]["dataset_from_index"]), int(meta.episodes[ep]["dataset_from_index"]) + e - s
                )
                for ep, s, e in runs
            ]
        )
        bounds = {
            ep: (int(meta.episodes[ep]["dataset_from_index"]), int(meta.episodes[ep]["dataset_to_index"]))
            for ep, _, _ in runs
        }
        ep_of_row = np.repeat([ep for ep, _, _ in runs], [e - s for _, s, e in runs])
        return rules.DeltaWindows(
            abs_index,
            np.array([bounds[e][0] for e in ep_of_row.tolist()]),
            np.array([bounds[e][1] for e in ep_of_row.tolist()]),
            {"action": list(range(100))},
        )

    def new():
        rowmap = rules.RowMap(np.fromiter((e - s for _, s, e in runs), dtype=np.int64, count=len(runs)))
        first, last = episode_bounds(meta, np.arange(len(runs)))
        return rules.DeltaWindows.of_runs(rowmap, first, first, last, {"action": list(range(100))})

    before, after = _timed(old), _timed(new, repeat=3)
    echo(f"LeRobotSamples index: {before:.2f} s -> {after:.3f} s")
    return {
        "what": f"LeRobotSamples index arrays, {int(to[-1]):,} frames in {len(runs):,} episodes",
        "before_s": before,
        "after_s": after,
        "bytes_per_frame_before": 24 + 8,
        "bytes_per_frame_after": 4,
    }


def lerobot_sampler(root: str, repo_id: str, echo) -> dict:
    from lerobot.datasets import EpisodeAwareSampler
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    from robo_loaders_plugin.lerobot.compat import sampler_indices

    meta = LeRobotDatasetMetadata(repo_id, root=root)
    s = EpisodeAwareSampler(meta.episodes["dataset_from_index"], meta.episodes["dataset_to_index"], shuffle=True)
    before = _timed(lambda: np.asarray(s.indices, dtype=np.int64))
    after = _timed(sampler_indices, s, repeat=3)
    echo(f"sampler indices: {before:.2f} s -> {after:.3f} s")
    return {
        "what": f"lerobot-train's pass read off its EpisodeAwareSampler, {len(s):,} frames",
        "before_s": before,
        "after_s": after,
    }


def robomimic_validation(path: str, echo) -> dict:
    import h5py

    from robo_loaders_plugin.sources import robomimic_hdf5 as rh

    src = rh.RobomimicHdf5.__new__(rh.RobomimicHdf5)
    src.path = path
    with h5py.File(path, "r") as f:
        demos = rh.sorted_demos(f["data"].keys())

        def old():
            for d in demos:
                src._check_demo_slowly(f, d)  # the object-API walk the validation was

        before = _timed(old)
        after = _timed(src._check_demos, f, demos)
        record = rh._validation_record(path)
        record.save()
        assert record.matches()
        recorded = _timed(record.matches, repeat=3)
        keys = ["actions", "rewards", "dones", "states", "obs/object", "obs/robot0_eef_pos", "next_obs/object"]
        sample = demos[:: max(1, len(demos) // 500)]

        def read_old():
            for d in sample:
                for k in keys:
                    p = f"data/{d}/{k}"
                    assert p in f
                    f[p][()]

        def read_new():
            for d in sample:
                for k in keys:
                    rh.RobomimicHdf5.read(f, d, k)

        per = len(sample) * len(keys)
        r_before, r_after = _timed(read_old) / per, _timed(read_new) / per
    echo(
        f"robomimic validation: {before:.1f} s -> {after:.1f} s (recorded: {recorded * 1e3:.1f} ms); "
        f"read {r_before * 1e6:.0f} -> {r_after * 1e6:.0f} us per dataset"
    )
    return {
        "what": f"robomimic file validation, {len(demos):,} demos",
        "before_s": before,
        "after_s": after,
        "recorded_s": recorded,
        "read_us_per_dataset_before": r_before * 1e6,
        "read_us_per_dataset_after": r_after * 1e6,
    }


def store_costs(tmp: str, echo, frames: int = 1_000_000, episodes: int = 10_000) -> dict:
    """A store of a million small frames in 10,000 episodes: locating every frame blob (each process opening a
    compressed_cache; checked one by one before, each now checked before its first decode), preparing a raw field
    (concatenated per process before, its episodes' offsets now), and the data CRC a reuse read before issue 22."""
    from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore, StoreWriter
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
    from robo_loaders_plugin.storage.codec import FrameCodec

    path = os.path.join(tmp, "findings.rlc")
    writer = StoreWriter(path, FrameCodec("lz4", 1), workers=2)
    per = frames // episodes
    for e in range(episodes):
        writer.add_episode(
            f"e{e}",
            {"img": np.full((per, 4, 4, 3), e % 251, np.uint8), "low": np.full((per, 7), e, np.float32)},
            compressed={"img"},
        )
    store = EpisodeStore(writer.finish({}))

    def bounds_old():
        starts, ends = [], []
        for ep in range(len(store.episodes)):
            d = store.field(ep, "img")
            table = store._table(ep, "img", d)
            starts.append(d["offset"] + table[:-1])
            ends.append(d["offset"] + table[1:])
            n = int(np.prod(d["shape"][1:])) * np.dtype(d["dtype"]).itemsize
            for s, e in zip(starts[-1].tolist(), ends[-1].tolist()):
                FrameCodec.check_size(store._buf[s:e], n)
        return np.concatenate(starts), np.concatenate(ends)

    # at open, a reader now only locates the blobs; each is checked before its first decode
    b_before, b_after = _timed(bounds_old), _timed(store.blob_layout, "img")
    src = CompressedFrames(store)
    info = src.info("low")
    f_before = _timed(lambda: np.concatenate([store.raw(ep, "low") for ep in range(len(store.episodes))]))
    # a raw field is now read where it lies: what a process prepares is each episode's offset
    f_after = _timed(lambda: (src._flat.clear(), src._rows.clear(), src._raw_rows("low", info, 7)))
    crc = _timed(store.verify)
    echo(
        f"store: blob bounds {b_before:.2f} -> {b_after:.3f} s; raw concat {f_before:.2f} -> {f_after:.3f} s; "
        f"CRC of {store.file_nbytes / 2**20:.0f} MiB {crc:.2f} s"
    )
    store.close()
    os.unlink(path)
    return {
        "what": f"compressed store of {frames:,} frames in {episodes:,} episodes",
        "blob_bounds_before_s": b_before,
        "blob_bounds_after_s": b_after,
        "raw_concat_before_s": f_before,
        "raw_concat_after_s": f_after,
        "crc_s": crc,
        "crc_bytes": store.file_nbytes,
    }


def digests(paths: list[str], echo) -> list[dict]:
    """The content digest a fingerprint computes when a source's stat differs (every byte, SHA-256)."""
    from robo_loaders_plugin.storage import fingerprint as fp

    out = []
    for p in paths:
        size = (
            sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
            if os.path.isdir(p)
            else os.path.getsize(p)
        )
        t = time.perf_counter()
        h = fp.new_digest()
        if os.path.isdir(p):
            for name, n, *_ in fp.stat_files(p):
                fp.hash_file(h, os.path.join(p, name), n)
        else:
            fp.hash_file(h, p)
        wall = time.perf_counter() - t
        echo(f"digest of {os.path.basename(p)} ({size / 2**20:.0f} MiB): {wall:.1f} s")
        out.append({"source": os.path.basename(p), "bytes": size, "digest_s": wall, "mb_per_s": size / wall / 1e6})
    return out


def gather_ceiling(
    echo, sizes=(10_000, 100_000, 1_000_000), batches: int = 300, window: int = 10, batch_size: int = 64
) -> list[dict]:
    """The in-memory gather that bounds the backends serving from RAM (``gpu_resampler`` on the CPU,
    ``compressed_cache``'s raw fields), alone: ``batch_size`` random windows of ``window`` consecutive frames copied
    out of one array of ``frames`` rows, for the frame sizes of the growth workloads (robomimic low-dim rows, a
    LeRobot 64x64 RGB frame). No dataset code runs: what changes with ``frames`` is only how far apart in memory
    the rows are (caches, TLB), which is what a backend's speed at a million frames cannot avoid."""
    rows = {
        "robomimic low-dim frame (47 float64: obs, next_obs, action, reward, done)": 376,
        "LeRobot 64x64 RGB frame": 64 * 64 * 3,
    }
    rng = np.random.default_rng(0)
    out = []
    for what, nbytes in rows.items():
        base = None
        for frames in sizes:
            data = np.ones((frames, nbytes), dtype=np.uint8)  # touched: every page resident
            starts = rng.integers(frames - window, size=(batches, batch_size))
            offs = np.arange(window)
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                for b in range(batches):
                    data[(starts[b][:, None] + offs).ravel()]
                best = min(best, time.perf_counter() - t)
            del data
            per_s = batches * batch_size / best
            base = base or per_s
            echo(f"gather, {what}, {frames:,} frames: {per_s:,.0f} windows/s ({per_s / base:.2f} of the smallest)")
            out.append(
                {"row": what, "row_bytes": nbytes, "frames": frames, "windows_per_s": per_s, "kept": per_s / base}
            )
    return out


def findings(json_out: str, echo=print) -> dict:
    import tempfile

    from benchmarks.harness.growth import Workload, workloads_root
    from robo_loaders_plugin.bench.report import machine
    from robo_loaders_plugin.core.files import atomic_write_json

    os.environ["ROBO_LOADERS_CACHE"] = tempfile.mkdtemp(prefix="findings-cache-")  # records of this run only
    lr, rm = Workload("lerobot", "1m"), Workload("robomimic", "1m")
    out = {"kind": "growth_findings", "framework": "robomimic and LeRobot", "machine": machine(), "results": {}}
    res = out["results"]
    res["planner"] = planner(echo)
    res["lerobot_index"] = lerobot_index(lr.path(), lr.repo_id, echo)
    res["lerobot_sampler"] = lerobot_sampler(lr.path(), lr.repo_id, echo)
    res["robomimic_validation"] = robomimic_validation(rm.path(), echo)
    with tempfile.TemporaryDirectory(dir=workloads_root()) as tmp:
        res["store"] = store_costs(tmp, echo)
    res["gather"] = gather_ceiling(echo)
    res["digests"] = digests([lr.path(), rm.path(), Workload("robomimic_image", "100k").path()], echo)
    atomic_write_json(json_out, out, indent=1)
    return out
