"""``python -m benchmarks.harness decode``: video_stream's decoder alone, on the CPU and with NVDEC, in one run.

Why apart from ``bench lerobot``: there decoding runs ahead in threads and is hidden as long as it keeps up with
training, so a faster decoder shows up only when decoding is the bottleneck. Here every episode's segment of every
camera is decoded the way video_stream decodes it (``sources.lerobot_v3.EpisodeVideoDecoder``: one sequential
``get_frames_at`` per episode, ``threads`` episodes at a time, each thread with its own decoders), and the result is
frames/s per device, the ratio to the CPU measured in the same run, and how far NVDEC frames are from CPU ones
(PSNR). A device that cannot run is a row that says why (no GPU; NVDEC of this GPU cannot decode the codec, the
refusal video_stream gives before training), never a number.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import click
from tabulate import tabulate

from robo_loaders_plugin.bench.report import machine
from robo_loaders_plugin.core.files import atomic_write_json
from robo_loaders_plugin.lerobot.convert import DEFAULT_TOLERANCE_S

DEVICES = ("cpu", "cuda")
PSNR_EPISODES = 5  # episodes whose NVDEC frames are compared with the CPU decode


def _decode_all(episodes, device: str, threads: int, keep: set[int]) -> tuple[dict, float, int, list]:
    """Decode every episode of every camera on ``device``: (frames kept for ``keep``, seconds, frames, fallbacks)."""
    import torch

    from robo_loaders_plugin.sources.lerobot_v3 import EpisodeVideoDecoder

    frames = EpisodeVideoDecoder(episodes.source, episodes.tolerance_s, device)
    keys = list(episodes.source.video_keys)

    def one(ep_rows):
        ep, s, e = ep_rows
        out, n = {}, 0
        for key in keys:
            decoded = frames.episode(ep, key, episodes.arrays["timestamp"][s:e])
            n += len(decoded)
            if ep in keep:
                out[(ep, key)] = decoded.cpu().numpy() if device != "cpu" else decoded
        if device != "cpu":
            torch.cuda.synchronize()
        return out, n

    kept, total = {}, 0
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for out, n in pool.map(one, episodes.runs):
            kept.update(out)
            total += n
    return kept, time.perf_counter() - start, total, sorted(frames.fallbacks)


def bench_decode(
    root: str, devices: list[str], threads: int, max_episodes: int | None, json_out: str | None, echo=print
) -> dict:
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3
    from robo_loaders_plugin.sources.nvdec import nvdec_unusable, video_codecs
    from robo_loaders_plugin.storage.video import psnr

    source = LeRobotV3(root)
    if not source.video_keys:
        raise click.UsageError(f"{root} has no video features: nothing to decode")
    chosen = sorted(source.episodes)[:max_episodes] if max_episodes else None
    episodes = LeRobotEpisodes(source, DEFAULT_TOLERANCE_S, chosen)
    codecs = video_codecs(source)
    keep = {ep for ep, _, _ in episodes.runs[:PSNR_EPISODES]}
    rows, reference = [], None
    for device in devices:
        why = None if device == "cpu" else nvdec_unusable(source)  # video_stream's own reason
        if why:
            echo(f"[bench] {device}: not measured: {why}")
            rows.append({"device": device, "not_measured": why})
            continue
        echo(
            f"[bench] decoding {len(episodes.runs)} episodes x {len(codecs)} camera(s) on {device} "
            f"({threads} thread(s)) ..."
        )
        _decode_all(episodes, device, threads, set())  # warm-up: opens files, loads codec libraries and the GPU
        kept, seconds, n, fallbacks = _decode_all(episodes, device, threads, keep)
        row = {
            "device": device,
            "frames": n,
            "seconds": round(seconds, 3),
            "frames_per_s": round(n / seconds, 1),
            "cpu_fallback": fallbacks,
        }
        if reference is None and device == "cpu":
            reference = kept
        elif reference is not None:  # every later row against the CPU decode (a second cpu row: identical)
            row["psnr_db_vs_cpu"] = {
                k: round(min(psnr(reference[(ep, k)], kept[(ep, k)]) for ep in sorted(keep)), 2) for k in codecs
            }
        rows.append(row)
    cpu = next((r for r in rows if r["device"] == "cpu" and "frames_per_s" in r), None)
    for r in rows:
        if cpu and "frames_per_s" in r:
            r["frames_per_s_vs_cpu"] = round(r["frames_per_s"] / cpu["frames_per_s"], 3)
    payload = {
        "dataset": os.path.basename(os.path.abspath(root)),
        "codecs": codecs,
        "episodes": len(episodes.runs),
        "threads": threads,
        "machine": machine(),
        "results": rows,
    }
    echo(
        tabulate(
            [
                [
                    r["device"],
                    r.get("frames", "-"),
                    r.get("frames_per_s", "-"),
                    r.get("frames_per_s_vs_cpu", "-"),
                    ", ".join(f"{k}: {v}" for k, v in r.get("psnr_db_vs_cpu", {}).items()) or "-",
                    r.get("not_measured")
                    or ("CPU fallback: " + ", ".join(r["cpu_fallback"]) if r["cpu_fallback"] else ""),
                ]
                for r in rows
            ],
            headers=["device", "frames", "frames/s", "vs cpu", "PSNR vs cpu (dB, worst episode)", "note"],
        )
    )
    if json_out:
        atomic_write_json(json_out, payload, indent=2)
        echo(f"[bench] wrote {json_out}")
    return payload


@click.command("decode")
@click.option("--root", required=True, type=click.Path(exists=True, file_okay=False), help="a LeRobot v3 dataset")
@click.option(
    "--devices",
    default="cpu,cuda",
    show_default=True,
    help="comma-separated, from cpu and cuda (NVDEC); cuda is a row saying why where it cannot run",
)
@click.option(
    "--threads",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="episodes decoded at once (video_stream's decode_threads)",
)
@click.option(
    "--episodes",
    "max_episodes",
    default=None,
    type=click.IntRange(min=1),
    help="decode only the first N episodes (default: all)",
)
@click.option("--json", "json_out", type=click.Path(dir_okay=False))
def decode_cmd(root, devices, threads, max_episodes, json_out):
    """Decode frames/s of video_stream's decoder on the CPU and with NVDEC, and NVDEC's PSNR against the CPU."""
    chosen = [d.strip() for d in devices.split(",") if d.strip()]
    unknown = sorted(set(chosen) - set(DEVICES))
    if unknown or not chosen:
        raise click.BadParameter(f"{', '.join(unknown) or '(none)'}: devices are cpu and cuda", param_hint="--devices")
    bench_decode(root, chosen, threads, max_episodes, json_out, echo=click.echo)
