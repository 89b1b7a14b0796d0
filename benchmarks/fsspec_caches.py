"""fsspec's own caches measured against the plugin's for remote LeRobot videos (docs/architecture.md, "Checks a tool
does": why ``sources/remote_blocks.py`` and ``sources/file_cache.py`` are not fsspec's block and file caches).

``python benchmarks/fsspec_caches.py ROOT [--block BYTES] [--threads N]``: ROOT is a local LeRobot v3 dataset
(``robo-loaders sample-data lerobot``), served over HTTP on 127.0.0.1 by the streaming tests' server
(``integration_tests/remote_servers.py``, which counts the bytes it sends). Prints one JSON document:

- ``blocks``: one pass decoding every episode of every camera, in shuffled order from N threads, each thread with its
  own decoder per file as ``video_stream`` decodes (``EpisodeVideoDecoder``), the files opened through (a) the
  plugin's block cache shared by every decoder (``BlockCache``/``BlockFile``), (b) fsspec's per-file block cache
  (``fs.open(..., cache_type="blockcache")``, one per decoder), (c) fsspec's ``blockcache::`` filesystem (blocks on
  local disk, shared): bytes served by the remote store per pass (two passes), seconds, and whether every frame
  equals the frame decoded from the local file.
- ``copies``: fsspec's ``filecache::`` (``check_files=True``: its strictest) against the plugin's ``FileCache``, each
  asked for a file again after (1) a byte of the local copy flipped, (2) the local copy truncated, (3) the remote
  file replaced by another of the same size; and (4) the mirror's layout (``same_names=True``, the only way fsspec
  keeps file names): ``data/chunk-000/file-000.parquet`` after ``meta/episodes/chunk-000/file-000.parquet``. Each
  says whether the right bytes came back.

``--copies-only`` skips the passes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _server():
    sys.path.insert(0, os.path.join(ROOT, "integration_tests"))
    from remote_servers import HttpServer

    return HttpServer


def _jobs(root: str) -> list[tuple[str, list[float]]]:
    """(video file relative to ROOT, the timestamps of one episode's frames in it), every episode and camera."""
    import glob

    import pandas as pd

    with open(os.path.join(root, "meta", "info.json")) as f:
        info = json.load(f)
    fps = info["fps"]
    keys = [k for k, v in info["features"].items() if v.get("dtype") == "video"]
    jobs = []
    for path in sorted(glob.glob(os.path.join(root, "meta", "episodes", "*", "*.parquet"))):
        for row in pd.read_parquet(path).to_dict("records"):
            for key in keys:
                video = info["video_path"].format(
                    video_key=key,
                    chunk_index=row[f"videos/{key}/chunk_index"],
                    file_index=row[f"videos/{key}/file_index"],
                )
                start = row[f"videos/{key}/from_timestamp"]
                jobs.append((video, [start + i / fps for i in range(int(row["length"]))]))
    return jobs


def _decode_pass(jobs, open_file, threads: int, seed: int, reference=None) -> tuple[dict, bool]:
    """Decode every job from ``threads`` threads (a decoder per file and thread, kept across episodes)."""
    from torchcodec.decoders import VideoDecoder

    order = list(range(len(jobs)))
    random.Random(seed).shuffle(order)
    local, out, lock, errors = threading.local(), {}, threading.Lock(), []

    def work(share):
        try:
            decoders = local.__dict__.setdefault("decoders", {})
            for j in share:
                video, seconds = jobs[j]
                if video not in decoders:
                    decoders[video] = VideoDecoder(open_file(video), seek_mode="approximate")
                frames = decoders[video].get_frames_played_at(seconds=seconds).data.numpy()
                with lock:
                    out[j] = frames
        except Exception as exc:  # noqa: BLE001 - reported in the result
            errors.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=work, args=(order[t::threads],)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    same = not errors and reference is not None and all((out[j] == reference[j]).all() for j in reference)
    return {"errors": errors[:1]}, same if reference is not None else out


def blocks(root: str, block: int, threads: int) -> dict:
    import fsspec

    from robo_loaders_plugin.sources.remote_blocks import BlockCache, BlockFile

    jobs = _jobs(root)
    reference = _decode_pass(jobs, lambda v: os.path.join(root, v), 1, 0)[1]
    videos = sorted({v for v, _ in jobs})
    result = {
        "video_files": len(videos),
        "video_bytes": sum(os.path.getsize(os.path.join(root, v)) for v in videos),
        "episodes_x_cameras": len(jobs),
        "block": block,
        "threads": threads,
    }
    with _server()(root) as server:
        http = fsspec.filesystem("http", skip_instance_cache=True)
        with tempfile.TemporaryDirectory() as disk:
            shared = BlockCache(http, block=block)
            caching = fsspec.filesystem(
                "blockcache", target_protocol="http", cache_storage=disk, skip_instance_cache=True
            )
            variants = {
                "plugin BlockCache (shared)": lambda v: BlockFile(shared, f"{server.url}/{v}"),
                "fsspec open(cache_type='blockcache')": lambda v: http.open(
                    f"{server.url}/{v}", "rb", block_size=block, cache_type="blockcache"
                ),
                "fsspec blockcache:: (local disk)": lambda v: caching.open(f"{server.url}/{v}", "rb", block_size=block),
            }
            for name, open_file in variants.items():
                passes = []
                for p in range(2):
                    server.served.clear()
                    started = time.perf_counter()
                    status, same = _decode_pass(jobs, open_file, threads, seed=p + 1, reference=reference)
                    passes.append(
                        {
                            "served_bytes": sum(server.served.values()),
                            "seconds": round(time.perf_counter() - started, 2),
                            "frames_equal_local": bool(same),
                            **status,
                        }
                    )
                result[name] = passes
    return result


def copies(root: str) -> dict:
    import fsspec

    from robo_loaders_plugin.sources.file_cache import FileCache

    rel = "meta/episodes/chunk-000/file-000.parquet"
    other = "data/chunk-000/file-000.parquet"
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        served = os.path.join(tmp, "served")
        shutil.copytree(root, served)
        truth = {r: open(os.path.join(served, r), "rb").read() for r in (rel, other)}
        with _server()(served) as server:
            url = f"{server.url}/{rel}"
            http = fsspec.filesystem("http", skip_instance_cache=True)

            def fsspec_get(storage, same_names=False, path=url):
                fs = fsspec.filesystem(  # a new instance each time, as a new process
                    "filecache",
                    target_protocol="http",
                    cache_storage=storage,
                    check_files=True,
                    same_names=same_names,
                    skip_instance_cache=True,
                )
                with fs.open(path, "rb") as f:
                    return f.read(), fs

            def plugin_get(storage, path=url):
                cache = FileCache(http, storage, log=lambda line: None)
                with open(cache.get(path), "rb") as f:
                    return f.read(), cache

            for who in ("fsspec filecache:: check_files=True", "plugin FileCache"):
                storage = os.path.join(tmp, who.split()[0])
                get = fsspec_get if who.startswith("fsspec") else plugin_get
                with open(os.path.join(served, rel), "wb") as f:  # the remote file as at the start
                    f.write(truth[rel])
                data, handle = get(storage)
                local = (
                    handle._check_file(handle._strip_protocol(url))[1]
                    if who.startswith("fsspec")
                    else handle.local_path(url)
                )
                checks = {"first read right": data == truth[rel]}
                copy = bytearray(open(local, "rb").read())
                copy[len(copy) // 2] ^= 0x01
                open(local, "wb").write(bytes(copy))
                checks["a byte of the local copy flipped: served right"] = get(storage)[0] == truth[rel]
                get(storage)  # whatever it did, read once more so the copy is whole again (plugin: it is)
                open(local, "r+b").truncate(len(truth[rel]) // 2)
                checks["the local copy truncated: served right"] = get(storage)[0] == truth[rel]
                replaced = bytes(b ^ 0xFF for b in truth[rel])  # same size, other bytes
                os.utime(os.path.join(served, rel), (time.time() + 5, time.time() + 5))
                with open(os.path.join(served, rel), "wb") as f:
                    f.write(replaced)
                os.utime(os.path.join(served, rel), (time.time() + 10, time.time() + 10))
                checks["the remote file replaced (same size): served the new one"] = get(storage)[0] == replaced
                out[who] = checks
            storage = os.path.join(tmp, "same_names")
            with open(os.path.join(served, rel), "wb") as f:
                f.write(truth[rel])
            fsspec_get(storage, True, f"{server.url}/{rel}")
            data, _ = fsspec_get(storage, True, f"{server.url}/{other}")
            again, _ = fsspec_get(storage, True, f"{server.url}/{rel}")
            out["fsspec filecache:: same_names=True"] = {
                f"{other} after {rel}: served right": data == truth[other],
                f"{rel} again: served right": again == truth[rel],
                "copies kept under their dataset paths (a LeRobot root)": os.path.exists(os.path.join(storage, rel)),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--block", type=int, default=256 * 1024)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--copies-only", action="store_true")
    a = parser.parse_args()
    out = {} if a.copies_only else {"blocks": blocks(a.root, a.block, a.threads)}
    print(json.dumps({**out, "copies": copies(a.root)}, indent=1))


if __name__ == "__main__":
    main()
