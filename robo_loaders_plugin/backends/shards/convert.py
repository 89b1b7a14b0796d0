"""Parallel, resumable conversion into robo-shards.

Why a manifest of work units: a conversion of a large dataset can be killed or run by several processes on a
shared folder. ``manifest.json`` lists units (a run of episodes that becomes one shard) as planned / leased /
done; a process leases a unit under an ``flock`` on ``manifest.lock``, writes its shard atomically, then records it
as done with its index entries. A lease whose process is gone (same host) or older than ``lease_s`` is taken over,
so a killed conversion resumes where it stopped and nothing half-written is ever listed. The index is published
only when every unit is done.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing as mp
import os
import socket
import time
from typing import Callable, Iterable, Mapping

from tqdm.auto import tqdm

from robo_loaders_plugin.backends.shards.format import ShardError, ShardWriter, _atomic_json, publish
from robo_loaders_plugin.codecs import FrameCodec

MANIFEST = "manifest.json"


@contextlib.contextmanager
def _locked(out_dir: str):
    with open(os.path.join(out_dir, "manifest.lock"), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read(out_dir):
    with open(os.path.join(out_dir, MANIFEST)) as f:
        return json.load(f)


def plan(out_dir: str, source_fingerprint: str, units: list[list[str]], options: Mapping) -> dict:
    """Create the manifest, or check that an existing one is for the same source and options (resume)."""
    os.makedirs(os.path.join(out_dir, "shards"), exist_ok=True)
    with _locked(out_dir):
        path = os.path.join(out_dir, MANIFEST)
        if os.path.exists(path):
            m = _read(out_dir)
            if m["source"] != source_fingerprint or m["options"] != dict(options):
                raise ShardError(f"{out_dir} holds a conversion of another source or with other options; "
                                 "use an empty output directory")
            return m
        m = {"source": source_fingerprint, "options": dict(options),
             "units": [{"id": i, "episodes": eps, "state": "planned"} for i, eps in enumerate(units)]}
        _atomic_json(path, m)
        return m


def _lease_is_stale(lease: dict, lease_s: float) -> bool:
    if time.time() - lease["time"] > lease_s:
        return True
    return lease["host"] == socket.gethostname() and not os.path.exists(f"/proc/{lease['pid']}")


def lease(out_dir: str, lease_s: float = 3600.0) -> dict | None:
    with _locked(out_dir):
        m = _read(out_dir)
        for u in m["units"]:
            if u["state"] == "planned" or (u["state"] == "leased" and _lease_is_stale(u["lease"], lease_s)):
                u["state"] = "leased"
                u["lease"] = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
                _atomic_json(os.path.join(out_dir, MANIFEST), m)
                return u
    return None


def complete(out_dir: str, unit_id: int, episodes: list[dict], shards: list[dict]) -> None:
    with _locked(out_dir):
        m = _read(out_dir)
        u = m["units"][unit_id]
        if u.get("lease", {}).get("pid") != os.getpid():
            raise ShardError(f"unit {unit_id} was taken over by another process while this one wrote it")
        u.update(state="done", index=episodes, shards=shards)
        u.pop("lease", None)
        _atomic_json(os.path.join(out_dir, MANIFEST), m)


def work(out_dir: str, codec: FrameCodec, read_episode: Callable[[str], tuple[dict, set]],
         lease_s: float = 3600.0) -> int:
    """Lease and convert units until none is left; returns how many this process converted."""
    done = 0
    while (unit := lease(out_dir, lease_s)) is not None:
        w = ShardWriter(out_dir, codec, {}, shard_bytes=2**62, shard_prefix=f"unit-{unit['id']:06d}")
        try:
            for name in unit["episodes"]:
                fields, compressed = read_episode(name)
                w.add_episode(name, fields, compressed)
            episodes, shards = w.finish_shards()
        except BaseException:
            w.abort()
            raise
        complete(out_dir, unit["id"], episodes, shards)
        done += 1
    return done


def finish(out_dir: str, codec: FrameCodec, metadata: Mapping, source: Mapping) -> bool:
    """Publish index.json/dataset.json if every unit is done; returns whether it did."""
    with _locked(out_dir):
        m = _read(out_dir)
        if any(u["state"] != "done" for u in m["units"]):
            return False
        episodes = [e for u in m["units"] for e in u["index"]]
        shards = [s for u in m["units"] for s in u["shards"]]
        publish(out_dir, episodes, shards, codec, metadata, source)
        return True


def unit_bytes(total_bytes: int, target_bytes: int, num_workers: int) -> int:
    """Source bytes per work unit: about ``target_bytes`` (one shard each), but small enough that every worker
    of a parallel conversion gets several units (a dataset smaller than ``4 x num_workers`` shards is split into
    smaller shards rather than converted by one worker while the others wait)."""
    if num_workers <= 1:
        return target_bytes
    return max(1, min(target_bytes, -(-total_bytes // (4 * num_workers))))


def units_by_size(names: Iterable[str], sizes: Mapping[str, int], target_bytes: int) -> list[list[str]]:
    """Consecutive episodes grouped into units of about ``target_bytes`` (one shard each)."""
    units, cur, acc = [], [], 0
    for n in names:
        if cur and acc + sizes[n] > target_bytes:
            units.append(cur)
            cur, acc = [], 0
        cur.append(n)
        acc += sizes[n]
    if cur:
        units.append(cur)
    return units


def run(out_dir: str, worker: Callable, args: tuple, num_workers: int, codec: FrameCodec, metadata: Mapping,
        source: Mapping, desc: str, progress: bool = True) -> int:
    """Convert every planned unit with ``worker(args)`` (which calls :func:`work`) in this process or in
    ``num_workers`` spawned ones, with a progress bar over units, then publish; returns the number of units.
    Spawned, not forked: workers open decoders and HDF5 files of their own."""
    total = len(_read(out_dir)["units"])
    bar = tqdm(total=total, desc=desc, unit="shard", disable=not progress)
    if num_workers <= 1:
        worker(args)
    else:
        with mp.get_context("spawn").Pool(num_workers) as pool:
            pending = pool.map_async(worker, [args] * num_workers)
            while not pending.ready():
                bar.n = sum(u["state"] == "done" for u in _read(out_dir)["units"])
                bar.refresh()
                time.sleep(0.5)
            pending.get()  # re-raise a worker's error
    bar.n = total
    bar.close()
    if not finish(out_dir, codec, metadata, source):
        raise ShardError(f"{out_dir}: some units are not done yet (leased by another process, or a worker failed); "
                         "run the same command again to finish once it ends or its lease expires")
    return total
