"""Vectors of different sizes in one mixture: zero padding to one size, and a mask of the real entries.

Why here, once: datasets of different robots record actions and proprioception of different sizes (a 7-dof arm, a
14-dof bimanual robot, a 6-dof arm). A mixture serves them in one batch only if every item has one shape, so each
component's vector is padded with zeros at its end to the mixture's size (the largest among the components, or the
size the mixture declares in ``"pad"``), and a boolean ``<key>_dim_mask`` says which entries are real (Octo's
``action_pad_mask``, SmolVLA's padding to 32). Padding is applied to a component's item or batch after its rename
and before the components' parts are joined, in the shared mixture layer (``mixtures.dataset``), so every backend
serves the same padded values; the framework hooks only say where a key lives in their layout.

Which keys are padded, and the sizes, are decided from the components' metadata (the adapters read it) before any
data is read: :func:`plan_padding`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from robo_loaders_plugin.core.log import get_logger
from robo_loaders_plugin.core.units import NAMED_IN_A_LINE, plural, some_of
from robo_loaders_plugin.mixtures.spec import MixtureError

logger = get_logger(__name__)

MASK_SUFFIX = "_dim_mask"  # ``<key>_dim_mask``: True where ``<key>``'s entry is the component's own, False: padding

# The statistics of a padded entry (LeRobot's ``meta.stats``): every normaliser LeRobot 0.6.1 has leaves a padded 0
# at 0 (mean/std: (0 - 0) / 1; min/max: 2 (0 + 1) / 2 - 1; quantiles q01/q99 and q10/q90, symmetric about 0: the
# quantiles of a uniform [-1, 1], which also lie within min and max).
PAD_STATS = {"mean": 0.0, "std": 1.0, "min": -1.0, "max": 1.0, "q01": -0.98, "q10": -0.8, "q50": 0.0, "q90": 0.8,
             "q99": 0.98}  # fmt: skip


def mask_key(key: str) -> str:
    """The name of ``key``'s mask: ``action`` -> ``action_dim_mask``.

    Args:
        key: The padded key (the mixture's name).

    Returns:
        ``<key>_dim_mask``.
    """
    return f"{key}{MASK_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class Padding:
    """Which keys a mixture pads, to what size, and each component's own size of them.

    Attributes:
        sizes: ``{mixture key: padded size}`` (every key padded, in the order of the first component).
        own: Per component, ``{mixture key: its own size}``.
    """

    sizes: Mapping[str, int]
    own: tuple[Mapping[str, int], ...]

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def of(self, k: int) -> dict[str, tuple[int, int]]:
        """Component ``k``'s ``{key: (own size, padded size)}``.

        Args:
            k: The component.

        Returns:
            Every padded key, with component ``k``'s size and the mixture's.
        """
        return {key: (int(self.own[k][key]), int(size)) for key, size in self.sizes.items()}


NO_PADDING = Padding({}, ())


def plan_padding(
    where: str,
    names: Sequence[str],
    vectors: Sequence[Mapping[str, int]],
    declared: Mapping[str, int],
    what: str = "key",
) -> Padding:
    """Decide which vectors are padded, from the components' metadata (no data read), and log one line per key.

    A key is padded when the components' sizes differ or the mixture declares a size for it (``"pad"``); its size is
    the declared one, else the largest.

    Args:
        where: The setting, for messages (``train.data_mixture``, ``--dataset.mixture``).
        names: How messages name each component (``component 1 (lab/b)``).
        vectors: Per component, ``{mixture key: size}`` of its 1-d vectors the mixture serves (the same keys for
            every component: the adapters keep only common keys).
        declared: The mixture's ``"pad"``: ``{mixture key: size}``.
        what: How messages call a key (``key``, ``feature``).

    Returns:
        The :class:`Padding`.

    Raises:
        MixtureError: a declared size smaller than a component's (naming ``where``, the component, the key and both
            sizes), or a declared key that is not a 1-d vector every component serves.
    """
    keys = list(vectors[0]) if vectors else []
    for key, size in declared.items():
        if key not in keys:
            raise MixtureError(
                f"{where}: pad: {key!r} is not a 1-d {what} every component serves (the mixture's 1-d {what}s: "
                f"{sorted(keys)}); pad only vectors (actions, states), or rename the components' {what}s onto it"
            )
        for k, own in enumerate(vectors):
            if own[key] > size:
                raise MixtureError(
                    f"{where}: pad: {key!r} is declared {size} wide but {names[k]}'s is {own[key]}; declare at least "
                    f"{max(v[key] for v in vectors)} (the largest component's) or leave {key!r} out of pad"
                )
    sizes: dict[str, int] = {}
    for key in keys:
        each = [int(v[key]) for v in vectors]
        if key in declared or len(set(each)) > 1:
            sizes[key] = int(declared.get(key, max(each)))
            logger.info(
                f"mixture: {key!r} padded with zeros to {sizes[key]} (sizes: {_sizes_of(names, each)}); "
                f"{mask_key(key)} marks the real entries"
            )
    return Padding(sizes, tuple({key: int(v[key]) for key in sizes} for v in vectors))


def _sizes_of(names: Sequence[str], each: Sequence[int]) -> str:
    """Each component's size, for the log line: every one for a few components; for more, each size with how many
    components have it and the first of them (a pretraining mixture of 400 made a line of ~10 kB per key)."""
    if len(names) <= NAMED_IN_A_LINE:
        return ", ".join(f"{n} {s}" for n, s in zip(names, each, strict=True))
    having: dict[int, list[str]] = {}
    for n, s in zip(names, each, strict=True):
        having.setdefault(s, []).append(n)
    return "; ".join(f"{s} for {plural(len(ns), 'component')} ({some_of(ns, 3)})" for s, ns in having.items())


def pad_value(value: Any, own: int, size: int, key: str = "a padded value") -> Any:
    """``value`` with its last dimension ``own`` padded with zeros to ``size`` (the same object when equal).

    Args:
        value: A tensor or array whose last dimension is ``own`` wide.
        own: The component's size.
        size: The mixture's size.
        key: The value's key, for the error.

    Returns:
        The padded value, of the same type, dtype and device.

    Raises:
        ValueError: the value's last dimension is not ``own`` (the data disagree with the metadata).
    """
    width = int(value.shape[-1]) if value.ndim else -1
    if width != own:
        raise ValueError(
            f"{key} is {width} wide in this sample but {own} wide in the component's metadata (its first episode); "
            "every episode must store it with one width"
        )
    if own == size:
        return value
    out: Any
    if isinstance(value, torch.Tensor):
        out = value.new_zeros((*value.shape[:-1], size))
    else:
        out = np.zeros((*value.shape[:-1], size), dtype=value.dtype)
    out[..., :own] = value
    return out


def dim_mask(like: Any, own: int, size: int, rows: int | None) -> Any:
    """The mask of a padded key: True for the component's own entries, False for the padding.

    Args:
        like: The padded value (a tensor gives a tensor mask, an array an array one).
        own: The component's size.
        size: The mixture's size.
        rows: A batch's rows (``(rows, size)``), or ``None`` for an item (``(size,)``).

    Returns:
        The bool mask (a tensor on ``like``'s device: a batch built on the GPU gets its mask there, not on the CPU).
    """
    if isinstance(like, torch.Tensor):
        flags = torch.arange(size, device=like.device) < own
        return flags if rows is None else flags.expand(rows, size).clone()
    mask: np.ndarray = np.zeros(size, dtype=bool)
    mask[:own] = True
    if rows is not None:
        mask = np.broadcast_to(mask, (rows, size)).copy()
    return mask


def pad_flat(values: dict, sizes: Mapping[str, tuple[int, int]], rows: int | None) -> dict:
    """A flat item or batch (LeRobot's layout) with every padded key padded and its mask added after it.

    Args:
        values: ``{key: value}`` (the mixture's keys).
        sizes: ``{key: (own size, padded size)}`` (:meth:`Padding.of`).
        rows: A batch's rows, or ``None`` for an item.

    Returns:
        A new dict (keys in their order, each mask right after its key).
    """
    out = {}
    for key, value in values.items():
        if key in sizes:
            own, size = sizes[key]
            out[key] = pad_value(value, own, size, key)
            out[mask_key(key)] = dim_mask(out[key], own, size, rows)
        else:
            out[key] = value
    return out
