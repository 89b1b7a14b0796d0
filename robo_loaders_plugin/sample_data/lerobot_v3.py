"""Write a LeRobot v3 dataset offline with LeRobot's own writer (``LeRobotDataset.create/add_frame/save_episode/
finalize``), so tests and benchmarks read exactly what LeRobot writes: AV1 (LeRobot's default) or H.264 video,
or PNG images stored in the parquet files. Frames are the same procedural scenes as the robomimic sample data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.core.sched import keeps_scheduling
from robo_loaders_plugin.sample_data.outputs import replacing_dir
from robo_loaders_plugin.sample_data.robomimic_hdf5 import CONTENTS, renderer, smooth_path

TASKS = ("lift the red cube", "push the blue block to the left")
MODES = {"av1": "libsvtav1", "h264": "h264", "png": None}
# SVT-AV1 (as LeRobot's writer and PyAV 15 run it) kills the process with SIGFPE on frames 24 pixels wide or
# narrower (26 and 28 encode), and refuses frames 2 pixels high: the smallest sizes measured to encode
MIN_AV1_WIDTH, MIN_AV1_HEIGHT = 32, 8


def check_image_size(image_size, mode: str) -> None:
    """Refuse a frame size the encoder of ``mode`` cannot take, before anything is written: SVT-AV1 would crash the
    whole process (no Python error, no message) on frames this narrow.

    Args:
        image_size: ``(height, width)`` of the frames.
        mode: ``av1``, ``h264`` or ``png``.

    Raises:
        ValueError: a size below 1 pixel, or AV1 frames smaller than :data:`MIN_AV1_HEIGHT` x :data:`MIN_AV1_WIDTH`.
    """
    h, w = (int(v) for v in image_size)
    if h < 1 or w < 1:
        raise ValueError(f"image size {h}x{w}: frames need at least 1 pixel each way")
    if mode == "av1" and (w < MIN_AV1_WIDTH or h < MIN_AV1_HEIGHT):
        raise ValueError(
            f"image size {h}x{w} (height x width): AV1 (SVT-AV1) crashes the process on frames narrower than about "
            f"26 pixels; give at least {MIN_AV1_HEIGHT}x{MIN_AV1_WIDTH}, or codec h264"
        )


@keeps_scheduling
def write_lerobot_dataset(
    root,
    *,
    repo_id: str = "local/sample",
    episode_lengths=(30, 45, 22, 50, 37),
    cameras: int = 1,
    image_size=(32, 48),
    mode: str = "av1",
    fps: int = 20,
    seed: int = 0,
    video_files_size_in_mb: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
    actions_from_state: bool = False,
    scenes: int | None = None,
    content: str = "renders",
    noise: float = 1.0,
    streaming_encoding: bool = False,
    state_dim: int = 6,
    action_dim: int = 4,
) -> Path:
    """Create the dataset at ``root`` with LeRobot's own writer, so tests and benchmarks read exactly what LeRobot
    writes; load it with ``LeRobotDataset(repo_id, root=root)``.

    Args:
        root: The dataset root (must not exist unless ``overwrite``).
        repo_id: The repo id recorded.
        episode_lengths: Frames of each episode.
        cameras: Cameras (``observation.images.cam<i>``; 0: state and actions only).
        image_size: (height, width) of the frames.
        mode: ``av1`` (LeRobot's default) or ``h264`` video, or ``png`` images in the parquet files.
        fps: The frame rate recorded.
        seed: Seed of the random generator.
        video_files_size_in_mb: LeRobot's limit of a video file, in MB; small (e.g. 0.01) forces several mp4
            files (``None``: LeRobot's default, all episodes of a camera in one file, each at its own
            ``from_timestamp``).
        overwrite: Replace an existing ``root``.
        progress: Show a progress bar.
        actions_from_state: Each action is a fixed function of the same frame's state, so that a policy learns it
            within a few epochs (loss tests need a policy whose results depend on the data it was given).
        scenes: Camera frames from this many distinct rendered scenes, reused by episode (see
            :func:`episode_contents`; ``None``: one per episode); the content
            :func:`~robo_loaders_plugin.sample_data.lerobot_fast.write_lerobot_fast` writes the same way, faster.
        content: ``renders`` (simulator-like frames) or ``camera`` (camera-like: texture, shake, sensor noise;
            ``sample_data.camera``).
        noise: Sensor noise of ``camera`` content, sigma in grey levels.
        streaming_encoding: LeRobot encodes each frame as it is added (its ``streaming_encoding``) instead of
            writing PNG files first and encoding them at ``save_episode``: the same encoder and settings, without
            1 MB of PNG per 480p frame on disk (what makes large datasets practical to generate). Ignored for
            ``png``.
        state_dim: Entries of ``observation.state`` (the content's 6 repeated or cut: robots of other sizes).
        action_dim: Entries of ``action`` (the content's 4 repeated or cut).

    Returns:
        ``root``, as a ``Path``.

    Raises:
        ValueError: an unknown ``mode`` or ``content``, or a frame size its encoder cannot take
            (:func:`check_image_size`).
        FileExistsError: ``root`` exists and ``overwrite`` is false.
    """
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    check_image_size(image_size, mode)
    if content not in CONTENTS:
        raise ValueError(f"content must be one of {CONTENTS}, got {content!r}")
    final = Path(root)
    with replacing_dir(final, overwrite) as root:
        h, w = image_size
        feats = {
            "observation.state": {
                "dtype": "float32",
                "shape": (state_dim,),
                "names": [f"s{i}" for i in range(state_dim)],
            },
            "action": {"dtype": "float32", "shape": (action_dim,), "names": [f"a{i}" for i in range(action_dim)]},
        }
        for c in range(cameras):
            feats[f"observation.images.cam{c}"] = {
                "dtype": "image" if mode == "png" else "video",
                "shape": (h, w, 3),
                "names": ["height", "width", "channels"],
            }
        rgb = RGBEncoderConfig(vcodec=MODES[mode]) if MODES[mode] else None
        ds = LeRobotDataset.create(
            repo_id,
            fps,
            feats,
            root=root,
            use_videos=mode != "png",
            rgb_encoder=rgb,
            video_files_size_in_mb=video_files_size_in_mb,
            streaming_encoding=streaming_encoding and mode != "png",
            # LeRobot's streaming encoder drops a frame (with a warning) when its queue is full;
            # frames come from memory here, faster than AV1 encodes them at 480p: a queue that
            # holds a whole episode can never be full (save_episode waits for the encoder)
            encoder_queue_maxsize=max([30, *(int(n) for n in episode_lengths)]),
        )
        for content_ in tqdm(
            episode_contents(
                episode_lengths,
                cameras=cameras,
                image_size=(h, w),
                fps=fps,
                seed=seed,
                actions_from_state=actions_from_state,
                scenes=scenes,
                content=content,
                noise=noise,
            ),
            total=len(episode_lengths),
            desc=f"sample-data {final.name}",
            unit="episode",
            disable=not progress,
        ):
            for i in range(content_.length):
                frame = {
                    "observation.state": np.resize(content_.state[i], state_dim),
                    "action": np.resize(content_.action[i], action_dim),
                    "task": content_.task,
                }
                for c, frames in enumerate(content_.frames):
                    frame[f"observation.images.cam{c}"] = frames[i]  # HWC uint8
                ds.add_frame(frame)
            ds.save_episode()
        ds.finalize()
    return final


class EpisodeContent(NamedTuple):
    """One episode of the synthetic LeRobot sample data."""

    length: int
    task: str
    state: np.ndarray  # (n, 6) float32
    action: np.ndarray  # (n, 4) float32
    frames: list  # per camera, (n, h, w, 3) uint8
    scene: tuple | None  # (scene, length) when the frames are a reused scene's, else None


def episode_contents(
    episode_lengths,
    *,
    cameras: int,
    image_size,
    fps: int,
    seed: int,
    actions_from_state: bool = False,
    scenes: int | None = None,
    content: str = "renders",
    noise: float = 1.0,
) -> Iterator[EpisodeContent]:
    """The content of each episode, the same for every writer (LeRobot's and the fast one).

    ``scenes``: render only this many distinct scenes (episode ``e`` shows scene ``e % scenes``, its first ``n``
    frames) instead of one per episode. Why: rendering costs ~0.4 ms per 64x64 frame, minutes for a million
    frames, and a loader benchmark needs frames that decode like real ones, not a million distinct ones; states
    and actions stay distinct per episode either way (drawn exactly as without ``scenes``).

    Args:
        episode_lengths: Frames of each episode.
        cameras, image_size, fps, seed, actions_from_state: As ``write_lerobot_dataset``'s.
        scenes: Distinct rendered scenes (None: one per episode).
        content: "renders" (simulator-like) or "camera" (camera-like, ``sample_data.camera``).
        noise: Sensor noise of camera-like content, sigma in grey levels.

    Yields:
        One :class:`EpisodeContent` per episode, in order.
    """
    h, w = image_size
    rng = np.random.default_rng(seed)
    state_to_action = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    pool: dict = {}
    longest = max(episode_lengths) if len(episode_lengths) else 0
    for ep, n in enumerate(episode_lengths):
        n = int(n)
        off = rng.normal(size=6).astype(np.float32)
        cube = 0.5 + 0.2 * np.tanh(smooth_path(rng, n, 2, 0.6))
        alpha = np.clip(np.linspace(-0.2, 1.3, n), 0, 1)[:, None]
        grip = (1 - alpha) * rng.uniform(0.2, 0.8, size=2) + alpha * cube[-1]
        grip_open = np.clip(1.2 - 1.5 * np.linspace(0, 1, n), 0, 1)
        cams = [
            renderer(content, (h, w), c, np.random.default_rng(rng.integers(2**32)), noise, fps) for c in range(cameras)
        ]
        state = np.empty((n, 6), np.float32)
        action = np.empty((n, 4), np.float32)
        for i in range(n):  # frame by frame, as the data was always drawn (the same numbers)
            t = i / fps
            state[i] = (np.sin(t * np.arange(1, 7) + off) + 0.01 * rng.normal(size=6)).astype(np.float32)
            action[i] = (
                np.tanh(state_to_action @ state[i]) if actions_from_state else np.cos(t * np.arange(1, 5) + off[:4])
            ).astype(np.float32)
        if scenes:
            scene = ep % int(scenes)
            if scene not in pool:
                pool[scene] = _scene_frames(seed, scene, longest, cameras, (h, w), content, noise, fps)
            frames = [f[:n] for f in pool[scene]]
            key = (scene, n)
        else:
            frames = [
                np.stack([cam(i, cube[i], grip[i], grip_open[i]) for i in range(n)])
                if n
                else np.zeros((0, h, w, 3), np.uint8)
                for cam in cams
            ]
            key = None
        yield EpisodeContent(n, TASKS[ep % len(TASKS)], state, action, frames, key)


def _scene_frames(
    seed: int,
    scene: int,
    n: int,
    cameras: int,
    image_size,
    content: str = "renders",
    noise: float = 1.0,
    fps: float = 20.0,
) -> list:
    """The ``n`` frames of each camera of reused scene ``scene``."""
    rng = np.random.default_rng([seed, 1_000_003, scene])
    cube = 0.5 + 0.2 * np.tanh(smooth_path(rng, n, 2, 0.6))
    alpha = np.clip(np.linspace(-0.2, 1.3, n), 0, 1)[:, None]
    grip = (1 - alpha) * rng.uniform(0.2, 0.8, size=2) + alpha * cube[-1]
    grip_open = np.clip(1.2 - 1.5 * np.linspace(0, 1, n), 0, 1)
    out = []
    for c in range(cameras):
        cam = renderer(content, image_size, c, np.random.default_rng(rng.integers(2**32)), noise, fps)
        out.append(np.stack([cam(i, cube[i], grip[i], grip_open[i]) for i in range(n)]))
    return out


@keeps_scheduling
def check_cameras(hdf5_path, mode: str) -> None:
    """:func:`check_image_size` of each camera of a robomimic file (its first demo's uint8 (N, H, W, C) obs).

    Args:
        hdf5_path: The robomimic HDF5 file.
        mode: ``av1``, ``h264`` or ``png``.

    Raises:
        ValueError: a camera its encoder cannot take, naming the file and the key.
        SourceError: the file is no robomimic HDF5 (no HDF5, no ``data`` group, no demo, a first demo without
            ``obs``): h5py's traceback was shown (a reviewer's reproduction).
    """
    import h5py

    from robo_loaders_plugin.core.errors import SourceError
    from robo_loaders_plugin.sources.robomimic_hdf5 import open_hdf5, sorted_demos

    with open_hdf5(str(hdf5_path)) as f:
        if not isinstance(f.get("data"), h5py.Group):
            raise SourceError(f"{hdf5_path}: no 'data' group; this is not a robomimic dataset")
        others = [n for n in f["data"] if not (n.startswith("demo_") and n[5:].isdigit())]
        empty = [n for n in f["data"] if n not in others and int(f["data"][n].attrs.get("num_samples", 1)) < 1]
        if others or empty:  # the writer converts every demo under data/, in robomimic's order
            raise SourceError(
                f"{hdf5_path}: data/ holds {'groups that are no demo_<i> ' + str(others[:3]) if others else ''}"
                f"{' and ' if others and empty else ''}{'empty demos ' + str(empty[:3]) if empty else ''}; "
                "--from-robomimic writes every demo of the file: remove them from a copy"
            )
        demos = sorted_demos(list(f["data"]))
        if not demos or not isinstance(f["data"][demos[0]].get("obs"), h5py.Group):
            raise SourceError(f"{hdf5_path}: data/ holds no demo_<i> group with obs/; this is not a robomimic dataset")
        obs0 = f[f"data/{demos[0]}/obs"]
        for c in obs0:
            if obs0[c].dtype == np.uint8 and obs0[c].ndim == 4:
                try:
                    check_image_size(obs0[c].shape[1:3], mode)
                except ValueError as exc:
                    raise ValueError(f"{hdf5_path} obs/{c}: {exc}") from None


def write_lerobot_from_robomimic(
    hdf5_path,
    root,
    *,
    repo_id: str = "local/from_robomimic",
    repeat: int = 1,
    mode: str = "av1",
    fps: int = 20,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """A LeRobot v3 dataset with the camera frames, state and actions of a robomimic HDF5 (the layout of
    ``../shared/data/robosuite_lift_84_20demos_lerobot``), each demo written ``repeat`` times: real rendered
    pixels at benchmark scale from a small simulator dataset.

    Args:
        hdf5_path: The robomimic HDF5 file: its uint8 (N, H, W, C) obs are the cameras
            (``observation.images.<key without _image>``), its end-effector and gripper obs the state.
        root: The dataset root (must not exist unless ``overwrite``).
        repo_id: The repo id recorded.
        repeat: How many times every demo is written.
        mode: ``av1`` or ``h264`` video, or ``png`` images.
        fps: The frame rate recorded.
        overwrite: Replace an existing ``root``.
        progress: Show a progress bar.

    Returns:
        ``root``, as a ``Path``.

    Raises:
        FileExistsError: ``root`` exists and ``overwrite`` is false.
        ValueError: an unknown ``mode`` (before anything is deleted), or cameras its encoder cannot take.
    """
    import h5py
    from lerobot.configs import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    final = Path(root)
    with replacing_dir(final, overwrite) as root, h5py.File(hdf5_path, "r") as f:
        demos = sorted(f["data"].keys(), key=lambda n: int(n[5:]))
        obs0 = f[f"data/{demos[0]}/obs"]
        cams = [k for k in obs0 if obs0[k].dtype == np.uint8 and obs0[k].ndim == 4]
        check_cameras(hdf5_path, mode)
        state_keys = [k for k in ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos") if k in obs0]
        sdim = sum(obs0[k].shape[1] for k in state_keys)
        adim = f[f"data/{demos[0]}/actions"].shape[1]
        feats = {
            "observation.state": {"dtype": "float32", "shape": (sdim,), "names": None},
            "action": {"dtype": "float32", "shape": (adim,), "names": None},
        }
        for c in cams:
            feats[f"observation.images.{c.removesuffix('_image')}"] = {
                "dtype": "image" if mode == "png" else "video",
                "shape": tuple(obs0[c].shape[1:]),
                "names": ["height", "width", "channels"],
            }
        rgb = RGBEncoderConfig(vcodec=MODES[mode]) if MODES[mode] else None
        ds = LeRobotDataset.create(repo_id, fps, feats, root=root, use_videos=mode != "png", rgb_encoder=rgb)
        work = [d for _ in range(repeat) for d in demos]
        for demo in tqdm(work, desc=f"sample-data {final.name}", unit="episode", disable=not progress):
            g = f[f"data/{demo}"]
            images = {c: g[f"obs/{c}"][()] for c in cams}
            state = np.concatenate([g[f"obs/{k}"][()] for k in state_keys], axis=1).astype(np.float32)
            actions = g["actions"][()].astype(np.float32)
            for i in range(len(actions)):
                frame = {"observation.state": state[i], "action": actions[i], "task": "lift the cube"}
                for c in cams:
                    frame[f"observation.images.{c.removesuffix('_image')}"] = images[c][i]
                ds.add_frame(frame)
            ds.save_episode()
        ds.finalize()
    return final
