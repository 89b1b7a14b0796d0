"""Camera frames at rest channels last against channels first: sizes of shards and compressed caches, and the read
throughput of the transposing copy that serves them channels first again (``storage.frame_layout``; docs/scale.md).

``python benchmarks/frame_layout.py OUT.json [WORKDIR]``: on the LeRobot Lift renders of ``../shared/data`` (84x84,
2 cameras, AV1) and on a small camera-like 480p LeRobot dataset written here (``sample_data.camera``, AV1 with
LeRobot's defaults, the content of the L480 workload): each converted into robo-shards and built into a compressed
cache (the default codec, Blosc2 LZ4HC level 5) channels last (now) and channels first (before), their frames'
bytes and ratios; on the robomimic Lift file (served (H, W, C)), what its frames pack at as stored and channels
first. Then the read: every frame of each dataset's first episode decoded into a (N, C, H, W) batch, stored channels
first (decompressed straight into the batch) against channels last (into a scratch of a few frames, then split into
the batch's planes by OpenCV, and by numpy's strided copy where OpenCV is absent), in order and as shuffled windows
of 2 frames; and a compressed_cache batch of 64 windows of 2 frames gathered from each store (checksums included);
best of 25 interleaved passes, one thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "data")


@contextlib.contextmanager
def channels_first():
    """What robo-loaders wrote before: frames as served, robo-shards version 3, store format 2."""
    from robo_loaders_plugin.backends.compressed_cache import episode_store as store
    from robo_loaders_plugin.backends.compressed_cache.store import CompressedStore
    from robo_loaders_plugin.storage import frame_layout
    from robo_loaders_plugin.storage.shards import writer

    saved = frame_layout.stored_layout, writer.VERSION, store.FORMAT_VERSION, CompressedStore.kind
    frame_layout.stored_layout = lambda shape: None
    writer.VERSION, store.FORMAT_VERSION, CompressedStore.kind = 3, 2, "compressed-cache-2"
    try:
        yield
    finally:
        frame_layout.stored_layout, writer.VERSION, store.FORMAT_VERSION, CompressedStore.kind = saved


def frame_members(out_dir: str) -> tuple[int, int]:
    """(decoded bytes, stored bytes) of every frames field of a robo-shards directory (index.json and headers)."""
    import math

    from robo_loaders_plugin.storage.shards import ShardReader
    from robo_loaders_plugin.storage.shards.format import part_member

    reader = ShardReader(out_dir)
    decoded = stored = 0
    for i, ep in enumerate(reader.episodes):
        header, _ = reader.read_episode(i, fields=[])
        for desc in header["fields"].values():
            if desc["kind"] == "frames":
                parts = desc.get("parts")
                names = (
                    [desc["member"]]
                    if parts is None
                    else [part_member(desc["member"], k) for k in range(len(parts) - 1)]
                )
                stored += sum(ep["members"][n]["size"] for n in names)
                decoded += math.prod(desc["shape"]) * np.dtype(desc["dtype"]).itemsize
    return decoded, stored


def shard_bytes(out_dir: str) -> int:
    return sum(os.path.getsize(os.path.join(out_dir, "shards", n)) for n in os.listdir(os.path.join(out_dir, "shards")))


def lerobot_sizes(root: str, work: str) -> dict:
    """Shards and compressed store of ``root``, channels last and channels first."""
    from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore, StoreWriter
    from robo_loaders_plugin.lerobot.convert import convert_lerobot
    from robo_loaders_plugin.sources.lerobot_v3 import LeRobotEpisodes, LeRobotV3
    from robo_loaders_plugin.storage.codec import FrameCodec
    from robo_loaders_plugin.storage.frame_layout import sampled_ratio

    out = {}
    source = LeRobotV3(root)
    episodes = LeRobotEpisodes(source, 1e-4)
    out["sampled_ratio"] = round(sampled_ratio(source.sample_frames(), FrameCodec()), 3)
    for name, ctx in (("channels_last", contextlib.nullcontext), ("channels_first", channels_first)):
        with ctx():
            shards = os.path.join(work, f"shards_{name}")
            shutil.rmtree(shards, ignore_errors=True)
            t = time.perf_counter()
            convert_lerobot(root, shards, progress=False)
            convert_s = time.perf_counter() - t
            path = os.path.join(work, f"store_{name}.rlc")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            w = StoreWriter(path, FrameCodec(), workers=1)
            for ep, _, _ in episodes.runs:
                w.add_episode(f"episode_{ep}", *episodes.read(ep))
            w.finish({})
            stats = EpisodeStore(path).stats
        decoded, stored = frame_members(shards)
        out[name] = {
            "shards_bytes": shard_bytes(shards),
            "shards_frames_ratio": round(decoded / stored, 3),
            "convert_s": round(convert_s, 1),
            "store_bytes": os.path.getsize(path),
            "store_frames_ratio": round(stats["decoded_frame_nbytes"] / stats["compressed_nbytes"], 3),
        }
    last, first = out["channels_last"], out["channels_first"]
    out["decoded_frame_bytes"] = decoded
    out["shards_smaller"] = round(1 - last["shards_bytes"] / first["shards_bytes"], 3)
    out["store_smaller"] = round(1 - last["store_bytes"] / first["store_bytes"], 3)
    return out


def robomimic_ratio(path: str) -> dict:
    """What the robomimic file's frames (served (H, W, C)) pack at as stored, and channels first."""
    import h5py

    from robo_loaders_plugin.storage.codec import FrameCodec

    codec = FrameCodec()
    raw = hwc = chw = 0
    with h5py.File(path, "r") as f:
        for demo in f["data"]:
            for key in ("agentview_image", "robot0_eye_in_hand_image"):
                for frame in f[f"data/{demo}/obs/{key}"][()]:
                    raw += frame.nbytes
                    hwc += len(codec.compress(frame))
                    chw += len(codec.compress(frame.transpose(2, 0, 1)))
    return {"frames_bytes": raw, "ratio_as_served_hwc": round(raw / hwc, 3), "ratio_chw": round(raw / chw, 3)}


def read_throughput(shards_last: str, shards_first: str, reps: int = 25) -> dict:
    """Frames served per second from each layout (the first episode's first camera, decoded into a batch): the
    whole episode in order, and windows of 2 frames at shuffled starts (a diffusion policy's batch), each in one
    call, as the frame sources decode a batch's frames of one episode. The cases alternate within each repetition
    and the best of ``reps`` is kept (a shared machine)."""
    from robo_loaders_plugin.storage import frame_layout
    from robo_loaders_plugin.storage.codec import use_single_thread
    from robo_loaders_plugin.storage.shards import ShardReader

    use_single_thread()
    opencv = frame_layout._cv2()
    cases = {}
    for name, directory, cv2 in (
        ("channels_first", shards_first, opencv),
        ("channels_last_opencv", shards_last, opencv),
        ("channels_last_numpy", shards_last, None),
    ):
        reader = ShardReader(directory)
        cams = [k for k, kind in reader.stored_fields(0).items() if kind == "frames"]
        enc = reader.read_episode(0, decode_frames=False, fields=cams[:1])[1][cams[0]]
        cases[name] = (enc, np.empty(enc.shape, enc.dtype), cv2)
    best = {(name, how): float("inf") for name in cases for how in ("episode", "windows_of_2")}
    for _ in range(reps):
        for name, (enc, batch, cv2) in cases.items():
            frame_layout._CV2[:] = [cv2]
            n = len(enc)
            whole = _timed(lambda: enc.decode_into(range(n), batch))  # noqa: B023
            # windows of 2 frames at shuffled starts, as a batch of a diffusion policy reads one episode's frames
            # (frames.episodes: one call per episode, each window into its two rows)
            starts = np.random.default_rng(0).permutation(n - 1)[: n // 2]
            idx = np.stack([starts, starts + 1], 1).reshape(-1).tolist()
            pairs = _timed(lambda: enc.decode_into(idx, batch, range(len(idx))))  # noqa: B023
            best[name, "episode"] = min(best[name, "episode"], whole / n)
            best[name, "windows_of_2"] = min(best[name, "windows_of_2"], pairs / len(idx))
    frame_layout._CV2[:] = [opencv]
    want = cases["channels_first"][1]
    out = {}
    for name, (enc, batch, _) in cases.items():
        assert batch.tobytes() == want.tobytes(), f"{name}: other bytes than channels first"
        out[name] = {
            "frames": len(enc),
            "frame_shape": list(enc.shape[1:]),
            **{f"us_per_frame_{how}": round(best[name, how] * 1e6, 1) for how in ("episode", "windows_of_2")},
            "served_mb_s_episode": round(batch[0].nbytes / best[name, "episode"] / 1e6),
        }
    return out


def store_batch_read(store_last: str, store_first: str, reps: int = 25, batch: int = 64) -> dict:
    """A compressed_cache batch of ``batch`` windows of 2 steps of the first camera, gathered from each store
    (``backends.compressed_cache.frames.CompressedFrames``: checksums and padding included), µs per frame served;
    best of ``reps`` interleaved."""
    from robo_loaders_plugin.backends.compressed_cache.episode_store import EpisodeStore
    from robo_loaders_plugin.backends.compressed_cache.frames import CompressedFrames
    from robo_loaders_plugin.storage import frame_layout

    opencv = frame_layout._cv2()
    with channels_first():  # a store of format 2, opened as the code before it opened it
        before = EpisodeStore(store_first)
    sources = {
        "channels_first": (CompressedFrames(before), opencv),
        "channels_last_opencv": (CompressedFrames(EpisodeStore(store_last)), opencv),
        "channels_last_numpy": (CompressedFrames(EpisodeStore(store_last)), None),
    }
    frames, _ = next(iter(sources.values()))
    cam = next(k for k, d in frames.store.episodes[0]["fields"].items() if d["kind"] == "frames")
    rng = np.random.default_rng(1)
    episodes = rng.integers(0, len(frames.lengths), batch)
    first = (rng.random(batch) * (frames.lengths[episodes] - 1)).astype(np.int64)
    steps = np.stack([first, first + 1], 1)
    best, got = dict.fromkeys(sources, float("inf")), {}
    for _ in range(reps):
        for name, (source, cv2) in sources.items():
            frame_layout._CV2[:] = [cv2]
            t = time.perf_counter()
            got[name] = source.gather(cam, episodes, steps)
            best[name] = min(best[name], (time.perf_counter() - t) / steps.size)
    frame_layout._CV2[:] = [opencv]
    assert all(v.tobytes() == got["channels_first"].tobytes() for v in got.values()), "other bytes"
    return {name: round(v * 1e6, 1) for name, v in best.items()}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def camera_480p(root: str) -> str:
    """The camera-like 480p dataset (written once per WORKDIR)."""
    from robo_loaders_plugin.sample_data.lerobot_v3 import write_lerobot_dataset

    if os.path.exists(os.path.join(root, "meta", "info.json")):
        return root

    return str(
        write_lerobot_dataset(
            root,
            episode_lengths=(40, 40),
            cameras=1,
            image_size=(480, 640),
            mode="av1",
            fps=30,
            content="camera",
            seed=7,
            progress=False,
        )
    )


def main(out_json: str, work: str | None = None) -> dict:
    work = work or tempfile.mkdtemp(prefix="frame_layout_")
    result: dict = {"codec": "lz4hc level 5 (the default)", "machine_cpus": os.cpu_count()}
    datasets = {"lift_84_renders": os.path.join(SHARED, "robosuite_lift_84_20demos_lerobot")}
    datasets["camera_480p_av1"] = camera_480p(os.path.join(work, "camera_480p"))
    for name, root in datasets.items():
        sub = os.path.join(work, name)
        os.makedirs(sub, exist_ok=True)
        result[name] = lerobot_sizes(root, sub)
        result[name]["read"] = read_throughput(
            os.path.join(sub, "shards_channels_last"), os.path.join(sub, "shards_channels_first")
        )
        result[name]["read_store_batch_64x2_us_per_frame"] = store_batch_read(
            os.path.join(sub, "store_channels_last.rlc"), os.path.join(sub, "store_channels_first.rlc")
        )
        print(name, json.dumps(result[name]), flush=True)
    result["robomimic_lift_84"] = robomimic_ratio(os.path.join(SHARED, "robosuite_lift_84_20demos.hdf5"))
    with open(out_json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["robomimic_lift_84"]))
    return result


if __name__ == "__main__":
    main(*sys.argv[1:3])
