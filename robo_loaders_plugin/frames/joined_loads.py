"""One camera of several sources that load episodes or units into a cache (``EpisodeFrames``, ``ChunkFrames``),
read as one (``FrameSource.join_field``): a mixture's batch draws from ~25 components.

Why: read component by component, each part of a batch went through its source's ``gather`` (a new array for
the part, the rows located, then copied again into the mixture's batch): ~0.1 ms of bookkeeping per component
and camera, a third of a batch of whole loaded episodes at 400 components (measured: docs/benchmarks.md). Here
each part's windows are written straight into the batch's rows by the source's own ``take_into``, the same
copies its ``take`` makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from robo_loaders_plugin.frames.base import FieldInfo, JoinedField, grouped


class LoadingSource(Protocol):
    """A source whose windows can be written into any rows of a batch (what :class:`JoinedLoads` reads)."""

    def info(self, field: str) -> FieldInfo:
        """The field's dtype, step shape and kind.

        Args:
            field: The field's name.
        """

    def take_into(self, field: str, episodes: np.ndarray, steps: np.ndarray, out: np.ndarray, rows: np.ndarray):
        """``out[rows[b]] = field[episodes[b]][steps[b]]``.

        Args:
            field: The field's name.
            episodes: (n,) episodes (or units) of the source.
            steps: (n, T) steps.
            out: The batch, ``(N, T) + step shape``.
            rows: (n,) distinct rows of ``out``.
        """


class JoinedLoads(JoinedField):
    """One field of several loading sources of one class read as one (the module's docstring).

    Args:
        parts: ``(source, field)`` pairs: each part's source and the field's name in it.
    """

    def __init__(self, parts: Sequence[tuple[LoadingSource, str]]):
        self.parts = list(parts)

    @classmethod
    def of(cls, parts: Sequence[tuple[LoadingSource, str]]) -> JoinedLoads | None:
        """The joined reader, or ``None`` when the parts hold the field in different dtypes or shapes (read part
        by part then, as a mixture of them is).

        Args:
            parts: ``(source, field)`` pairs.

        Returns:
            A :class:`JoinedLoads` or ``None``.
        """
        infos = {(s.info(f).dtype, tuple(s.info(f).shape)) for s, f in parts}
        return cls(parts) if len(infos) == 1 else None

    def take(self, parts: np.ndarray, episodes: np.ndarray, steps: np.ndarray, rows: np.ndarray, out) -> None:
        """``out[rows[b], ...] = parts[b]``'s field at ``(episodes[b], steps[b, ...])`` (:class:`JoinedField`).

        Args:
            parts: (B,) each row's part.
            episodes: (B,) each row's episode (or unit) in its part's source.
            steps: (B,) or (B, T) steps.
            rows: (B,) distinct rows of ``out``.
            out: ``(N,) + steps.shape[1:] + step shape``, C-contiguous.
        """
        B = len(parts)
        if not B:
            return
        if not out.flags.c_contiguous:  # a reshape would copy it, and the rows written would be lost
            raise ValueError(f"a joined read writes into a C-contiguous batch, not one of strides {out.strides}")
        st = np.asarray(steps).reshape(B, -1)
        flat_out = out.reshape((out.shape[0], st.shape[1]) + out.shape[np.ndim(steps) :])
        order, groups = grouped(parts)
        for p, a, b in groups:
            sel = order[a:b]
            source, field = self.parts[p]
            source.take_into(field, np.asarray(episodes)[sel], st[sel], flat_out, np.asarray(rows)[sel])


class JoinsLoads:
    """Mixed into a loading source's class (before ``FrameSource``): its ``join_field`` is :class:`JoinedLoads`."""

    @classmethod
    def join_field(cls, parts) -> JoinedLoads | None:
        """A mixture's camera across its components' sources of this class (the module's docstring).

        Args:
            parts: ``(source, field)`` pairs.

        Returns:
            The joined reader, or ``None`` when the parts hold the field in different dtypes or shapes.
        """
        return JoinedLoads.of(parts)
