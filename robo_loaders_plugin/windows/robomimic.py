"""robomimic 0.3.0 ``SequenceDataset`` semantics as index arrays (no robomimic import).

Reproduces ``SequenceDataset.get_item`` exactly: the index map over demos (``frame_stack``/``seq_length`` and both
pads), padding by repeating the first/last step (the same as clamping positions into the demo), ``pad_mask``,
``goal_mode="last"``, ``next_obs``, and the per-demo field and dtype rules of the cache modes. Given a batch of
sample indices, :class:`SequenceWindows` returns (B,) demo indices and (B, T) step positions; :func:`collate` gathers
every key through a frame source into the nested layout robomimic's DataLoader collates.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from robo_loaders_plugin.core.errors import RoboLoadersError, SourceError
from robo_loaders_plugin.frames.base import NEAREST, PREVIOUS, FrameSource, gather, gather_at, lerp
from robo_loaders_plugin.windows.rates import resampled_length, to_recorded


class SequenceSetupError(RoboLoadersError, ValueError):
    """The demos cannot give SequenceDataset's samples with these options (robomimic would assert)."""


@dataclasses.dataclass(frozen=True)
class SequenceOptions:
    """SequenceDataset's arguments, as robomimic's ``dataset_factory`` passes them."""

    obs_keys: tuple
    dataset_keys: tuple
    frame_stack: int = 1
    seq_length: int = 1
    pad_frame_stack: bool = True
    pad_seq_length: bool = True
    get_pad_mask: bool = False
    goal_mode: str | None = None
    load_next_obs: bool = True
    hdf5_cache_mode: str | None = None

    @property
    def reads_next_obs(self) -> bool:
        """Whether samples read ``next_obs/``: when it is loaded, or for ``goal_mode="last"``'s goal."""
        return self.load_next_obs or self.goal_mode == "last"

    def field_names(self) -> list[str]:
        """Every per-demo field a sample uses: dataset keys, ``obs/<k>`` and (if used) ``next_obs/<k>``."""
        prefixes = ["obs"] + (["next_obs"] if self.reads_next_obs else [])
        return list(self.dataset_keys) + [f"{p}/{k}" for p in prefixes for k in self.obs_keys]


def sequence_counts(
    lengths,
    frame_stack: int,
    seq_length: int,
    pad_frame_stack: bool,
    pad_seq_length: bool,
    names=None,
    where: str = "",
):
    """Number of samples per demo, exactly as ``SequenceDataset.load_demo_info`` counts them (an array; numpy over
    the demos, the first demo robomimic would fail on named in the error).

    Args:
        lengths: Steps of each demo.
        frame_stack: Observation steps per sample.
        seq_length: Steps per sample.
        pad_frame_stack: Pad the start of a demo (robomimic's ``pad_frame_stack``).
        pad_seq_length: Pad the end of a demo (robomimic's ``pad_seq_length``).
        names: Each demo's name, for the error (``None``: demos named by position).
        where: The file or shards the demos are in, for the error (``""``: not named).

    Returns:
        int64 samples per demo.

    Raises:
        SequenceSetupError: a demo robomimic would fail on: no steps, too short for ``frame_stack`` and
            ``seq_length`` without padding, or shorter than ``frame_stack`` without ``pad_frame_stack``; the
            message names the file, the demo and the ``train.*`` settings.
    """
    L = np.asarray(lengths, dtype=np.int64).reshape(-1)
    n = L.copy()
    if not pad_frame_stack:
        n -= frame_stack - 1
    if not pad_seq_length:
        n -= seq_length - 1
    # per demo, the first failing check in robomimic's order (0: none)
    problem = np.zeros(len(L), dtype=np.int8)
    if pad_seq_length:
        problem[L < 1] = 1
        n = np.maximum(n, 1)
    else:
        problem[n < 1] = 2
    if not pad_frame_stack:
        problem[(problem == 0) & (frame_stack > L)] = 3
    bad = np.flatnonzero(problem)
    if bad.size:
        i = int(bad[0])
        demo = f"{where + ': ' if where else ''}{names[i] if names is not None else f'demo number {i}'}"
        others = f" ({len(bad) - 1} other demo(s) too)" if len(bad) > 1 else ""
        if problem[i] == 1:
            raise SequenceSetupError(f"{demo} has no steps{others}; robomimic's SequenceDataset fails on it too")
        if problem[i] == 2:
            raise SequenceSetupError(
                f"{demo} has {int(L[i])} steps{others}: too short for frame_stack={frame_stack}, "
                f"seq_length={seq_length} without padding (train.pad_seq_length/train.pad_frame_stack false); "
                "robomimic's SequenceDataset fails on it too: set them true, or leave such demos out with a filter "
                "key (train.hdf5_filter_key)"
            )
        raise SequenceSetupError(
            f"{demo} has {int(L[i])} steps{others}: shorter than frame_stack={frame_stack} with "
            "train.pad_frame_stack false; robomimic's SequenceDataset fails on it too (assert "
            "index_in_demo < demo_length): set train.pad_frame_stack true, or leave such demos out with a filter key "
            "(train.hdf5_filter_key)"
        )
    return n


class SequenceWindows:
    """SequenceDataset's index over demos of the given lengths; with ``rate`` (recorded steps per target step, e.g.
    2.0 for a 10 Hz policy on 20 Hz data), over the demos as if recorded at the target rate. ``names`` and
    ``where`` (the demos' names, their file) name a demo robomimic would fail on in the error
    (:func:`sequence_counts`)."""

    def __init__(self, lengths, opts: SequenceOptions, rate: float = 1.0, names=None, where: str = ""):
        self.opts = opts
        self.rate = float(rate)
        self.recorded_lengths = np.asarray(lengths, dtype=np.int64)
        self.lengths = (
            self.recorded_lengths
            if self.rate == 1.0
            else np.array([resampled_length(int(L), self.rate) for L in self.recorded_lengths], dtype=np.int64)
        )
        self.F, self.S = int(opts.frame_stack), int(opts.seq_length)
        self.counts = np.asarray(
            sequence_counts(self.lengths, self.F, self.S, opts.pad_frame_stack, opts.pad_seq_length, names, where),
            dtype=np.int64,
        )
        # int32: a million windows' demo index in 4 MB, not 8 (demos are far fewer than 2**31)
        self.episode_of = np.repeat(np.arange(len(self.lengths), dtype=np.int32), self.counts)
        self.first = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.offset = 0 if opts.pad_frame_stack else self.F - 1
        self._deltas = np.arange(-(self.F - 1), self.S, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.episode_of)

    def index(self, episodes, windows) -> np.ndarray:
        """Sample index of window ``windows[j]`` of demo ``episodes[j]`` (the pipeline plans (demo, window) pairs).

        Args:
            episodes: Demo indices.
            windows: Window indices within each demo (``0 <= windows[j] < counts[episodes[j]]``).

        Returns:
            int64 sample indices, the shape of the broadcast arguments.
        """
        return self.first[np.asarray(episodes)] + np.asarray(windows)

    def check(self, indices) -> np.ndarray:
        """Sample indices as a flat int64 array, negative ones counted from the end (as a Python sequence's).

        Args:
            indices: Sample indices (any shape or sequence).

        Returns:
            The indices in ``[0, len(self))``.

        Raises:
            IndexError: an index out of range (the first five are listed).
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"index out of range for {n} samples: {idx[(idx < -n) | (idx >= n)][:5].tolist()}")
        return idx % n if n else idx

    def locate(self, idx: np.ndarray):
        """Where samples' steps are: T = ``frame_stack - 1`` steps before each sample's step through
        ``seq_length - 1`` after; clamping the positions into the demo is robomimic's padding by repetition.

        Args:
            idx: Sample indices (B,), already checked.

        Returns:
            ``(demos (B,), raw positions (B, T), clamped positions (B, T))``, positions in (resampled) demo steps.
        """
        ep = self.episode_of[idx]
        raw = (idx - self.first[ep] + self.offset)[:, None] + self._deltas[None, :]
        return ep, raw, np.clip(raw, 0, self.lengths[ep][:, None] - 1)

    def first_positions(self) -> np.ndarray:
        """The first (clamped) step of every sample's window, in its demo: the window covers at most
        ``frame_stack + seq_length - 1`` steps from it. Why: a frame source of parts of demos (``frames.chunks``)
        serves a sample from the part holding its first step, loaded with that many steps after its own.

        Returns:
            int64 steps, one per sample, in sample order.
        """
        idx = np.arange(len(self), dtype=np.int64)
        ep = self.episode_of
        return np.clip(idx - self.first[ep] + self.offset - (self.F - 1), 0, self.lengths[ep] - 1)

    def goal_positions(self, ep: np.ndarray) -> np.ndarray:
        """(B, 1) step of ``goal_mode="last"``'s goal: the last next_obs SequenceDataset can index.

        Args:
            ep: Demo indices (B,).

        Returns:
            int64 (B, 1) steps.
        """
        return (self.lengths[ep] - (0 if self.opts.pad_seq_length else self.S - 1) - 1)[:, None]

    def transition_ends(self, ep: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where the transitions that start at target ``steps`` end in the recorded demo: what ``next_obs``,
        ``rewards`` and ``dones`` are read at when the rate is converted.

        Why: a transition at the target rate goes from target step ``t`` to ``t + 1``, recorded position
        ``(t + 1) * rate``; reading ``next_obs`` at ``t``'s own recorded position served the observation one recorded
        step later, not one target step (at half the rate ``next_obs[t]`` was ``obs`` at ``2t + 1``, not ``2t + 2``),
        and point-sampled ``dones`` never served the demo's last one (a reviewer's reproduction). A recorded demo's
        ``next_obs[j]`` is ``obs[j + 1]``, so the next observation at position ``p`` is ``next_obs`` at ``p - 1`` (up
        to the demo's last ``next_obs``), or ``obs`` at ``p`` where ``p < 1`` (upsampling: between the first two
        observations).

        Args:
            ep: Demo indices (B,).
            steps: (B, T) target steps, clamped into each demo.

        Returns:
            ``(next_obs positions, before_first, last steps)``: fractional positions of ``next_obs`` (B, T) clamped to
            the demo's; where ``before_first``, ``obs`` at ``next_obs position + 1`` instead; and the last recorded
            step each transition covers (int64, for ``rewards`` and ``dones``).
        """
        end = np.asarray(self.recorded(np.asarray(steps) + 1), dtype=np.float64)
        last = (self.recorded_lengths[ep] - 1).reshape((-1,) + (1,) * (end.ndim - 1))
        before_first = end < 1.0 - 1e-9
        positions = np.clip(end - 1.0, -1.0, last)
        ends = np.clip(np.ceil(end - 1e-6).astype(np.int64) - 1, 0, last)
        return positions, before_first, ends

    def recorded(self, steps: np.ndarray) -> np.ndarray:
        """Steps of the (resampled) demo as positions in the recorded demo (``windows.rates.to_recorded``).

        Args:
            steps: Steps at the target rate.

        Returns:
            Positions in recorded steps, fractional between recorded steps; the steps themselves at rate 1.
        """
        return to_recorded(steps, self.rate)


def episode_fields(read, length: int, opts: SequenceOptions, where: str, names=None) -> dict:
    """One demo's arrays as SequenceDataset serves them: ``obs/<k>`` and ``next_obs/<k>`` in file dtypes, dataset
    keys cast to float32 under ``hdf5_cache_mode`` all/low_dim (a missing key becomes zeros (L, 1), as robomimic
    substitutes), except a dataset key naming an observation (``obs/<k>``), served as stored as robomimic does (a
    reviewer's reproduction: cast, it replaced the observation of the same field name with float32 values).

    Args:
        read: ``read(key)`` returns the demo's array, or ``None`` when the demo lacks it.
        length: The demo's steps (the rows of a substituted key).
        opts: The sequence options (which fields, which cache mode).
        where: Names the demo in messages (``<file>: data/demo_3``).
        names: Only these fields (a reader of parts of demos reads camera frames per part, the rest here);
            ``None``: every field of :meth:`SequenceOptions.field_names`.

    Returns:
        ``{field: array}`` for every field asked for.

    Raises:
        SourceError: an obs key is missing, or a dataset key is missing with ``hdf5_cache_mode`` null.
    """
    cache_mode = opts.hdf5_cache_mode
    wanted = None if names is None else set(names)
    out = {}
    for name in opts.field_names()[len(opts.dataset_keys) :]:
        if wanted is not None and name not in wanted:
            continue
        a = read(name)
        if a is None:
            raise SourceError(
                f"{where}/{name} is missing; check the obs keys in observation.modalities or hdf5_load_next_obs"
            )
        out[name] = a
    for k in opts.dataset_keys:
        if wanted is not None and k not in wanted:
            continue
        if "/" in k:  # obs/<key>: robomimic reads the observation as stored (get_dataset_for_ep), never cast
            if k not in out:  # the obs field of the same name, when served, is that array already
                a = read(k)
                if a is None:
                    raise SourceError(f"{where}/{k} is missing; remove {k!r} from train.dataset_keys or add it")
                out[k] = a
            continue
        a = read(k)
        if a is not None:
            out[k] = a.astype(np.float32) if cache_mode in ("all", "low_dim") else a
        elif cache_mode in ("all", "low_dim"):
            out[k] = np.zeros((length, 1), dtype=np.float32)  # what SequenceDataset substitutes
        else:
            raise SourceError(
                f"{where}/{k} is missing; with hdf5_cache_mode=null robomimic would fail on it too. "
                f"Remove {k!r} from train.dataset_keys or add it to the file"
            )
    return out


def check_step_shapes(
    served: dict, shapes: dict, where: str, first: str, lacks=(), first_lacks=(), dtypes=None
) -> None:
    """Check one demo's fields (:func:`episode_fields`) against the step shapes of the demo a reader of demos laid
    out its fields from, and their dtypes where given.

    Why: robomimic substitutes zeros of shape (L, 1) for a dataset key a demo lacks (``rewards``, ``dones``), so a
    key some demos lack has another step shape there than in the others; a backend that copies demos into one batch
    failed with numpy's bare broadcast error (robomimic's own DataLoader cannot stack them either). And a key stored
    in another dtype by some demos (merged files: a depth map uint16 in one demo, float32 in [0, 1) in the next) was
    cast into the first demo's dtype by numpy's unsafe copy into the batch, the fractions served as zeros, silently
    (a reviewer's reproduction); the backends that store every demo at build refuse such a file there.

    Args:
        served: The demo's ``{field: array}``.
        shapes: ``{field: step shape}`` of the first demo.
        where: Names the demo (``<file>: demo_3``).
        first: Names the first demo.
        lacks: The dataset keys this demo lacks (served as robomimic's zeros).
        first_lacks: The dataset keys the first demo lacks.
        dtypes: ``{field: dtype}`` of the first demo (``None``: not checked).

    Raises:
        SourceError: a field of another step shape or dtype, naming it, both demos and what to change.
    """
    for k, v in served.items():
        want = shapes.get(k)
        if want is None or tuple(v.shape[1:]) == tuple(want):
            continue
        fix = f"add {k!r} to every demo or remove it from train.dataset_keys"
        zeros = "robomimic serves zeros of shape (steps, 1) for a dataset key a demo lacks"
        if k in lacks:
            raise SourceError(f"{where} lacks {k} ({zeros}), {first} holds it of step shape {tuple(want)}: {fix}")
        if k in first_lacks:
            raise SourceError(f"{where}: {k} has step shape {tuple(v.shape[1:])}, {first} lacks it ({zeros}): {fix}")
        raise SourceError(
            f"{where}: {k} has step shape {tuple(v.shape[1:])}, {first} {tuple(want)}; every demo must hold a key "
            "with one step shape"
        )
    for k, v in served.items():
        want = (dtypes or {}).get(k)
        if want is not None and np.dtype(v.dtype) != np.dtype(want):
            raise SourceError(
                f"{where}: {k} is stored as {np.dtype(v.dtype)}, in {first} as {np.dtype(want)}; every demo must store "
                f"a key in one dtype: convert {k} to one dtype in every demo (robomimic's own collate casts them to "
                "a common type; this backend copies every demo into one batch of the first demo's dtype)"
            )


# dataset keys that are a transition's outcome: with the rate converted, read at the last recorded step the
# transition to the next target step covers (the demo's last done and reward are served), never by mode
TRANSITION_KEYS = ("rewards", "dones")


def _before_first(frames: FrameSource, name: str, ep: np.ndarray, p: np.ndarray, mode: str, shape) -> object:
    """``next_obs/<k>``'s observation at positions ``p`` in ``[0, 1)`` (upsampling): between the demo's first
    observation and its first ``next_obs`` (which is the second observation, or the final state of a 1-step demo),
    by ``mode`` as ``frames.base.gather_at`` reads between recorded steps."""
    zero = np.zeros(shape, dtype=np.int64)
    before = gather(frames, f"obs/{name.split('/', 1)[1]}", ep, zero)
    if mode == PREVIOUS:
        return before
    after = gather(frames, name, ep, zero)
    if mode == NEAREST:
        return _select(p >= 0.5 - 1e-6, after, before)
    return lerp(before, after, np.clip(p, 0.0, 1.0))


def _select(mask: np.ndarray, a, b):
    """``a`` where ``mask`` (per position, broadcast over the per-step dims), else ``b`` (numpy or torch, as ``b``)."""
    if isinstance(b, np.ndarray):
        return np.where(mask.reshape(mask.shape + (1,) * (b.ndim - mask.ndim)), a, b)
    m = torch.as_tensor(mask, device=b.device).reshape(mask.shape + (1,) * (b.ndim - mask.ndim))
    return torch.where(m, a, b)


def collate(frames: FrameSource, windows: SequenceWindows, indices, pool=None, modes: dict | None = None) -> dict:
    """Collated arrays (leading batch dim; numpy, or tensors for device-resident frame sources) for sample
    indices: the nested dict robomimic's ``default_collate`` builds from SequenceDataset samples.

    Args:
        frames: The frame source every field is read from.
        windows: The sample index.
        indices: Sample indices (negative ones count from the end).
        pool: Recycles the gathered arrays (a ``storage.buffers.BufferPool``; ``None``: new arrays).
        modes: How each field is read between recorded steps when ``windows`` converts the rate
            (``windows.rates``); unused at rate 1. ``next_obs`` is then the observation at the next target step
            and ``rewards``/``dones`` those of the transition's last recorded step
            (:meth:`SequenceWindows.transition_ends`).

    Returns:
        The dataset keys (B, T, ...), ``obs`` (and ``next_obs`` when loaded) as ``{key: (B, T, ...)}``,
        ``goal_obs`` as ``{key: (B, ...)}`` with ``goal_mode="last"``, and ``pad_mask`` (B, T, 1) at every level
        with ``get_pad_mask``.

    Raises:
        IndexError: an index out of range.
    """
    opts = windows.opts
    idx = windows.check(indices)
    ep, raw, pos = windows.locate(idx)
    pad_mask = None
    if opts.get_pad_mask:
        pad_mask = ((raw >= 0) & (raw < windows.lengths[ep][:, None]))[..., None]

    def field(name, steps):
        if windows.rate == 1.0:
            return gather(frames, name, ep, steps, pool)
        if name.startswith("next_obs/"):  # the observation at the next target step (transition_ends)
            at, before_first, _ = windows.transition_ends(ep, steps)
            out = gather_at(frames, name, ep, np.maximum(at, 0.0), modes[name], pool)
            if not before_first.any():
                return out
            return _select(before_first, _before_first(frames, name, ep, at + 1.0, modes[name], np.shape(steps)), out)
        if name in TRANSITION_KEYS:  # what the transition to the next target step ends with: its last recorded step
            return gather(frames, name, ep, windows.transition_ends(ep, steps)[2], pool)
        return gather_at(frames, name, ep, windows.recorded(steps), modes[name], pool)

    batch = {k: field(k, pos) for k in opts.dataset_keys}
    if pad_mask is not None:
        batch["pad_mask"] = pad_mask
    for prefix in ["obs"] + (["next_obs"] if opts.load_next_obs else []):
        batch[prefix] = {k: field(f"{prefix}/{k}", pos) for k in opts.obs_keys}
        if pad_mask is not None:
            batch[prefix]["pad_mask"] = pad_mask
    if opts.goal_mode == "last":
        g = windows.goal_positions(ep)
        batch["goal_obs"] = {k: field(f"next_obs/{k}", g)[:, 0] for k in opts.obs_keys}
        if pad_mask is not None:
            batch["goal_obs"]["pad_mask"] = np.ones((len(idx), 1), dtype=bool)
    return batch


def row(batch: dict, b: int) -> dict:
    """Sample ``b`` of a collated batch, as numpy arrays like SequenceDataset's (views of a numpy batch): how
    ``ds[i]`` is served from the batch path.

    Args:
        batch: A batch from :func:`collate` (nested dicts of arrays or tensors).
        b: The sample's position in the batch.

    Returns:
        The same nesting, each array at ``b`` (tensors copied to numpy on the CPU; a 0-d one as the numpy scalar
        that indexing a numpy batch gives, as robomimic's ``goal[k][0]`` of a 1-d observation is).
    """
    return {k: row(v, b) if isinstance(v, dict) else _at(v, b) for k, v in batch.items()}


def _at(v, b: int):
    if not isinstance(v, torch.Tensor):
        return v[b]
    x = v[b].cpu().numpy()
    return x[()] if x.ndim == 0 else x


def to_torch(batch: dict, device=None) -> dict:
    """A collated batch as tensors: numpy arrays wrapped without copying (moved to ``device`` when given), tensors
    as they are.

    Args:
        batch: A batch from :func:`collate` (nested dicts).
        device: Where numpy arrays are moved, with a non-blocking copy (``None``: left on the CPU).

    Returns:
        The same nesting, as tensors.
    """
    out = {}
    for k, v in batch.items():
        if isinstance(v, dict):
            out[k] = to_torch(v, device)
        elif isinstance(v, torch.Tensor):
            out[k] = v
        else:
            out[k] = torch.from_numpy(v) if device is None else torch.from_numpy(v).to(device, non_blocking=True)
    return out
