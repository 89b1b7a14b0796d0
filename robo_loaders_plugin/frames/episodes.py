"""Frames from episodes loaded whole, on demand, into a bounded cache (episodes read from robo-shards records).

Why whole episodes: a shuffled pass that draws its windows from a buffer of open episodes touches each episode's
record about once per pass, so reading (and, for robomimic, decoding) it whole is far cheaper than seeking per
sample. Camera frames are held either decoded (each then serves every window that covers it) or still compressed
(:class:`~robo_loaders_plugin.storage.encoded_frames.EncodedFrames`, decoded per batch: the memory of an open episode is
then its compressed size). Fields that are not frames (a few bytes per step) are kept for the source's lifetime
after an episode's first load, so later loads read frames only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from robo_loaders_plugin.core.lru import LoadOnceLRU
from robo_loaders_plugin.frames.base import FieldInfo, FrameSource, copy_windows, grouped
from robo_loaders_plugin.frames.joined_loads import JoinsLoads
from robo_loaders_plugin.storage.encoded_frames import EncodedFrames


class EpisodeFrames(JoinsLoads, FrameSource):
    """A frame source of episodes loaded whole, on demand, into a bounded cache (see the module's docstring).

    Pickled (spawned DataLoader workers), it starts with an empty cache: each process opens its own.

    Args:
        lengths: Steps of each episode.
        infos: ``{field: FieldInfo}`` of every field the source serves.
        read: ``read(ep, fields)`` returns episode ``ep``'s arrays (``fields=None``: all the source serves), frames
            possibly still compressed (:class:`EncodedFrames`); after an episode's first load only its frame fields
            are asked for.
        capacity: How many loaded episodes the cache holds.
        decode_on_load: Decode compressed frames once per load instead of per batch.
        fields_alone: ``read(ep, fields)`` gives any of the fields as a first load gives them, so
            :meth:`gather_low_dim` reads the fields that are not frames without the episodes' frames. Why: a
            mixture's start reads every component's low-dim fields into one table (``mixtures.joined_frames``),
            which loaded every episode of every component whole, frames included, ~1 ms each. Training's reads are
            unchanged (an episode's first load reads it whole).

    A mixture reads its low-dim rows as its batches first reach each episode (``low_dim_up_front`` false): read at
    the start, every record of every component was read (~0.25 ms an episode: 2.5 s at 400 components of 10,000
    episodes, growing with the episodes), where a batch's first load of an episode keeps them anyway.
    """

    low_dim_up_front = False

    def __init__(
        self,
        lengths,
        infos: dict[str, FieldInfo],
        read: Callable[[int, list | None], dict],
        *,
        capacity: int,
        decode_on_load: bool,
        fields_alone: bool = False,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.infos = dict(infos)
        self.read = read
        self.decode_on_load = bool(decode_on_load)
        self.fields_alone = bool(fields_alone)
        self.frame_fields = [k for k, v in self.infos.items() if v.frames]
        self.capacity = int(capacity)
        self._small: dict[int, dict] = {}
        self.cache = LoadOnceLRU(self._load, self.capacity)

    def __getstate__(self):  # each process opens its own cache (it holds a lock and loaded episodes)
        state = dict(self.__dict__)
        state["cache"], state["_small"] = None, {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.cache = LoadOnceLRU(self._load, self.capacity)

    def _load(self, ep: int) -> dict:
        small = self._small.get(ep)
        fields = self.read(ep, None if small is None else self.frame_fields)
        if self.decode_on_load:
            fields = {k: v.decode_all() if isinstance(v, EncodedFrames) else v for k, v in fields.items()}
        if small is None:
            self._small[ep] = {k: v for k, v in fields.items() if k not in self.frame_fields}
        else:
            fields = dict(small, **fields)
        return fields

    def _small_of(self, ep: int) -> dict:
        """Episode ``ep``'s fields that are not frames, read without its frames the first time
        (:meth:`gather_low_dim`)."""
        small = self._small.get(ep)
        if small is None:
            wanted = [k for k in self.infos if k not in self.frame_fields]
            small = self._small.setdefault(ep, {k: v for k, v in self.read(ep, wanted).items() if k in wanted})
        return small

    def info(self, field: str) -> FieldInfo:
        """dtype and per-step shape of ``field``.

        Args:
            field: The field's name.

        Returns:
            Its :class:`FieldInfo`.

        Raises:
            KeyError: the source does not serve ``field`` (the message lists those it does).
        """
        try:
            return self.infos[field]
        except KeyError:
            raise KeyError(f"field {field!r} is not served by this source (it has: {sorted(self.infos)})") from None

    def gather(self, field, episodes, steps, pool=None):
        """``field`` at (episode, step) pairs, loading the episodes it needs.

        Episodes held as tensors (frames decoded on a GPU) are gathered where they are; arrays into numpy
        (:meth:`FrameSource.gather`). The first episode decides which.

        Args:
            field: The field's name.
            episodes: (B,) episode indices (at least one).
            steps: (B,) or (B, T) step indices.
            pool: Recycles a numpy output array, or ``None``.

        Returns:
            A ``steps.shape + step shape`` numpy array, or a tensor on the episodes' device.
        """
        first = self.cache.get(int(episodes[0]))[field]
        if not isinstance(first, torch.Tensor):
            return super().gather(field, episodes, steps, pool)
        info = self.info(field)
        B = len(episodes)
        rows = steps.reshape(B, -1)
        out = torch.empty((B, rows.shape[1]) + tuple(info.shape), dtype=first.dtype, device=first.device)
        uniq, inverse = np.unique(episodes, return_inverse=True)
        for i, e in enumerate(uniq.tolist()):
            at = np.flatnonzero(inverse == i)
            values = self.cache.get(e)[field]
            out[torch.from_numpy(at).to(first.device)] = values[torch.from_numpy(rows[at]).to(first.device)]
        return out.reshape(tuple(steps.shape) + tuple(info.shape))

    def take(self, field, episodes, steps, out):
        """``out[b, ...] = field[episodes[b]][steps[b, ...]]``, loading the episodes it needs.

        Small steps are copied with one fancy index per episode; large ones row by row (a slice where a row's steps are
        consecutive); compressed frames are decompressed straight into ``out``.

        Args:
            field: The field's name.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.
            out: The destination, ``steps.shape + step shape``.
        """
        info = self.info(field)
        B = len(episodes)
        rows = steps.reshape(B, -1)
        self.take_into(field, episodes, rows, out.reshape((B, rows.shape[1]) + tuple(info.shape)), np.arange(B))

    def take_into(self, field: str, episodes: np.ndarray, steps: np.ndarray, out: np.ndarray, rows: np.ndarray):
        """``out[rows[b]] = field[episodes[b]][steps[b]]``: what :meth:`take` and a mixture's joined read
        (``frames.joined_loads``) write, into any rows of a batch.

        Args:
            field: The field's name.
            episodes: (n,) episode indices.
            steps: (n, T) step indices.
            out: The batch, ``(N, T) + step shape``, C-contiguous.
            rows: (n,) distinct rows of ``out``.
        """
        order, groups = grouped(episodes)
        # episodes no other thread is loading are loaded first (LoadOnceLRU)
        for i, values in self.cache.iter_loaded([e for e, _, _ in groups]):
            _, a, z = groups[i]
            at = order[a:z]
            held = values[field]
            copy_windows(held.numpy() if isinstance(held, torch.Tensor) else held, steps[at], out, rows[at])

    def low_dim_of_unit(self, fields, episode: int) -> dict:
        """Episode ``episode``'s fields that are not frames, whole (:meth:`FrameSource.low_dim_of_unit`): the arrays
        its first load kept (read without its frames when it has not been loaded yet and ``fields_alone``), no copy.

        Args:
            fields: The fields' names (none of them frames).
            episode: The episode's index.

        Returns:
            ``{field: values}``, each ``(steps,) + step shape``.
        """
        if not self.fields_alone and int(episode) not in self._small:
            self.cache.get(int(episode))  # a first load keeps them (it reads the episode whole)
        small = self._small_of(int(episode))
        return {f: small[f] for f in fields}

    def gather_low_dim(self, fields, episodes: np.ndarray, steps: np.ndarray) -> dict:
        """Fields that are not frames at many (episode, step) pairs (:meth:`FrameSource.gather_low_dim`): with
        ``fields_alone``, each episode's non-frame fields read without its frames the first time and kept (as a
        first load keeps them); otherwise :meth:`gather_fields`.

        Args:
            fields: The fields' names.
            episodes: (B,) episode indices.
            steps: (B,) or (B, T) step indices.

        Returns:
            ``{field: numpy array of steps.shape + step shape}``.
        """
        if not self.fields_alone or any(self.info(f).frames for f in fields):
            return super().gather_low_dim(fields, episodes, steps)
        episodes, steps = np.asarray(episodes), np.asarray(steps)
        B = len(episodes)
        rows = steps.reshape(B, -1)
        out = {f: np.empty(steps.shape + tuple(self.infos[f].shape), self.infos[f].dtype) for f in fields}
        flat = {f: a.reshape((B, rows.shape[1]) + tuple(self.infos[f].shape)) for f, a in out.items()}
        uniq, inverse = np.unique(episodes, return_inverse=True)
        for i, e in enumerate(uniq.tolist()):
            at = np.flatnonzero(inverse == i)
            small = self._small_of(e)
            for f in fields:
                copy_windows(small[f], rows[at], flat[f], at)
        return out
