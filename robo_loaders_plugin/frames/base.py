"""The frame-source protocol every backend gathers through.

Why one protocol: the window rules (``robo_loaders_plugin.windows``) turn sample indices into ``(episode, step)``
index arrays, the same for every backend; what differs is only where an episode's arrays live (a compressed store
mapped from RAM, episodes read from shards, later decoded video buffers or device tensors). A frame source answers
one question, "fill ``out`` with field F at these (episode, step) pairs", as fast as its storage allows.
"""
from __future__ import annotations

import abc
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    dtype: np.dtype
    shape: tuple   # of one step
    frames: bool   # camera frames: stored compressed/decoded per step, copied row by row


class FrameSource(abc.ABC):
    """Per-episode arrays; ``lengths[e]`` steps in episode ``e``; every episode stores a field the same way."""

    lengths: np.ndarray

    @abc.abstractmethod
    def info(self, field: str) -> FieldInfo:
        """dtype and per-step shape of ``field`` (raises naming the field when absent)."""

    @abc.abstractmethod
    def take(self, field: str, episodes: np.ndarray, steps: np.ndarray, out: np.ndarray) -> None:
        """``out[b, ...] = field[episodes[b]][steps[b, ...]]``: ``episodes`` is (B,), ``steps`` (B,) or (B, T)."""


def gather(source: FrameSource, field: str, episodes: np.ndarray, steps: np.ndarray, pool=None) -> np.ndarray:
    """``field`` at (episode, step) pairs as one ``steps.shape + step shape`` array (recycled from ``pool``)."""
    info = source.info(field)
    shape = tuple(steps.shape) + tuple(info.shape)
    out = pool.empty(shape, info.dtype) if pool is not None else np.empty(shape, dtype=info.dtype)
    source.take(field, np.asarray(episodes), np.asarray(steps), out)
    return out


def broadcast_episodes(episodes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Episode of every element of ``steps`` (``episodes`` has one entry per row)."""
    return np.broadcast_to(episodes.reshape(episodes.shape + (1,) * (steps.ndim - 1)), steps.shape)
