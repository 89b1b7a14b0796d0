"""Rate conversion: windows counted at a policy's rate on data recorded at another, for any window rule set.

A window at the target rate asks for steps at positions between recorded steps; each field is then read by its
mode (``frames.base.gather_at``): ``linear`` blends the two neighbouring steps (the default for float fields:
states, actions), ``previous`` holds the last recorded value (the default for integer and boolean fields:
grippers, flags, indices), ``nearest`` takes the closer step (the default, and the only choice, for camera frames,
which are never blended). Edges clamp and set pad masks exactly as the recorded-rate rules do, and at the recorded
rate every position is a recorded step, so the result is the native sample byte for byte.
"""

from __future__ import annotations

import math

import numpy as np

from robo_loaders_plugin.core.errors import BackendOptionError
from robo_loaders_plugin.frames.base import LINEAR, MODES, NEAREST, PREVIOUS, FieldInfo

_EPS = 1e-9


def default_mode(info: FieldInfo) -> str:
    """A field's mode when the user names none: ``nearest`` for camera frames (never blended), ``linear`` for float
    fields, ``previous`` for the rest (integer and boolean fields: grippers, flags, indices).

    Args:
        info: The field's :class:`FieldInfo`.

    Returns:
        The mode.
    """
    if info.frames:
        return NEAREST
    return LINEAR if np.dtype(info.dtype).kind == "f" else PREVIOUS


def resolve_modes(infos: dict[str, FieldInfo], overrides: dict | None, where: str) -> dict[str, str]:
    """Each field's mode: its default (:func:`default_mode`) unless ``overrides`` names it.

    Args:
        infos: ``{field: FieldInfo}`` of the fields this run reads between recorded steps.
        overrides: The user's ``modes`` option, ``{field: mode}``, or ``None``.
        where: The option's prefix, for the errors.

    Returns:
        ``{field: mode}`` for every field of ``infos``.

    Raises:
        BackendOptionError: ``overrides`` names a field this run does not read, a mode that does not exist, or
            ``linear`` for camera frames or a field that is not float.
    """
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(infos))
    if unknown and not infos:
        raise BackendOptionError(
            f"{where}.modes names {unknown}, but this run reads no field between recorded "
            "steps: modes apply to rate conversion (target_fps, delta_timestamps), and here it "
            "converts none (e.g. target_fps with a policy that has no delta_timestamps)"
        )
    if unknown:
        raise BackendOptionError(
            f"{where}.modes names {unknown}, which this run does not read between recorded steps (only "
            f"{sorted(infos)} are: the windows the rate conversion moves)"
        )
    modes = {}
    for name, info in infos.items():
        mode = overrides.get(name, default_mode(info))
        if mode not in MODES:
            raise BackendOptionError(f"{where}.modes[{name!r}] must be one of {MODES}, got {mode!r}")
        if mode == LINEAR and info.frames:
            raise BackendOptionError(
                f"{where}.modes[{name!r}]: camera frames are never blended; use 'nearest' or 'previous'"
            )
        if mode == LINEAR and np.dtype(info.dtype).kind != "f":
            raise BackendOptionError(
                f"{where}.modes[{name!r}]: 'linear' needs a float field, {name!r} is "
                f"{np.dtype(info.dtype)}; use 'previous' or 'nearest'"
            )
        modes[name] = mode
    return modes


def resampled_length(length: int, rate: float) -> int:
    """Steps of an episode at the target rate: the target steps 0, rate, 2 rate, ... that fall within the recording.

    Args:
        length: The episode's recorded steps.
        rate: Recorded steps per target step.

    Returns:
        The number of target steps.
    """
    return math.floor((length - 1) / rate + 1e-6) + 1


def to_recorded(steps: np.ndarray, rate: float) -> np.ndarray:
    """Target-rate steps as recorded-step positions (integers again at the recorded rate).

    Positions within 1e-6 of a recorded step are snapped to it, so float error does not turn an exact step into a
    blend.

    Args:
        steps: Step indices at the target rate.
        rate: Recorded steps per target step.

    Returns:
        ``steps * rate`` (``steps`` itself when ``rate`` is 1).
    """
    if rate == 1.0:
        return steps
    pos = steps * rate
    near = np.rint(pos)
    return np.where(np.abs(pos - near) < 1e-6, near, pos) if pos.dtype.kind == "f" else pos


def recorded_frames(steps: int, recorded_fps: float, target_fps: float | None) -> int:
    """How many recorded frames ``steps`` steps at ``target_fps`` span: a count a policy gives in its own steps
    (LeRobot's ``drop_n_last_frames``, the frames its sampler leaves out at each episode's end) applied to data
    recorded at another rate.

    Why: lerobot-train's sampler counts recorded frames; at a third of the recorded rate, diffusion's 7 dropped
    frames were 7 recorded ones (2.3 policy steps), and most of the items it then served had action windows of
    mostly padding, which LeRobot on the same data recorded at the target rate never serves (a reviewer's
    reproduction).

    Args:
        steps: The count in policy steps.
        recorded_fps: The data's rate.
        target_fps: The policy's rate (``None``: the recorded one).

    Returns:
        ``ceil(steps * recorded_fps / target_fps)``, or ``steps`` itself at the recorded rate.
    """
    if not steps or target_fps is None or float(target_fps) == float(recorded_fps):
        return int(steps)
    return math.ceil(int(steps) * float(recorded_fps) / float(target_fps) - _EPS)
