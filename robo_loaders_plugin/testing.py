"""Parity checks for backends: run a backend against the real native loader and fail on the first difference.

Every built-in backend is held to these, and a third-party backend proves itself with them
(``examples/jpeg_backend``). They build the native dataset with the framework's own code (robomimic's
``SequenceDataset`` through its own ``dataset_factory``; the ``LeRobotDataset`` you pass), build the backend's
dataset through the same adapter path training uses (options checked, kind recorded), and compare:

- :func:`assert_same_samples`: ``ours[i]`` against ``native[i]`` (same keys in the same order, types, dtypes,
  shapes, and bytes) for the first and last index of every episode and random ones, or every index
  (``exhaustive=True``);
- :func:`assert_same_batches`: whole collated batches (``collate(indices)`` of an ``indexed`` backend) against
  the framework's ``default_collate`` of the native samples, batches that together hold the first and last index of
  every episode (or every index);
- :func:`assert_same_pass`: one training pass as the framework drives it: for ``sample`` and ``indexed`` kinds,
  batch for batch the native DataLoader's (same order, same RNG use); for the ``batch`` kind, every native sample
  served exactly once (as a multiset of contents).

Why every episode: a backend's bugs sit where episodes (and the files holding them) begin and end, and random
indices alone skip whole episodes of a larger dataset. Every key of a sample is compared, so every camera is. A
one-pixel error in one frame inside an episode is found for sure only where that frame is compared: by
:func:`assert_same_pass` (every sample a training pass serves) or with ``exhaustive=True``.

Lossy backends state their tolerance per field with ``min_psnr`` (``{"obs/agentview_image": 35.0}``): those fields
must match dtype and shape and reach that PSNR; every other field must still be byte-identical. The checks raise
``AssertionError`` naming the sample, field and what differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class RobomimicCase:
    """What robomimic's ``train()`` would build a dataset from (see :func:`robomimic_case`)."""

    config: Any
    obs_keys: tuple
    filter_by_attribute: str | None = None
    dataset_path: str | None = None
    framework: str = "robomimic"

    def native(self):
        """robomimic's own ``SequenceDataset`` for this case."""
        from robo_loaders_plugin.extend import robomimic_sequence_dataset

        return robomimic_sequence_dataset(self.config, list(self.obs_keys), self.filter_by_attribute, self.dataset_path)

    def build(self, backend: str, options: Mapping | None):
        """The backend's dataset for this case, built as ``train.data_backend`` builds it.

        Args:
            backend: The backend's registered name.
            options: Its options (``train.data_backend_kwargs``).

        Returns:
            The dataset, recorded for the adapter's dispatch.
        """
        from robo_loaders_plugin.robomimic.integration import build_dataset, choose

        return build_dataset(
            self.config,
            list(self.obs_keys),
            choose(backend, **dict(options or {})),
            self.filter_by_attribute,
            self.dataset_path,
        )

    def episode_indices(self, native) -> list[np.ndarray]:
        """The sample indices of each demo of ``native``, in its order.

        Args:
            native: This case's ``SequenceDataset`` (:meth:`native`).

        Returns:
            One array of indices per demo.
        """
        from robo_loaders_plugin.robomimic.compat import demo_of_index

        demo = demo_of_index(native)
        return [np.flatnonzero(demo == d) for d in range(len(native.demos)) if np.any(demo == d)]


@dataclasses.dataclass(frozen=True)
class LeRobotCase:
    """A ``LeRobotDataset`` as LeRobot's factory built it (see :func:`lerobot_case`)."""

    dataset: Any
    framework: str = "lerobot"

    def native(self):
        """The ``LeRobotDataset`` of this case."""
        return self.dataset

    def build(self, backend: str, options: Mapping | None):
        """The backend's dataset for this case, built as ``lerobot-train --dataset.backend`` builds it.

        Args:
            backend: The backend's registered name.
            options: Its options (``--dataset.backend_kwargs``).

        Returns:
            The dataset, recorded for the adapter's dispatch.
        """
        from robo_loaders_plugin.lerobot.integration import build_dataset, choose

        return build_dataset(self.dataset, choose(backend, **dict(options or {})))

    def episode_indices(self, native) -> list[np.ndarray]:
        """The sample indices of each episode of ``native``, in its order (LeRobot's episode table, mapped to the
        dataset's rows when it holds some episodes only).

        Args:
            native: This case's ``LeRobotDataset``.

        Returns:
            One array of indices per episode.
        """
        from robo_loaders_plugin.lerobot.dataset import episode_bounds

        episodes = np.arange(native.meta.total_episodes) if native.episodes is None else np.asarray(native.episodes)
        starts, ends = episode_bounds(native.meta, episodes)
        relative = native.absolute_to_relative_idx
        return [
            np.arange(s, e) if relative is None else np.array([relative[a] for a in range(s, e)])
            for s, e in zip(starts.tolist(), ends.tolist())
            if e > s
        ]


def robomimic_case(config, obs_keys, filter_by_attribute=None, dataset_path=None) -> RobomimicCase:
    """A robomimic parity case.

    Args:
        config: robomimic's config (its ``train.*`` settings decide the windows), with the observation utils
            initialised (``ObsUtils.initialize_obs_utils_with_config``) as ``train()`` does.
        obs_keys: The observation keys to load.
        filter_by_attribute: A filter key of the HDF5's masks (``None``: every demo).
        dataset_path: The HDF5 (default: ``config.train.data``).

    Returns:
        The case to pass to the ``assert_same_*`` functions.
    """
    return RobomimicCase(config, tuple(obs_keys), filter_by_attribute, dataset_path)


def lerobot_case(native) -> LeRobotCase:
    """A LeRobot parity case.

    Args:
        native: A ``LeRobotDataset`` (with the ``delta_timestamps``, episodes and transforms to test).

    Returns:
        The case to pass to the ``assert_same_*`` functions.
    """
    return LeRobotCase(native)


def reset_plugins() -> None:
    """Forget the loaded plugins and the resolved backend choices, so that the next lookup reads the ``robo_loaders``
    entry points again: for a test that installs a plugin's entry point at run time (``sys.path``, a
    ``.dist-info``), before and after it."""
    from robo_loaders_plugin.core.registry import reset_cache

    reset_cache()


# -- comparisons -------------------------------------------------------------------------------------------------
def psnr(a, b) -> float:
    """Peak signal-to-noise ratio of ``a`` against ``b`` in dB.

    Args:
        a: The frames to judge (array or tensor).
        b: The reference frames, same shape; their dtype sets the peak (255 for integer frames, 1.0 for float).

    Returns:
        The PSNR in dB (``inf`` when equal).
    """
    a, b = _array(a), _array(b)
    peak = 255.0 if np.issubdtype(b.dtype, np.integer) else 1.0
    a, b = a.astype(np.float64), b.astype(np.float64)
    mse = float(np.mean((a - b) ** 2)) if a.size else 0.0
    return math.inf if mse == 0 else 10.0 * math.log10(peak * peak / mse)


def _array(x) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    return np.asarray(x)


def _lossy(path: str, min_psnr: Mapping[str, float] | None) -> float | None:
    """The PSNR floor of the field at ``path``: a name matches the whole path or its last components, never part of
    a component (``agentview_image`` must not also excuse ``obs/my_agentview_image`` from the byte comparison)."""
    if not min_psnr:
        return None
    for name, db in min_psnr.items():
        if path == name or path.endswith(f"/{name}"):
            return float(db)
    return None


def assert_same(
    ours, theirs, where: str = "sample", min_psnr: Mapping[str, float] | None = None, _path: str = ""
) -> None:
    """``ours`` equals ``theirs``: the same nested keys in the same order, types, dtypes, shapes and bytes; fields
    named in ``min_psnr`` may differ but must reach that PSNR.

    Args:
        ours: The backend's sample or batch (nested dicts of arrays/tensors/values).
        theirs: The native one.
        where: Names the sample in the message.
        min_psnr: ``{field: dB}`` of lossy fields (a field's path, e.g. ``obs/agentview_image``).

    Raises:
        AssertionError: naming ``where``, the field and the difference.
    """
    at = f"{where}:{_path or '/'}"
    if isinstance(theirs, Mapping):
        assert isinstance(ours, Mapping), f"{at}: {type(ours).__name__} is not a dict"
        assert list(ours) == list(theirs), f"{at}: keys {list(ours)} != {list(theirs)}"
        for k in theirs:
            assert_same(ours[k], theirs[k], where, min_psnr, f"{_path}/{k}" if _path else str(k))
        return
    if isinstance(theirs, (list, tuple)) and theirs and isinstance(theirs[0], str):
        assert list(ours) == list(theirs), f"{at}: {ours!r} != {theirs!r}"
        return
    if isinstance(theirs, (str, int, float, bool)):
        assert ours == theirs and type(ours) is type(theirs), f"{at}: {ours!r} != {theirs!r}"
        return
    assert type(ours) is type(theirs), f"{at}: {type(ours).__name__} is not {type(theirs).__name__}"
    a, b = _array(ours), _array(theirs)
    assert a.dtype == b.dtype, f"{at}: dtype {a.dtype} != {b.dtype}"
    assert a.shape == b.shape, f"{at}: shape {a.shape} != {b.shape}"
    floor = _lossy(_path, min_psnr)
    if floor is None:
        assert a.tobytes() == b.tobytes(), f"{at}: values differ (max abs diff {_max_diff(a, b)})"
    else:
        got = psnr(a, b)
        assert got >= floor, f"{at}: PSNR {got:.1f} dB is below the stated {floor:g} dB"


def _max_diff(a: np.ndarray, b: np.ndarray):
    try:
        return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    except (TypeError, ValueError):
        return "n/a"


def _rows(batch, n: int) -> list:
    def row(x, r):
        if isinstance(x, Mapping):
            return {k: row(v, r) for k, v in x.items()}
        return x[r]

    return [row(batch, r) for r in range(n)]


def _batch_len(batch) -> int:
    for v in batch.values():
        return _batch_len(v) if isinstance(v, Mapping) else len(v)
    return 0


def _content_key(sample, min_psnr, _path: str = "") -> bytes:
    """A digest of everything exact in a sample (lossy fields left out): what identifies it in a pass."""
    h = hashlib.sha256()
    if isinstance(sample, Mapping):
        for k, v in sample.items():
            p = f"{_path}/{k}" if _path else str(k)
            h.update(p.encode() + _content_key(v, min_psnr, p))
        return h.digest()
    if _lossy(_path, min_psnr) is not None:
        return b"lossy"
    if isinstance(sample, str):
        return sample.encode()
    a = _array(sample)
    h.update(f"{a.dtype.str}{a.shape}".encode() + np.ascontiguousarray(a).tobytes())
    return h.digest()


def _episode_edges(case, native) -> list[int]:
    """The first and last index of every episode: where windows pad and clamp, and where a backend's episodes (and
    the files holding them) begin and end."""
    edges: set[int] = set()
    for idx in case.episode_indices(native):
        edges.update((int(idx[0]), int(idx[-1])))
    return sorted(edges)


def _indices(case, native, indices, count: int, seed: int, exhaustive: bool) -> list[int]:
    n = len(native)
    if indices is not None:
        return [int(i) for i in indices]
    if exhaustive:
        return list(range(n))
    rng = np.random.default_rng(seed)
    picked = rng.choice(n, size=min(count, n), replace=False).tolist() if n else []
    return sorted(set(picked) | set(_episode_edges(case, native)))


def _batch_indices(case, native, batch_size: int, batches: int, seed: int, exhaustive: bool) -> list[list[int]]:
    """Batches that together hold every index that must be compared (every episode's edges, or every index), the
    other places filled with random indices; each batch ends with its first index again (a repeated index)."""
    n = len(native)
    if batch_size < 1 or n == 0:
        return []
    rng = np.random.default_rng(seed)
    must = np.arange(n) if exhaustive else np.asarray(_episode_edges(case, native), dtype=np.int64)
    fresh = max(batch_size - 1, 1)  # places per batch before its repeated index
    count = max(batches, -(-len(must) // fresh))
    pool = np.concatenate([must, rng.integers(0, n, size=count * fresh - len(must))])
    pool = rng.permutation(pool).tolist()
    out = []
    for b in range(count):
        idx = pool[b * fresh : (b + 1) * fresh]
        out.append(idx + idx[:1] if batch_size > 1 else idx)
    return out


def episode_aware_sampler(native, seed: int = 0, drop_n_last: int = 0):
    """The sampler ``lerobot-train`` builds for a dataset (``EpisodeAwareSampler`` over its episodes, shuffled), for
    a DataLoader compared against the native one.

    Args:
        native: The ``LeRobotDataset`` (or a mixture with the same ``meta``, ``episodes`` and
            ``absolute_to_relative_idx``).
        seed: The sampler's seed.
        drop_n_last: Frames dropped at the end of every episode (``drop_n_last_frames``).

    Returns:
        The ``EpisodeAwareSampler``.
    """
    from lerobot.datasets import EpisodeAwareSampler

    return EpisodeAwareSampler(
        native.meta.episodes["dataset_from_index"],
        native.meta.episodes["dataset_to_index"],
        episode_indices_to_use=native.episodes,
        drop_n_last_frames=drop_n_last,
        shuffle=True,
        seed=seed,
        absolute_to_relative_idx=native.absolute_to_relative_idx,
    )


# -- the checks ----------------------------------------------------------------------------------------------------
def assert_same_samples(
    case,
    backend: str,
    options: Mapping | None = None,
    *,
    indices=None,
    count: int = 200,
    seed: int = 0,
    min_psnr: Mapping[str, float] | None = None,
    exhaustive: bool = False,
):
    """The backend's ``dataset[i]`` equals the native ``dataset[i]``: every key of the sample (so every camera), for
    the first and last index of every episode and ``count`` random indices, or for every index.

    A one-pixel error in one frame inside an episode is found for sure only where that frame is compared: with
    ``exhaustive=True``, or by :func:`assert_same_pass` (every sample a training pass serves).

    Args:
        case: :func:`robomimic_case` or :func:`lerobot_case`.
        backend: The backend's registered name.
        options: Its options (as ``train.data_backend_kwargs`` / ``--dataset.backend_kwargs`` would give them).
        indices: The indices to compare, only these (default: the first and last index of every episode, plus
            ``count`` random ones: every index when ``count`` is at least the dataset's length).
        count: How many random indices besides every episode's first and last, when ``indices`` is not given.
        seed: Picks the random indices.
        min_psnr: ``{field: dB}`` for a lossy backend's lossy fields; every other field must be byte-identical.
        exhaustive: Compare every index (its cost grows with the dataset: one native sample per index).

    Returns:
        The backend's dataset (for further checks).

    Raises:
        AssertionError: the first difference, naming the index and field; or a length that differs.
        ValueError: both ``indices`` and ``exhaustive=True`` given.
    """
    if indices is not None and exhaustive:
        raise ValueError("assert_same_samples: give indices or exhaustive=True, not both")
    native, ours = case.native(), case.build(backend, options)
    assert len(ours) == len(native), f"{backend}: {len(ours)} samples, the native loader has {len(native)}"
    for i in _indices(case, native, indices, count, seed, exhaustive):
        assert_same(ours[i], native[i], f"{backend}[{i}]", min_psnr)
    return ours


def assert_same_batches(
    case,
    backend: str,
    options: Mapping | None = None,
    *,
    batch_size: int = 16,
    batches: int = 4,
    seed: int = 0,
    min_psnr: Mapping[str, float] | None = None,
    exhaustive: bool = False,
):
    """An ``indexed`` backend's ``collate(indices)`` equals the framework's ``default_collate`` of the native
    samples at those indices, for batches that together hold the first and last index of every episode (or every
    index), the other places random; each batch repeats one index.

    Args:
        case: :func:`robomimic_case` or :func:`lerobot_case`.
        backend: The backend's registered name (its dataset must have ``collate``).
        options: Its options.
        batch_size: Indices per batch.
        batches: How many batches at least (more when every episode's first and last index need more).
        seed: Picks the indices and their order.
        min_psnr: ``{field: dB}`` for lossy fields.
        exhaustive: Batches that together hold every index.

    Returns:
        The backend's dataset.

    Raises:
        AssertionError: the first difference, naming the batch, its indices and the field.
    """
    import torch.utils.data

    native, ours = case.native(), case.build(backend, options)
    assert hasattr(ours, "collate"), f"{backend}: {type(ours).__name__} has no collate(indices) (not indexed)"
    for b, idx in enumerate(_batch_indices(case, native, batch_size, batches, seed, exhaustive)):
        theirs = torch.utils.data.default_collate([native[i] for i in idx])
        assert_same(ours.collate(idx), theirs, f"{backend} batch {b} (indices {idx})", min_psnr)
    return ours


def assert_same_pass(
    case,
    backend: str,
    options: Mapping | None = None,
    *,
    batch_size: int = 16,
    num_workers: int = 0,
    seed: int = 0,
    min_psnr: Mapping[str, float] | None = None,
):
    """One training pass, driven the way the framework drives it, serves the native pass.

    robomimic: the DataLoader its ``train()`` builds (shuffled, ``drop_last=True``; ``False`` for a ``batch``
    backend, whose whole pass is compared) iterated through the patched ``run_epoch``'s path. LeRobot: the
    DataLoader ``lerobot-train`` builds over its ``EpisodeAwareSampler`` (seeded; workers spawned, as
    ``lerobot-train`` 0.6.1 starts them, so that the native ``LeRobotDataset`` never decodes in a forked worker,
    where torchcodec fails at random), iterated through its patched ``cycle``'s path. ``sample`` and ``indexed``
    backends must give the native DataLoader's batches, batch for batch, from the same seed; a ``batch`` backend
    orders its passes itself and must serve every sample the native pass serves exactly once (compared as a
    multiset of contents; lossy fields by PSNR against the native sample with the same exact fields).

    Args:
        case: :func:`robomimic_case` or :func:`lerobot_case`.
        backend: The backend's registered name.
        options: Its options.
        batch_size: Samples per batch.
        num_workers: The DataLoader's ``num_workers`` (threads for in-process backends); LeRobot's workers are
            spawned, so the backend's dataset must pickle (as ``lerobot-train`` needs).
        seed: The order seed (torch's global RNG for robomimic, the sampler's seed for LeRobot).
        min_psnr: ``{field: dB}`` for lossy fields.

    Returns:
        The number of batches served.

    Raises:
        AssertionError: a batch or sample that differs, a sample missing from the pass or served twice.
    """
    import torch

    from robo_loaders_plugin.core.iteration import Built, SamplingPlan, built_by, pass_batches
    from robo_loaders_plugin.core.spec import BATCH, SAMPLE

    native, ours = case.native(), case.build(backend, options)
    built = built_by(ours)
    kind = SAMPLE if built is None else built.kind  # not recorded: served as a plain sample dataset
    sampling_plan: Callable[[Any, Built], SamplingPlan]
    if case.framework == "robomimic":
        from robo_loaders_plugin.robomimic.integration import sampling_plan

        def loader(ds):
            torch.manual_seed(seed)  # robomimic's RandomSampler draws from torch's global RNG
            # drop_last as robomimic's train() sets it; a batch backend's whole pass is compared (its own order
            # drops other samples than the native one would)
            return torch.utils.data.DataLoader(
                ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=kind != BATCH
            )
    else:
        from robo_loaders_plugin.lerobot.integration import sampling_plan

        def loader(ds):
            sampler = episode_aware_sampler(native, seed)
            torch.manual_seed(seed)  # workers' seeds (image transforms) come from torch's global RNG
            # spawned workers, as lerobot-train 0.6.1 starts them: a forked worker inherits the parent's open
            # torchcodec decoders and their file offsets, and LeRobotDataset fails in it at random ("Could not
            # push packet to decoder") whatever the backend does
            return torch.utils.data.DataLoader(
                ds,
                batch_size=batch_size,
                sampler=sampler,
                num_workers=num_workers,
                drop_last=False,
                multiprocessing_context="spawn" if num_workers > 0 else None,
            )

    served = list(pass_batches(loader(ours), sampling_plan))
    if kind != BATCH:
        expected = list(loader(native))
        assert len(served) == len(expected), f"{backend}: {len(served)} batches, the native pass has {len(expected)}"
        for b, (mine, theirs) in enumerate(zip(served, expected)):
            assert_same(mine, theirs, f"{backend} pass batch {b}", min_psnr)
        return len(served)
    native_loader = loader(native)
    wanted: dict[bytes, list] = {}
    for batch in native_loader:
        for sample in _rows(batch, _batch_len(batch)):
            wanted.setdefault(_content_key(sample, min_psnr), []).append(sample)
    total = sum(len(v) for v in wanted.values())
    got = 0
    for b, batch in enumerate(served):
        for r, sample in enumerate(_rows(batch, _batch_len(batch))):
            key = _content_key(sample, min_psnr)
            assert wanted.get(key), (
                f"{backend} pass batch {b} row {r}: not a sample of the native pass, or served "
                "more often than the native pass serves it"
            )
            assert_same(sample, wanted[key].pop(), f"{backend} pass batch {b} row {r}", min_psnr)
            got += 1
    missing = total - got
    assert missing <= 0, f"{backend}: {missing} of the native pass's {total} samples were never served"
    return len(served)
