"""``python -m benchmarks.harness growth ...``: how every backend's start-up, speed and memory grow with the number
of frames (issue 22), on generated workloads of 10k, 100k and 1M frames.

Workloads are generated once into ``$ROBO_LOADERS_WORKLOADS`` (default ``/work/workloads``; outside the repository:
a few GB, never committed) by ``robo-loaders sample-data`` (:func:`generate`), which records how long each took and
its size in ``workloads.json`` there. ``growth run`` then runs every backend on every size of one workload, each in
its own process (``growth_child``), with the one-time work done first and timed apart: ``datapipe``'s conversion
(2 workers), robomimic ``video_stream``'s video shards, and ``compressed_cache`` built once into a cache directory
and reused by the measured run (its build is the "build/convert" time; its start-up is a second run's); the runs
of a workload share one cache root (what is checked once per version of a file is checked by the first run that
needs it; datapipe's first start is run, and recorded, before the measured one). Results
(``kind: growth``) are what ``growth report`` (``growth_plots.py``) plots on log-log axes; docs/benchmarks.md says how
to read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

WORKLOADS_ENV = "ROBO_LOADERS_WORKLOADS"
DEFAULT_WORKLOADS = "/work/workloads"
SIZES = {"10k": 100, "100k": 1_000, "1m": 10_000}  # episodes of 95-110 frames: >= 10k, 100k and 1M frames in all
MIN_FRAMES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
LENGTHS = (95, 110)
BACKENDS = ("native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream")
CONVERT_WORKERS = 2


def workloads_root() -> str:
    """Where the workloads live: ``$ROBO_LOADERS_WORKLOADS``, else ``/work/workloads``."""
    return os.path.abspath(os.path.expanduser(os.environ.get(WORKLOADS_ENV) or DEFAULT_WORKLOADS))


@dataclasses.dataclass(frozen=True)
class Workload:
    """One generated dataset: ``kind`` is ``lerobot`` (LeRobot v3, state and action, one 64x64 H.264 camera),
    ``robomimic`` (low-dim keys only) or ``robomimic_image`` (one 84x84 camera, no next_obs)."""

    kind: str
    size: str

    @property
    def framework(self) -> str:
        return "lerobot" if self.kind == "lerobot" else "robomimic"

    @property
    def name(self) -> str:
        return {"lerobot": "lerobot_video64", "robomimic": "robomimic_lowdim", "robomimic_image": "robomimic_image84"}[
            self.kind
        ] + f"_{self.size}"

    def path(self, root: str | None = None) -> str:
        root = root or workloads_root()
        return os.path.join(root, self.name + ("" if self.kind == "lerobot" else ".hdf5"))

    @property
    def repo_id(self) -> str:
        return f"local/{self.name}"

    def command(self, path: str) -> list[str]:
        """The ``robo-loaders sample-data`` command that writes it."""
        episodes = str(SIZES[self.size])
        lengths = ["--min-length", str(LENGTHS[0]), "--max-length", str(LENGTHS[1]), "--seed", "0"]
        if self.kind == "lerobot":
            # 64 distinct rendered scenes (rendering is ~0.4 ms a frame), every frame encoded and decoded for real;
            # the fast writer: LeRobot's own writer rewrites the whole video file for every episode
            return [
                "sample-data",
                "lerobot",
                path,
                "--repo-id",
                self.repo_id,
                "--episodes",
                episodes,
                *lengths,
                "--cameras",
                "1",
                "--image-size",
                "64x64",
                "--codec",
                "h264",
                "--scenes",
                "64",
                "--writer",
                "fast",
            ]
        cams = (
            ["--cameras", "0"]
            if self.kind == "robomimic"
            else ["--cameras", "1", "--image-size", "84", "--no-next-obs"]
        )
        return ["sample-data", "robomimic", path, "--demos", episodes, *lengths, *cams]

    def frames(self, path: str | None = None) -> int:
        path = path or self.path()
        if self.kind == "lerobot":
            with open(os.path.join(path, "meta", "info.json")) as f:
                return int(json.load(f)["total_frames"])
        import h5py

        with h5py.File(path, "r") as f:
            return int(f["data"].attrs["total"])


def all_workloads(kinds=("lerobot", "robomimic", "robomimic_image"), sizes=tuple(SIZES)) -> list[Workload]:
    """The issue's set: every kind at every size, except the camera copy of robomimic at 1M (100k suffices)."""
    return [Workload(k, s) for k in kinds for s in sizes if not (k == "robomimic_image" and s == "1m")]


def _bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def generate(workloads: list[Workload], root: str | None = None, echo=print) -> list[dict]:
    """Write the workloads that are missing (``robo-loaders sample-data``, a fresh process each) and record each
    one's frames, bytes on disk and generation time in ``<root>/workloads.json``; returns every record.

    Raises:
        RuntimeError: a generation failed, or wrote fewer frames than its size promises."""
    root = root or workloads_root()
    os.makedirs(root, exist_ok=True)
    index_path = os.path.join(root, "workloads.json")
    records = {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            records = {r["name"]: r for r in json.load(f)}
    for w in workloads:
        path = w.path(root)
        if os.path.exists(path) and w.name in records:
            continue
        if os.path.exists(path):
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)  # a half-written one
        cmd = [sys.executable, "-m", "robo_loaders_plugin.cli", *w.command(path)]
        echo(f"[growth] generating {w.name}: robo-loaders {' '.join(w.command(path))}")
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise RuntimeError(f"generating {w.name} failed:\n{p.stderr[-3000:]}")
        frames = w.frames(path)
        if frames < MIN_FRAMES[w.size]:
            raise RuntimeError(f"{w.name}: {frames} frames, fewer than {MIN_FRAMES[w.size]}")
        records[w.name] = {
            "name": w.name,
            "kind": w.kind,
            "size": w.size,
            "framework": w.framework,
            "frames": frames,
            "episodes": SIZES[w.size],
            "bytes": _bytes(path),
            "generate_s": round(wall, 1),
            "command": "robo-loaders " + " ".join(w.command(os.path.join(f"${WORKLOADS_ENV}", os.path.basename(path)))),
        }
        echo(f"[growth] {w.name}: {frames} frames, {records[w.name]['bytes'] / 2**20:.0f} MiB in {wall:.0f} s")
        from robo_loaders_plugin.core.files import atomic_write_json

        atomic_write_json(index_path, sorted(records.values(), key=lambda r: r["name"]), indent=1)
    return [records[w.name] for w in workloads if w.name in records]


# -- one backend on one workload ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Settings:
    batch_size: int = 64
    num_workers: int = 2
    batches: int = 60
    # untimed batches after the first: a pass's start plans the next pass in a background thread (0.25 s of CPU
    # at a million items, once per pass); 60 timed batches (~0.4 s for a fast loader) would count it 250x its
    # share of a pass, and samples/s would seem to fall with size
    warmup: int = 60
    # time one whole pass instead (first batch to the pass's last); LeRobotDataset itself is still sampled: a pass
    # of a million frames through it takes ~45 min on these machines
    full_pass: bool = False
    seq_length: int = 10  # robomimic windows
    preset: str = "act"  # LeRobot delta timestamps
    timeout: float = 3600.0


def child_args(w: Workload, backend: str, kwargs: dict, s: Settings, batches: int | None = None) -> dict:
    full = s.full_pass and not batches and not (w.framework == "lerobot" and backend == "native")
    common = dict(
        framework=w.framework,
        backend=backend,
        kwargs=kwargs,
        batch_size=s.batch_size,
        num_workers=s.num_workers,
        batches=batches or s.batches,
        warmup=0 if batches else s.warmup,
        full_pass=full,
    )
    if w.framework == "lerobot":
        return dict(common, root=w.path(), repo_id=w.repo_id, preset=s.preset)
    return dict(
        common,
        dataset=w.path(),
        seq_length=s.seq_length,
        frame_stack=1,
        obs_keys=None,
        label=backend,
        cache_mode="low_dim",
        load_next_obs=w.kind == "robomimic",
    )


def _convert(command: list[str], out: str, timeout: float, echo) -> dict:
    """``robo-loaders convert <command> OUT --num-workers 2`` in a fresh process, timed."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "robo_loaders_plugin.cli",
        "convert",
        *command,
        out,
        "--num-workers",
        str(CONVERT_WORKERS),
    ]
    echo(f"[growth]   convert {' '.join(command[:1] + command[2:])} ({CONVERT_WORKERS} workers) ...")
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return {"error": p.stderr[-2000:], "wall_s": wall}
    return {"wall_s": round(wall, 2), "workers": CONVERT_WORKERS, "out_bytes": _bytes(out)}


def _available_memory() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def _resampler_bytes(w: Workload, path: str, frames: int) -> int:
    """What gpu_resampler holds: every frame of every field uncompressed (camera frames dominate)."""
    if w.framework == "lerobot":
        with open(os.path.join(path, "meta", "info.json")) as f:
            feats = json.load(f)["features"]
        import numpy as np

        per = sum(int(np.prod(ft["shape"])) * (1 if ft["dtype"] in ("video", "image") else 4) for ft in feats.values())
        return frames * per
    return _bytes(path)  # robomimic: the file's arrays (float32/uint8 as stored)


def run_workload(w: Workload, backends, s: Settings, scratch: str, log_dir: str, echo=print) -> list[dict]:
    """Every backend on one workload: the one-time work first (timed apart), then the measured run."""
    from robo_loaders_plugin.bench.runner import run_child

    path = w.path()
    frames = w.frames(path)
    source_bytes = _bytes(path)
    rows = []
    if w.framework == "lerobot":  # LeRobot's datasets cache (Arrow) made before any timed run, not by the first
        echo(f"[growth]   warming LeRobot's datasets cache for {w.name} ...")
        run_child(
            "benchmarks.harness.growth_child",
            child_args(w, "native", {}, s, batches=1),
            f"{w.name}-warm",
            log_dir,
            s.timeout,
            fresh_cache=False,
        )
    for backend in backends:
        kwargs, once = {}, None
        if backend == "gpu_resampler":  # every frame uncompressed in RAM (no GPU here): refused when it cannot fit
            need, free = _resampler_bytes(w, path, frames), _available_memory()
            if need > 0.6 * free:
                rows.append(
                    {
                        "backend": backend,
                        "workload": w.name,
                        "size": w.size,
                        "frames": frames,
                        "error": f"not run: holds every frame decoded, {need / 2**30:.1f} GiB, and this shared "
                        f"machine has {free / 2**30:.1f} GiB available (run only below 60% of it)",
                    }
                )
                echo(f"[growth]   {backend}: {rows[-1]['error']}")
                continue
        if backend == "datapipe":
            out = os.path.join(scratch, "shards")
            cmd = [w.framework, path] + (["--repo-id", w.repo_id] if w.framework == "lerobot" else [])
            once = dict(_convert(cmd, out, s.timeout, echo), what="robo-loaders convert (lossless shards)")
            kwargs = {"shards": out}
        elif backend == "video_stream" and w.framework == "robomimic":
            out = os.path.join(scratch, "video_shards")
            once = dict(
                _convert([w.framework, path, "--frames", "h264"], out, s.timeout, echo),
                what="robo-loaders convert --frames h264 (video shards)",
            )
            kwargs = {"source": out}
        elif backend == "compressed_cache":
            cache_dir = os.path.join(scratch, "cache")
            kwargs = {"cache_dir": cache_dir}
            echo(f"[growth]   {backend}: building its cache once ...")
            built = run_child(
                "benchmarks.harness.growth_child",
                child_args(w, backend, kwargs, s, batches=1),
                f"{w.name}-{backend}-build",
                log_dir,
                s.timeout,
                fresh_cache=False,
            )
            once = {
                "what": "compressed_cache built into cache_dir (its first run)",
                "error": built.get("error"),
                "wall_s": built.get("build_s"),
                "out_bytes": _bytes(cache_dir) if os.path.exists(cache_dir) else None,
            }
        if once is not None and once.get("wall_s"):
            once["source_mb_per_s"] = round(source_bytes / once["wall_s"] / 1e6, 2)
            once["mb_per_s_per_worker"] = round(once["source_mb_per_s"] / once.get("workers", 1), 2)
        if once is not None and once.get("error"):
            rows.append(
                {
                    "backend": backend,
                    "workload": w.name,
                    "size": w.size,
                    "frames": frames,
                    "error": f"one-time step failed: {once['error']}",
                    "once": once,
                }
            )
            continue
        if once is not None:
            # the one-time step's output (GBs at a million frames) is written back before anything is timed: a
            # measured start right after a 9.4 GB build shared the disk with its write-back (native itself started
            # 2x slower in that run)
            os.sync()
        first_open = None
        if backend == "datapipe":  # its first start checks the shards against the source once (recorded): apart
            echo(f"[growth]   {backend}: first start (checks recorded once per version of the data) ...")
            warm = run_child(
                "benchmarks.harness.growth_child",
                child_args(w, backend, kwargs, s, batches=1),
                f"{w.name}-{backend}-first",
                log_dir,
                s.timeout,
                fresh_cache=False,
            )
            first_open = warm.get("build_s")
        echo(f"[growth]   {backend} on {w.name} ...")
        r = run_child(
            "benchmarks.harness.growth_child",
            child_args(w, backend, kwargs, s),
            f"{w.name}-{backend}",
            log_dir,
            s.timeout,
            fresh_cache=False,
        )
        if first_open is not None:
            r["first_start_build_s"] = first_open
        r.update(backend=backend, workload=w.name, size=w.size, frames=frames, source_bytes=source_bytes, once=once)
        if not r.get("error"):
            r["startup_s"] = r["build_s"] + r["first_batch_s"]
            r["held_bytes_per_frame"] = r["held_bytes"] / frames
            if r.get("plan_cpu_s") is not None:
                r["plan_s_per_million"] = r["plan_cpu_s"] / r["plan_items"] * 1e6
        else:
            echo(f"[growth]   {backend} FAILED:\n{r['error'][-1500:]}")
        for k in ("baseline_pss_bytes",):
            r.pop(k, None)
        rows.append(r)
        shutil.rmtree(os.path.join(scratch, "cache"), ignore_errors=True) if backend == "compressed_cache" else None
    return rows


def run_growth(kind: str, sizes, backends, s: Settings, json_out: str, echo=print) -> dict:
    """Every backend at every size of workload ``kind``; writes ``json_out`` (``kind: growth``) after each size, so
    an interrupted run keeps what it measured."""
    from robo_loaders_plugin.bench.report import code_version, machine
    from robo_loaders_plugin.core.files import atomic_write_json

    workloads = [Workload(kind, size) for size in sizes]
    records = generate(workloads, echo=echo)
    payload = {
        "kind": "growth",
        "framework": workloads[0].framework,
        "workload": kind,
        "machine": machine(),
        "code": code_version(),  # which code the rows measured (docs cite it)
        "date": time.strftime("%Y-%m-%d"),
        "settings": dataclasses.asdict(s),
        "workloads": records,
        "rows": [],
    }
    for w in workloads:
        with workload_scratch(w, "growth") as (scratch, log_dir):
            payload["rows"] += run_workload(w, backends, s, scratch, log_dir, echo)
        atomic_write_json(json_out, payload, indent=1)
        echo(f"[growth] wrote {json_out} ({w.name} done)")
    return payload


@contextlib.contextmanager
def workload_scratch(w: Workload, what: str):
    """A scratch directory beside the data (big: conversions, caches) and a log directory for one workload's runs,
    with one cache root for them all, as a user's: what is recorded once per version of a file (validation, row
    checks) is recorded by the first run that needs it; conversions are given explicitly. Removed after.

    Yields:
        ``(scratch, log_dir)``.
    """
    scratch = tempfile.mkdtemp(prefix=f".{what}-{w.name}-", dir=workloads_root())
    before = os.environ.get("ROBO_LOADERS_CACHE")
    os.environ["ROBO_LOADERS_CACHE"] = os.path.join(scratch, "cache-root")
    try:
        with tempfile.TemporaryDirectory(prefix=f"{what}-logs-") as log_dir:
            yield scratch, log_dir
    finally:
        if before is None:
            os.environ.pop("ROBO_LOADERS_CACHE", None)
        else:
            os.environ["ROBO_LOADERS_CACHE"] = before
        shutil.rmtree(scratch, ignore_errors=True)


# -- a pass over files in or out of the page cache ---------------------------------------------------------------
def _files(root: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def resident_bytes(paths: list[str]) -> int:
    """Bytes of these files in the page cache now (util-linux ``fincore``; -1 when it is missing)."""
    if not paths or shutil.which("fincore") is None:
        return -1
    p = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", *paths], capture_output=True, text=True
    )
    return sum(int(x) for x in p.stdout.split()) if p.returncode == 0 else -1


def evict(paths: list[str]) -> None:
    """Drop these files' clean pages from the page cache (``POSIX_FADV_DONTNEED``: this file only, no root)."""
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_through(paths: list[str], chunk: int = 16 << 20) -> float:
    """Read these files once, front to back (into the page cache); returns the seconds it took."""
    t = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(chunk):
                pass
    return time.perf_counter() - t


def page_cache_passes(w: Workload, backends, s: Settings, echo=print) -> list[dict]:
    """A full pass of each on-disk backend with its files out of the page cache (cold: evicted just before) and in
    it (warm: read through just before): whether a backend's speed at a million frames is its own or the disk's.

    ``compressed_cache`` is built once into a cache directory (file-backed, mapped), ``datapipe`` converted once;
    each pass is its own process (``growth_child``), the files' resident bytes measured (``fincore``) before it.
    """
    from robo_loaders_plugin.bench.runner import run_child

    for backend in backends:
        if backend not in ("compressed_cache", "datapipe"):
            raise ValueError(
                f"{backend}: only the backends that serve from files they write (compressed_cache, datapipe)"
            )
    rows = []
    with workload_scratch(w, "pagecache") as (scratch, log_dir):
        for backend in backends:
            if backend == "compressed_cache":
                files_dir, kwargs = os.path.join(scratch, "cache"), {"cache_dir": os.path.join(scratch, "cache")}
                echo(f"[page-cache] {backend}: building its cache once ...")
                once = run_child(
                    "benchmarks.harness.growth_child",
                    child_args(w, backend, kwargs, s, batches=1),
                    f"{w.name}-{backend}-build",
                    log_dir,
                    s.timeout,
                    fresh_cache=False,
                )
            else:  # datapipe
                files_dir = os.path.join(scratch, "shards")
                cmd = [w.framework, w.path()] + (["--repo-id", w.repo_id] if w.framework == "lerobot" else [])
                once, kwargs = _convert(cmd, files_dir, s.timeout, echo), {"shards": files_dir}
                if not once.get("error"):  # its first start records its checks of the shards, apart
                    run_child(
                        "benchmarks.harness.growth_child",
                        child_args(w, backend, kwargs, s, batches=1),
                        f"{w.name}-{backend}-first",
                        log_dir,
                        s.timeout,
                        fresh_cache=False,
                    )
            if once.get("error"):
                rows.append({"backend": backend, "workload": w.name, "error": str(once["error"])[-1500:]})
                continue
            files = _files(files_dir)
            size = sum(os.path.getsize(f) for f in files)
            for state in ("cold", "warm"):
                read_s = None
                if state == "cold":
                    evict(files)
                else:
                    read_s = read_through(files)
                resident = resident_bytes(files)
                echo(f"[page-cache] {backend} {state} ({resident / 2**30:.1f} of {size / 2**30:.1f} GiB resident) ...")
                r = run_child(
                    "benchmarks.harness.growth_child",
                    child_args(w, backend, kwargs, s),
                    f"{w.name}-{backend}-{state}",
                    log_dir,
                    s.timeout,
                    fresh_cache=False,
                )
                r.update(
                    backend=backend,
                    workload=w.name,
                    size=w.size,
                    frames=w.frames(),
                    state=state,
                    files_bytes=size,
                    resident_before_bytes=resident,
                    read_through_s=read_s,
                    resident_after_bytes=resident_bytes(files),
                )
                echo(f"[page-cache]   {r.get('samples_per_s', r.get('error'))} samples/s")
                rows.append(r)
            shutil.rmtree(files_dir, ignore_errors=True)
    return rows


# -- conversion at size: 2 workers, local and datatrove, and a killed run resumed ------------------------------------
def _manifest_states(out: str) -> dict:
    try:
        with open(os.path.join(out, "manifest.json")) as f:
            units = json.load(f)["units"]
    except (OSError, ValueError, KeyError):
        return {}
    states: dict = {}
    for u in units:
        states[u["state"]] = states.get(u["state"], 0) + 1
    return states


def _shard_stats(out: str) -> dict:
    shards = os.path.join(out, "shards")
    return (
        {
            n: (os.stat(os.path.join(shards, n)).st_ino, os.stat(os.path.join(shards, n)).st_mtime_ns)
            for n in os.listdir(shards)
            if n.endswith(".tar")
        }
        if os.path.isdir(shards)
        else {}
    )


def convert_at_size(w: Workload, scratch: str, shard_size: str = "64MB", timeout: float = 7200, echo=print) -> dict:
    """``robo-loaders convert`` of workload ``w`` with 2 workers on the local executor and on datatrove's local
    executor (wall time, source MB/s, MB/s per worker), then a run killed (SIGKILL to its process group) once a
    third of its units are done and the same command run again: which units the second run converted (the done
    ones must keep their shard files: same inode and mtime) and how long it took."""
    import signal

    path = w.path()
    source_bytes = _bytes(path)
    base = [sys.executable, "-m", "robo_loaders_plugin.cli", "convert", w.framework, path]
    extra = ["--repo-id", w.repo_id] if w.framework == "lerobot" else []
    out = {
        "workload": w.name,
        "frames": w.frames(path),
        "source_bytes": source_bytes,
        "shard_size": shard_size,
        "runs": [],
    }

    def command(dest, executor):
        cmd = base + [dest, "--num-workers", str(CONVERT_WORKERS), "--shard-size", shard_size] + extra
        if executor != "local":
            cmd += ["--executor", executor, "--logging-dir", dest + ".logs"]
        return cmd

    for executor in ("local", "datatrove-local"):
        dest = os.path.join(scratch, f"{w.name}-{executor}")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(dest + ".logs", ignore_errors=True)
        echo(f"[growth] convert {w.name} ({executor}, {CONVERT_WORKERS} workers) ...")
        t = time.perf_counter()
        p = subprocess.run(command(dest, executor), capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - t
        row = {"executor": executor, "workers": CONVERT_WORKERS, "wall_s": round(wall, 1)}
        if p.returncode != 0:
            row["error"] = p.stderr[-2000:]
        else:
            mb_s = source_bytes / wall / 1e6
            row.update(
                source_mb_per_s=round(mb_s, 2),
                mb_per_s_per_worker=round(mb_s / CONVERT_WORKERS, 2),
                out_bytes=_bytes(dest),
                units=sum(_manifest_states(dest).values()),
            )
        out["runs"].append(row)
        echo(f"[growth]   {row}")
        if executor != "local":
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(dest + ".logs", ignore_errors=True)
    full = out["runs"][0]
    # killed and resumed (local executor): the same command, killed once a third of the units are done
    dest = os.path.join(scratch, f"{w.name}-killed")
    shutil.rmtree(dest, ignore_errors=True)
    echo(f"[growth] convert {w.name}, killed after a third of its units, then run again ...")
    t = time.perf_counter()
    proc = subprocess.Popen(
        command(dest, "local"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    target = max(1, (full.get("units") or 3) // 3)
    while proc.poll() is None and _manifest_states(dest).get("done", 0) < target:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after = time.perf_counter() - t
    before = _manifest_states(dest)
    done_before = _shard_stats(dest)
    t = time.perf_counter()
    p = subprocess.run(command(dest, "local"), capture_output=True, text=True, timeout=timeout)
    rerun = time.perf_counter() - t
    after = _shard_stats(dest)
    kept = {n for n, st in done_before.items() if after.get(n) == st}
    out["killed"] = {
        "killed_after_s": round(killed_after, 1),
        "states_at_kill": before,
        "shards_done_at_kill": len(done_before),
        "shards_kept": len(kept),
        "shards_written_by_rerun": len(set(after) - kept),
        "shards_total": len(after),
        "rerun_s": round(rerun, 1),
        "rerun_ok": p.returncode == 0,
        "full_run_s": full.get("wall_s"),
        "error": None if p.returncode == 0 else p.stderr[-2000:],
    }
    echo(f"[growth]   {out['killed']}")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(os.path.join(scratch, f"{w.name}-local"), ignore_errors=True)
    return out
