"""Write a LeRobot v3 dataset offline with LeRobot's own writer (``LeRobotDataset.create/add_frame/save_episode/
finalize``), so tests and benchmarks read exactly what LeRobot writes: AV1 (LeRobot's default) or H.264 video,
or PNG images stored in the parquet files."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

TASKS = ("lift the red cube", "push the blue block to the left")
MODES = {"av1": "libsvtav1", "h264": "h264", "png": None}


def _frame(t: float, ep: int, cam: int, h: int, w: int, yy, xx) -> np.ndarray:
    """Smooth procedural HWC uint8 image: drifting gradients and a moving soft blob."""
    ph = 0.7 * ep + 1.3 * cam
    r = 0.5 + 0.5 * np.sin(2 * np.pi * (xx + 0.15 * t) + ph)
    g = 0.5 + 0.5 * np.cos(2 * np.pi * (yy - 0.10 * t) + 0.5 * ph)
    cx, cy = 0.5 + 0.3 * np.sin(0.8 * t + ph), 0.5 + 0.3 * np.cos(0.6 * t + ph)
    b = np.exp(-(((xx - cx) ** 2 + (yy - cy) ** 2) / 0.02))
    img = np.stack([r, g, 0.3 * (r + g) / 2 + 0.7 * b], axis=-1)
    return (img * 255.0 + 0.5).clip(0, 255).astype(np.uint8)


def write_lerobot_dataset(root, *, repo_id: str = "local/sample", episode_lengths=(30, 45, 22, 50, 37),
                          cameras: int = 1, image_size=(32, 48), mode: str = "av1", fps: int = 20, seed: int = 0,
                          video_files_size_in_mb: float | None = None, overwrite: bool = False,
                          progress: bool = True) -> Path:
    """Create the dataset at ``root``; load it with ``LeRobotDataset(repo_id, root=root)``.

    ``video_files_size_in_mb`` small (e.g. 0.01) forces several mp4 files; by default LeRobot concatenates all
    episodes of a camera into one file, each episode at its own ``from_timestamp``.
    """
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    root = Path(root)
    if root.exists():
        if not overwrite:
            raise FileExistsError(f"{root} exists (pass overwrite=True to replace it)")
        shutil.rmtree(root)
    os.makedirs(root.parent, exist_ok=True)
    h, w = image_size
    feats = {"observation.state": {"dtype": "float32", "shape": (6,), "names": [f"s{i}" for i in range(6)]},
             "action": {"dtype": "float32", "shape": (4,), "names": [f"a{i}" for i in range(4)]}}
    for c in range(cameras):
        feats[f"observation.images.cam{c}"] = {"dtype": "image" if mode == "png" else "video", "shape": (h, w, 3),
                                               "names": ["height", "width", "channels"]}
    rgb = RGBEncoderConfig(vcodec=MODES[mode]) if MODES[mode] else None
    ds = LeRobotDataset.create(repo_id, fps, feats, root=root, use_videos=mode != "png", rgb_encoder=rgb,
                               video_files_size_in_mb=video_files_size_in_mb)
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.linspace(0, 1, h, dtype=np.float32), np.linspace(0, 1, w, dtype=np.float32),
                         indexing="ij")
    for ep, n in enumerate(tqdm(episode_lengths, desc=f"sample-data {root.name}", unit="episode",
                                disable=not progress)):
        off = rng.normal(size=6).astype(np.float32)
        for i in range(n):
            t = i / fps
            frame = {"observation.state": (np.sin(t * np.arange(1, 7) + off)
                                           + 0.01 * rng.normal(size=6)).astype(np.float32),
                     "action": np.cos(t * np.arange(1, 5) + off[:4]).astype(np.float32),
                     "task": TASKS[ep % len(TASKS)]}
            for c in range(cameras):
                frame[f"observation.images.cam{c}"] = _frame(t, ep, c, h, w, yy, xx)
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return root
