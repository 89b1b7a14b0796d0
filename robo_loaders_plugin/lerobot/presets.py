"""``delta_timestamps`` shaped like the policies people train (used by tests and ``bench lerobot``)."""

from __future__ import annotations

PRESETS = ("none", "act", "diffusion")


def delta_timestamps(preset: str, meta) -> dict | None:
    """``delta_timestamps`` shaped like a policy's.

    ``act``: a 100-step action chunk (ACT's default); ``diffusion``: 2 observation frames of state and every
    camera and actions -1..14 (Diffusion Policy's n_obs_steps=2, horizon 16).

    Args:
        preset: One of :data:`PRESETS` (``none``, ``act``, ``diffusion``).
        meta: The dataset's LeRobot metadata (``fps``, ``features``, ``camera_keys``).

    Returns:
        ``{key: [seconds, ...]}``, or ``None`` for ``none``.

    Raises:
        ValueError: an unknown preset.
    """
    fps = meta.fps
    if preset == "none":
        return None
    if preset == "act":
        return {"action": [i / fps for i in range(100)]}
    if preset == "diffusion":
        obs = [k for k in meta.features if k.startswith("observation.") and meta.features[k]["dtype"] != "string"]
        out = {k: [-1 / fps, 0.0] for k in obs if k in meta.camera_keys or k == "observation.state"}
        out["action"] = [i / fps for i in range(-1, 15)]
        return out
    raise ValueError(f"unknown delta-timestamps preset {preset!r}; choose one of {', '.join(PRESETS)}")
