"""A camera some components of a mixture do not have: left out of the mixture (``"missing_cameras": "drop"``, the
default: the keys every component has), or served as zeros with a flag (``"zeros"``).

Why a choice: datasets of different robots have different cameras (a bimanual robot's second wrist camera, a lab
without a top view). Dropping a camera every component does not have keeps every served frame real but loses that
camera for the robots that have it; Octo fills a missing camera with an empty placeholder and a mask instead. With
``"zeros"`` every camera any component has is served: a component without it gets zeros of the shape and dtype the
others serve (taken from one item of a component that has it, when the mixture is built), its ``<camera>_is_pad``
frames all True where the framework serves one, and every item says ``<camera>_is_missing`` (True: zeros, not a
frame). Filled in the shared mixture layer, so every backend serves the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from robo_loaders_plugin.core.units import plural, some_of

DROP = "drop"
ZEROS = "zeros"
MISSING_CAMERAS = (DROP, ZEROS)
MISSING_SUFFIX = "_is_missing"  # ``<camera>_is_missing``: True where the item's camera is zeros, not a frame


def missing_key(camera: str) -> str:
    """The flag's name: ``observation.images.wrist`` -> ``observation.images.wrist_is_missing``.

    Args:
        camera: The camera's mixture key.

    Returns:
        ``<camera>_is_missing``.
    """
    return f"{camera}{MISSING_SUFFIX}"


def missing_lines(names: Sequence[str], missing: Sequence[Sequence[str]]) -> list[str]:
    """What the log says of the cameras served as zeros: one line per set of cameras lacked, naming the components
    that lack it (the first three of them, then how many more).

    Why grouped: a pretraining mixture of hundreds of components from a few robots printed one line per component
    (267 lines at 400 components of three robots), which hid every other line of the start; the components lacking
    the same cameras are one robot's, and one line says it.

    Args:
        names: Each component as the log names it (``component 3 (lab/arm)``).
        missing: Each component's cameras served as zeros (empty: none), in the mixture's camera order.

    Returns:
        The lines, in the order of each set's first component.
    """
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, lacking in zip(names, missing, strict=True):
        if lacking:
            groups.setdefault(tuple(lacking), []).append(name)
    lines = []
    for lacking, who in groups.items():
        flags = ", ".join(missing_key(c) for c in lacking)
        if len(who) == 1:
            head = f"{who[0]} has no {', '.join(lacking)}"
        else:
            head = f"{plural(len(who), 'component')} have no {', '.join(lacking)} ({some_of(who, 3)})"
        lines.append(f"{head}: served as zeros, flagged by {flags}")
    return lines


def device_of(values: Mapping) -> torch.device | None:
    """Where a (nested) item or batch lives: the device of its first tensor. A component's fillers and flags are
    made there, beside its own values: a batch a backend built on the GPU given a mask or flag on the CPU
    fails at the first operation mixing them (or pays a copy per step), which a CPU run never shows.

    Args:
        values: An item or batch (dicts of tensors or arrays, nested for robomimic's obs groups).

    Returns:
        The device, or ``None`` when it holds no tensor (the CPU).
    """
    for value in values.values():
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, Mapping):
            found = device_of(value)
            if found is not None:
                return found
    return None


def filler(template: Any, rows: int | None, device: torch.device | None = None) -> Any:
    """What a missing value is served as: zeros of the template's shape and dtype (an item's value; a batch's has
    ``rows`` in front), True for a bool template (a ``_is_pad`` mask: no real frame).

    Args:
        template: The value one item of a component that has the camera serves.
        rows: A batch's rows, or ``None`` for an item.
        device: Where the component's own values are (:func:`device_of`; ``None``: the template's for a tensor,
            the CPU for an array): the template came from another component, maybe on another device.

    Returns:
        A tensor or array like the template (a batch's: a tensor).
    """
    shape = tuple(template.shape) if rows is None else (int(rows), *template.shape)
    if isinstance(template, torch.Tensor):
        if template.dtype == torch.bool:
            return torch.full(shape, True, device=device if device is not None else template.device)
        return template.new_zeros(shape, device=device)
    value = np.ones(shape, dtype=bool) if template.dtype == np.bool_ else np.zeros(shape, dtype=template.dtype)
    if rows is None:
        return value  # an item keeps the template's kind
    return torch.from_numpy(value) if device is None else torch.from_numpy(value).to(device)  # batches: tensors


def flag(missing: bool, rows: int | None, tensor: bool, device: torch.device | None = None) -> Any:
    """``<camera>_is_missing``: a 0-d bool for an item, ``(rows,)`` for a batch.

    Args:
        missing: Whether the component lacks the camera.
        rows: A batch's rows, or ``None`` for an item.
        tensor: A torch tensor (else a numpy value).
        device: Where the component's own values are (:func:`device_of`; ``None``: the CPU).

    Returns:
        The flag (a numpy scalar for an item when not ``tensor``).
    """
    if rows is None and not tensor:
        return np.bool_(missing)  # a numpy scalar, as robomimic's items hold dataset_index
    return torch.full(() if rows is None else (int(rows),), bool(missing), dtype=torch.bool, device=device)


def fill_flat(values: dict, cameras: Sequence[str], templates: Mapping[str, Any], rows: int | None) -> dict:
    """A flat item or batch (LeRobot's layout) with every camera of ``cameras``, its ``_is_pad`` and its flag last,
    in the mixture's order: the component's own, or zeros made from ``templates``.

    Args:
        values: The component's renamed item or batch.
        cameras: The cameras served with ``"zeros"`` (the mixture's order).
        templates: ``{key: template}`` of the keys this component lacks (a camera, its ``_is_pad``).
        rows: A batch's rows, or ``None`` for an item.

    Returns:
        A new dict.
    """
    out = dict(values)
    device = device_of(values)
    for camera in cameras:
        for key in (camera, f"{camera}_is_pad"):
            value = out.pop(key, None)
            if value is None and key in templates:
                value = filler(templates[key], rows, device)
            if value is not None:
                out[key] = value
        out[missing_key(camera)] = flag(camera in templates, rows, tensor=True, device=device)
    return out
