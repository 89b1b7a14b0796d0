"""The robomimic rows of ``benchmarks/mixtures.py`` (part ``robomimic``): robomimic HDF5 mixtures
(``train.data_mixture``) served by every backend against the hand-written ``ConcatDataset`` of ``SequenceDataset``\\ s
(``benchmarks/mixtures_robomimic_child.py``), in three settings:

- ``layouts``: three Lift-like files at 20 Hz, both cameras in each, stored three ways: robosuite's names; the wrist
  camera as ``wrist_image`` (renamed back); the two cameras swapped (each renamed to the other's name). Every
  backend.
- ``rates``: copies of the same files recorded at 20, 10 and 30 Hz (robosuite's ``control_freq`` in ``env_args``,
  which the mixture reads), served at ``target_fps`` 20 by ``gpu_resampler``; the reference serves each at its own
  rate.
- ``many``: 100 small files (2 demos of 20-24 steps), the three layouts in turn, every backend.
"""

from __future__ import annotations

import json
import os
import shutil

AGENTVIEW = "agentview_image"
EYE_IN_HAND = "robot0_eye_in_hand_image"
# robomimic's image configs for Lift (BC-RNN): both cameras and the robot's proprioception
RGB = [AGENTVIEW, EYE_IN_HAND]
LOW_DIM = ["robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"]
# each layout: {stored name: robosuite's name} (the component's rename)
LAYOUTS = {
    "a": {},
    "b": {"wrist_image": EYE_IN_HAND},
    "c": {EYE_IN_HAND: AGENTVIEW, AGENTVIEW: EYE_IN_HAND},
}
CHILD = "benchmarks.mixtures_robomimic_child"


def store_as(path: str, rename: dict) -> None:
    """Store a file's cameras under the layout's names: ``obs/<robosuite name>`` becomes ``obs/<stored name>`` in
    every demo (and ``next_obs/``), so ``rename`` maps them back.

    Args:
        path: The robomimic HDF5 file, changed in place.
        rename: ``{stored name: robosuite's name}``.
    """
    import h5py

    if not rename:
        return
    with h5py.File(path, "r+") as f:
        for demo in f["data"]:
            for group in ("obs", "next_obs"):
                name = f"data/{demo}/{group}"
                if name not in f:
                    continue
                g = f[name]
                moved = {stored: g[robosuite][()] for stored, robosuite in rename.items()}
                for robosuite in rename.values():
                    del g[robosuite]
                for stored, value in moved.items():
                    g.create_dataset(stored, data=value)


def set_rate(path: str, hz: float) -> None:
    """Record ``hz`` as the file's rate (robosuite's ``control_freq`` in ``data.attrs['env_args']``)."""
    import h5py

    with h5py.File(path, "r+") as f:
        env = json.loads(f["data"].attrs["env_args"])
        env["env_kwargs"]["control_freq"] = hz
        f["data"].attrs["env_args"] = json.dumps(env)


def write(path: str, name: str, seed: int, demos: int, bounds, image_size: int) -> str:
    """One Lift-like file (``sample_data.robomimic_hdf5``, no ``next_obs``: the ``bc`` config does not load it) in
    layout ``name``."""
    from robo_loaders_plugin.sample_data.robomimic_hdf5 import write_robomimic_hdf5

    write_robomimic_hdf5(
        path,
        demos=demos,
        image_size=image_size,
        cameras=2,
        seed=seed,
        min_length=bounds[0],
        max_length=bounds[1],
        next_obs=False,
        progress=False,
        overwrite=True,  # a rerun writes its own files again
    )
    store_as(path, LAYOUTS[name])
    return path


def generate(base: str, size: dict) -> dict:
    """The robomimic settings' files (module docstring).

    Args:
        base: A directory for them.
        size: The size's ``robomimic`` settings.

    Returns:
        ``{"layouts": [component, ...], "rates": [...], "many": [...]}``, each component ``path``, ``weight``,
        ``rename``.
    """
    from benchmarks.mixtures import RATES, WEIGHTS

    os.makedirs(base, exist_ok=True)
    out: dict = {"layouts": [], "rates": [], "many": []}
    for k, name in enumerate(LAYOUTS):
        path = write(os.path.join(base, f"{name}20.hdf5"), name, k, size["demos"], size["lengths"], size["image_size"])
        out["layouts"].append({"path": path, "weight": WEIGHTS[k], "rename": LAYOUTS[name]})
        hz = RATES[name]  # the same demos recorded at another rate: only the rate the file states differs
        other = os.path.join(base, f"{name}{hz}.hdf5")
        if other != path:
            shutil.copyfile(path, other)
            set_rate(other, hz)
        out["rates"].append({"path": other, "weight": WEIGHTS[k], "rename": LAYOUTS[name]})
    for i in range(size["many_components"]):
        name = list(LAYOUTS)[i % len(LAYOUTS)]
        path = os.path.join(base, "many", f"{i:03d}_{name}.hdf5")
        write(path, name, 1000 + i, 2, size["many_lengths"], size["many_image_size"])
        out["many"].append({"path": path, "weight": WEIGHTS[i % len(WEIGHTS)], "rename": LAYOUTS[name]})
    return out


def run_rows(comps: dict, size: dict, log_dir: str, in_process: bool, repeats: int, timeout: float) -> list:
    """Every backend and the reference on the ``layouts`` and ``many`` mixtures, ``gpu_resampler`` and the
    reference on ``rates``; ratios against the reference of the same setting, measured in the same run.

    Args:
        comps: :func:`generate`'s components.
        size: The size's settings (``num_workers``, ``robomimic``).
        log_dir: Where the runs' logs go.
        in_process: Measure here (the quick test).
        repeats: Rounds (each row its median run).
        timeout: Seconds before a child is killed.

    Returns:
        The rows.
    """
    from benchmarks.mixtures import REFERENCE, TARGET_FPS, compare

    rm = size["robomimic"]
    common = {
        "rgb": RGB,
        "low_dim": LOW_DIM,
        "seq_length": rm["seq_length"],
        "cache_mode": rm["cache_mode"],
        "num_workers": size["num_workers"],
        "seed": 0,
    }
    rows = []
    for setting in ("layouts", "rates", "many"):
        if setting == "rates" and "gpu_resampler" not in rm["backends"]:
            continue
        labels = (REFERENCE, "gpu_resampler") if setting == "rates" else (REFERENCE, *rm["backends"])
        many = setting == "many"
        base = dict(
            common,
            components=comps[setting],
            batch_size=rm["many_batch_size" if many else "batch_size"],
            batches=rm["many_batches" if many else "batches"],
            target_fps=TARGET_FPS if setting == "rates" else None,
        )
        rows += compare("robomimic", setting, labels, base, log_dir, in_process, repeats, timeout, CHILD)
    return rows
