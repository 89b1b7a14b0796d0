"""Write a robomimic-format HDF5 file exactly as robomimic 0.3.0 reads it (see notes/robomimic.md section 6)."""

from __future__ import annotations

import contextlib
import json
import os

import h5py
import numpy as np
from tqdm.auto import tqdm

from robo_loaders_plugin.sample_data.outputs import check_output
from robo_loaders_plugin.sample_data.scenes import SceneRenderer

CONTENTS = ("renders", "camera")  # SceneRenderer's simulator-like frames, or camera-like ones (sample_data.camera)

CAMERA_NAMES = ("agentview_image", "robot0_eye_in_hand_image")
STATE_DIM = 32


def camera_names(n: int) -> list[str]:
    """The obs keys of ``n`` cameras: robosuite's usual names for the first two (so robomimic's image configs find
    them), then ``camera<i>_image``.

    Args:
        n: Cameras.

    Returns:
        The keys, in camera order.
    """
    return [CAMERA_NAMES[i] if i < len(CAMERA_NAMES) else f"camera{i}_image" for i in range(n)]


def smooth_path(rng, n, dim, scale=1.0):
    """A smooth random trajectory: a few random cosine modes per dimension, so frames, states and actions change
    gradually from step to step, as recorded ones do.

    Args:
        rng: The random generator.
        n: Steps.
        dim: Dimensions.
        scale: The amplitude of the first mode (mode ``k`` has ``scale / k``).

    Returns:
        (n, dim) float64.
    """
    t = np.linspace(0, 1, n)[:, None]
    out = np.zeros((n, dim))
    for k in range(1, 4):
        out += rng.normal(0, scale / k, size=dim) * np.cos(np.pi * k * t + rng.uniform(0, np.pi, size=dim))
    return out


def renderer(content: str, size, camera: int, rng, noise: float = 1.0, fps: float = 20.0):
    """``render(i, cube_xy, grip_xy, grip_open)`` for frame ``i`` of one camera: ``renders`` draws like a
    simulator (``scenes.SceneRenderer``), ``camera`` like a real camera (``camera.CameraScene``: texture, shake,
    sensor noise of ``noise`` grey levels).

    Args:
        content: ``renders`` or ``camera``.
        size: The frames' side in pixels, or (height, width).
        camera: Which camera.
        rng: The random generator of this camera.
        noise: Sensor noise of ``camera`` content, sigma in grey levels.
        fps: The frame rate: frame ``i`` is at ``i / fps`` seconds (the camera's motion; ``camera`` content only).

    Returns:
        ``render(i, cube_xy, grip_xy, grip_open)`` -> (H, W, 3) uint8.

    Raises:
        ValueError: an unknown ``content``.
    """
    if content == "renders":
        r = SceneRenderer(size, camera, rng)
        return lambda i, cube, grip, grip_open: r.render(cube, grip, grip_open)
    if content == "camera":
        from robo_loaders_plugin.sample_data.camera import CameraScene

        c = CameraScene(size, camera, rng, noise)
        return lambda i, cube, grip, grip_open: c.render(cube, grip, grip_open, i / fps)
    raise ValueError(f"content must be one of {CONTENTS}, got {content!r}")


def _episode(rng, length, cams, image_size, content="renders", noise=1.0):
    cube = 0.5 + 0.2 * np.tanh(smooth_path(rng, length, 2, 0.6))
    start = rng.uniform(0.2, 0.8, size=2)
    alpha = np.clip(np.linspace(-0.2, 1.3, length), 0, 1)[:, None]
    grip = (1 - alpha) * start + alpha * cube[-1] + 0.02 * smooth_path(rng, length, 2)
    grip_open = np.clip(1.2 - 1.5 * np.linspace(0, 1, length), 0, 1)
    obs = {}
    for c, name in enumerate(cams):
        render = renderer(content, image_size, c, np.random.default_rng(rng.integers(2**32)), noise)
        obs[name] = np.stack([render(i, cube[i], grip[i], grip_open[i]) for i in range(length)])
    obs["robot0_eef_pos"] = np.concatenate([grip, 0.9 + 0.1 * alpha], axis=1)
    quat = smooth_path(rng, length, 4, 0.2) + np.array([0.0, 1.0, 0.0, 0.0])
    obs["robot0_eef_quat"] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    obs["robot0_gripper_qpos"] = np.stack([0.04 * grip_open, -0.04 * grip_open], axis=1)
    obs["object"] = np.concatenate([cube, 0.82 + 0.0 * cube[:, :1], smooth_path(rng, length, 7, 0.1)], axis=1)
    actions = np.concatenate(
        [
            np.diff(grip, axis=0, append=grip[-1:]) * 10,
            smooth_path(rng, length, 4, 0.1),
            (grip_open[:, None] < 0.5) * 2.0 - 1.0,
        ],
        axis=1,
    )
    states = np.concatenate([np.linspace(0, 1, length)[:, None], smooth_path(rng, length, STATE_DIM - 1)], axis=1)
    rewards = np.zeros(length)
    rewards[-1] = 1.0
    dones = np.zeros(length, dtype=np.int64)
    dones[-1] = 1
    return obs, actions, rewards, dones, states


def _final_state(v: np.ndarray) -> np.ndarray:
    """The observation after a demo's last action (its last ``next_obs``): the last step's motion continued (a
    camera frame shifted by a pixel), never equal to the last observation. Why not the last one repeated: then the
    demo's final ``next_obs`` and a ``goal_mode="last"`` goal equalled the step before them, and a backend serving
    ``obs`` there, or a goal one step early, served the same bytes as native on every generated file (a
    reviewer's mutations, which no sample-parity test caught)."""
    last = v[-1]
    if v.dtype == np.uint8:
        moved = np.roll(last, 1, axis=-2)
        return moved if not np.array_equal(moved, last) else last ^ np.uint8(1)
    if v.dtype == np.bool_:
        return ~last
    step = last - v[-2] if len(v) > 1 else np.zeros_like(last)
    nudge = 1 if np.issubdtype(v.dtype, np.integer) else 1e-3
    return last + np.where(step != 0, step, nudge).astype(last.dtype)


def write_robomimic_hdf5(
    path: str,
    demos: int = 10,
    image_size: int = 84,
    cameras: int = 2,
    seed: int = 0,
    min_length: int = 40,
    max_length: int = 60,
    valid_fraction: float = 0.1,
    next_obs: bool = True,
    progress: bool = True,
    content: str = "renders",
    noise: float = 1.0,
    overwrite: bool = False,
) -> str:
    """Generate ``demos`` demos of a Lift-like task. Written to a temp name, then renamed, so an interrupted run
    leaves no file that looks complete, and a replaced file is the old one or the whole new one.

    Args:
        path: The HDF5 file written (its directory is created).
        demos: Demos, at least 1.
        image_size: The cameras' side in pixels, at least 8.
        cameras: RGB cameras (0: low-dimensional observations only).
        seed: Seed of the random generator (the file is a pure function of the arguments).
        min_length: The shortest demo in steps, at least 1.
        max_length: The longest demo in steps, at least ``min_length``.
        valid_fraction: The share of demos in ``mask/valid`` (at least one when there are two demos or more); the
            rest are in ``mask/train``.
        next_obs: Write ``next_obs/``; false leaves it out (BC-RNN image configs do not load it), halving the file.
        progress: Show a progress bar.
        content: ``renders`` (simulator-like frames) or ``camera`` (camera-like: texture, shake, sensor noise;
            ``sample_data.camera``).
        noise: Sensor noise of ``camera`` content, sigma in grey levels.
        overwrite: Replace an existing robomimic HDF5 file at ``path`` (anything else there is never replaced:
            ``sample_data.outputs``).

    Returns:
        ``path``.

    Raises:
        ValueError: an unknown ``content``, or a count or size out of range.
        OutputExistsError: ``path`` exists and ``overwrite`` is false, or it is not a robomimic HDF5 file.
    """
    if content not in CONTENTS:
        raise ValueError(f"content must be one of {CONTENTS}, got {content!r}")
    if demos < 1 or image_size < 8 or cameras < 0 or not 1 <= min_length <= max_length:
        raise ValueError(
            f"bad sample-data options: demos={demos} (>=1), image_size={image_size} (>=8), "
            f"cameras={cameras} (>=0), min_length={min_length} <= max_length={max_length}"
        )
    check_output(path, "robomimic", overwrite)
    rng = np.random.default_rng(seed)
    cams = camera_names(cameras)
    tmp = f"{path}.tmp-{os.getpid()}"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    total = 0
    try:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            for i in tqdm(
                range(demos), desc=f"sample-data {os.path.basename(path)}", unit="demo", disable=not progress
            ):
                length = int(rng.integers(min_length, max_length + 1))
                obs, actions, rewards, dones, states = _episode(rng, length, cams, image_size, content, noise)
                g = data.create_group(f"demo_{i}")
                g.attrs["num_samples"] = length
                g.attrs["model_file"] = ""
                g.create_dataset("actions", data=actions)
                g.create_dataset("rewards", data=rewards)
                g.create_dataset("dones", data=dones)
                g.create_dataset("states", data=states)
                for k, v in obs.items():
                    g.create_dataset(f"obs/{k}", data=v)
                    if next_obs:
                        g.create_dataset(f"next_obs/{k}", data=np.concatenate([v[1:], _final_state(v)[None]]))
                total += length
            data.attrs["total"] = total
            data.attrs["env_args"] = json.dumps(
                {
                    "env_name": "Lift",
                    "type": 1,
                    "env_kwargs": {
                        "has_renderer": False,
                        "has_offscreen_renderer": cameras > 0,
                        "use_camera_obs": cameras > 0,
                        "camera_names": [c[: -len("_image")] for c in cams],
                        "camera_heights": image_size,
                        "camera_widths": image_size,
                        "control_freq": 20,
                        "robots": ["Panda"],
                    },
                }
            )
            names = [f"demo_{i}" for i in range(demos)]
            n_valid = max(1, round(demos * valid_fraction)) if demos > 1 else 0
            valid = sorted(rng.choice(demos, size=n_valid, replace=False).tolist()) if n_valid else []
            train = [n for i, n in enumerate(names) if i not in valid]
            f.create_dataset("mask/train", data=np.array(train, dtype="S"))
            f.create_dataset("mask/valid", data=np.array([names[i] for i in valid], dtype="S"))
        os.replace(tmp, path)
    except BaseException:  # a full disk, Ctrl-C: the partial file is not left behind (a reviewer's reproduction)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
