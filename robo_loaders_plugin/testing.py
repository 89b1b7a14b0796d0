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
- :func:`assert_same_pass`: one training pass as the framework drives it, every sample of it (the last, partial
  batch too: robomimic's ``drop_last=True`` is not copied): for ``sample`` and ``indexed`` kinds, batch for batch
  the native DataLoader's (same order, same RNG use); for the ``batch`` kind, every native sample served exactly
  once (as a multiset of contents).

Why every episode: a backend's bugs sit where episodes (and the files holding them) begin and end, and random
indices alone skip whole episodes of a larger dataset. Every key of a sample is compared, so every camera is. A
one-pixel error in one frame inside an episode is found for sure only where that frame is compared: by
:func:`assert_same_pass` (every sample of the pass, whatever the seed) or with ``exhaustive=True``; the ``count``
random indices of :func:`assert_same_samples` are a spot check that finds an error held by one sample with
probability about ``count / len(dataset)``.

Lossy backends state their tolerance per field with ``min_psnr`` (``{"obs/agentview_image": 35.0}``): those fields
must match dtype and shape and reach that PSNR; every other field must still be byte-identical. The checks raise
``AssertionError`` at the first difference, naming the field, the dataset index (for a batch, the row and its
index) and the element (multi-index) where it is, with both values.
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
    ours,
    theirs,
    where: str = "sample",
    min_psnr: Mapping[str, float] | None = None,
    _path: str = "",
    *,
    rows: list[int] | None = None,
) -> None:
    """``ours`` equals ``theirs``: the same nested keys in the same order, types, dtypes, shapes and bytes; fields
    named in ``min_psnr`` may differ but must reach that PSNR.

    Args:
        ours: The backend's sample or batch (nested dicts of arrays/tensors/values).
        theirs: The native one.
        where: Names the sample in the message.
        min_psnr: ``{field: dB}`` of lossy fields (a field's path, e.g. ``obs/agentview_image``).
        rows: For a batch, the dataset index of each of its rows: the message then names the row, its index and
            the element within the row.

    Raises:
        AssertionError: naming ``where``, the field and the difference: for values, the element (multi-index) of
            the first one that differs, both values, how many differ and the largest difference; for a lossy field
            below its floor, the PSNR (and for a batch the row with the lowest).
    """
    at = f"{where}:{_path or '/'}"
    if isinstance(theirs, Mapping):
        assert isinstance(ours, Mapping), f"{at}: {type(ours).__name__} is not a dict"
        assert list(ours) == list(theirs), f"{at}: keys {list(ours)} != {list(theirs)}"
        for k in theirs:
            assert_same(ours[k], theirs[k], where, min_psnr, f"{_path}/{k}" if _path else str(k), rows=rows)
        return
    if isinstance(theirs, (list, tuple)) and theirs and isinstance(theirs[0], str):
        if list(ours) != list(theirs) and rows is not None and len(ours) == len(theirs):
            r = next(r for r, (x, y) in enumerate(zip(ours, theirs)) if x != y)
            raise AssertionError(f"{at}: {_row_name(r, rows)}: {ours[r]!r} != {theirs[r]!r}")
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
        assert a.tobytes() == b.tobytes(), f"{at}: {_values_differ(a, b, rows)}"
    else:
        got = psnr(a, b)
        assert got >= floor, f"{at}: PSNR {got:.1f} dB is below the stated {floor:g} dB{_worst_row(a, b, rows)}"


def _row_name(r: int, rows: list[int] | None) -> str:
    return f"row {r} (index {rows[r]})" if rows is not None and r < len(rows) else f"row {r}"


def _values_differ(a: np.ndarray, b: np.ndarray, rows: list[int] | None) -> str:
    """Where two arrays of one dtype and shape first differ, byte for byte (as ``tobytes`` compares them, so a NaN
    equals itself and -0.0 differs from 0.0): the element's multi-index (after the row and its dataset index, for a
    batch), both values, how many elements differ and the largest difference. One wrong byte in a frame is then
    found in the message, not by bisecting the data."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    if a.dtype.hasobject or a.itemsize == 0:
        differs = np.asarray(flat_a != flat_b, dtype=bool)
    else:
        bytes_a = np.ascontiguousarray(flat_a).view(np.uint8).reshape(flat_a.size, a.itemsize)
        bytes_b = np.ascontiguousarray(flat_b).view(np.uint8).reshape(flat_b.size, b.itemsize)
        differs = np.any(bytes_a != bytes_b, axis=1)
    wrong = np.flatnonzero(differs)
    if wrong.size == 0:  # pragma: no cover - only called when the bytes differ
        return "values differ"
    first = tuple(int(i) for i in np.unravel_index(int(wrong[0]), a.shape))
    if rows is not None and a.ndim:
        place = f"{_row_name(first[0], rows)}, element {first[1:]}"
    else:
        place = f"element {first}"
    return (
        f"values differ at {place}: ours {_value(a[first])!r}, native {_value(b[first])!r} "
        f"({wrong.size} of {a.size} elements differ; max abs diff {_max_diff(a, b)})"
    )


def _value(x):
    return x.item() if isinstance(x, np.generic) else x


def _worst_row(a: np.ndarray, b: np.ndarray, rows: list[int] | None) -> str:
    """For a batch, the row whose PSNR is lowest (where the lossy error is worst) and its value."""
    if rows is None or a.ndim == 0 or len(a) < 2:
        return ""
    worst = min(range(len(a)), key=lambda r: psnr(a[r], b[r]))
    return f" (lowest at {_row_name(worst, rows)}: {psnr(a[worst], b[worst]):.1f} dB)"


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

    The ``count`` random indices are a spot check, not a proof: an error held by one sample inside an episode (one
    wrong byte of a frame only one window holds) is compared with probability about ``count / len(dataset)``, so
    ``count=20`` misses it in most seeds. It is found for sure only where that sample is compared: with
    ``exhaustive=True``, or by :func:`assert_same_pass` (every sample of a training pass).

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
        AssertionError: the first difference, naming the index, the field and the element (multi-index) where it
            is, with both values; or a length that differs.
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
        AssertionError: the first difference, naming the batch, its indices, the field, and the row, dataset index
            and element where it is.
    """
    import torch.utils.data

    native, ours = case.native(), case.build(backend, options)
    assert hasattr(ours, "collate"), f"{backend}: {type(ours).__name__} has no collate(indices) (not indexed)"
    for b, idx in enumerate(_batch_indices(case, native, batch_size, batches, seed, exhaustive)):
        theirs = torch.utils.data.default_collate([native[i] for i in idx])
        assert_same(ours.collate(idx), theirs, f"{backend} batch {b} (indices {idx})", min_psnr, rows=idx)
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
    """One training pass, driven the way the framework drives it, serves the native pass: every sample of it,
    the last, partial batch included, so one wrong byte anywhere in the data the pass serves is found whatever
    the seed.

    robomimic: the DataLoader its ``train()`` builds (shuffled from torch's global RNG) but with
    ``drop_last=False``: robomimic's ``drop_last=True`` drops the windows of the last, partial batch, another few
    in every seed, and a window holding the only wrong byte was then never compared (it keeps the same order
    otherwise, so training's batches are the first ones compared), iterated through the patched ``run_epoch``'s
    path. LeRobot: the DataLoader ``lerobot-train`` builds over its ``EpisodeAwareSampler`` (seeded,
    ``drop_last=False`` as there; workers spawned, as ``lerobot-train`` 0.6.1 starts them, so that the native
    ``LeRobotDataset`` never decodes in a forked worker, where torchcodec fails at random), iterated through its
    patched ``cycle``'s path. ``sample`` and ``indexed`` backends must give the native DataLoader's batches, batch
    for batch, from the same seed; a ``batch`` backend orders its passes itself and must serve every sample the
    native pass serves exactly once (compared as a multiset of contents; lossy fields by PSNR against the native
    sample with the same exact fields).

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
        AssertionError: a batch or sample that differs (naming the batch, the row, its dataset index, the field
            and the element of the first difference), a sample missing from the pass or served twice.
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
            # not robomimic's drop_last=True: the windows of the last, partial batch are compared too (the order
            # is the same: drop_last only cuts the sampler's tail)
            return torch.utils.data.DataLoader(
                ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=False
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
    expected = [(index.tolist(), batch) for index, batch in loader(_IndexedSamples(native))]
    _assert_serves_every_index(expected, len(native))
    if kind != BATCH:
        assert len(served) == len(expected), f"{backend}: {len(served)} batches, the native pass has {len(expected)}"
        for b, (mine, (index, theirs)) in enumerate(zip(served, expected)):
            assert_same(mine, theirs, f"{backend} pass batch {b}", min_psnr, rows=index)
        return len(served)
    wanted: dict[bytes, list] = {}  # content -> the native (index, sample) pairs not served yet
    for index, batch in expected:
        for i, sample in zip(index, _rows(batch, len(index))):
            wanted.setdefault(_content_key(sample, min_psnr), []).append((i, sample))
    native_index = {key: [i for i, _ in pairs] for key, pairs in wanted.items()}
    for b, batch in enumerate(served):
        for r, sample in enumerate(_rows(batch, _batch_len(batch))):
            where = f"{backend} pass batch {b} row {r}"
            key = _content_key(sample, min_psnr)
            if key in native_index and not wanted[key]:
                raise AssertionError(
                    f"{where}: served more often than the native pass serves it (the sample at index "
                    f"{native_index[key][0]}, {len(native_index[key])} time(s) in the native pass)"
                )
            if key not in native_index:
                _raise_nearest(sample, wanted, where, min_psnr)
            i, theirs = wanted[key].pop()
            assert_same(sample, theirs, f"{where} (index {i})", min_psnr)
    never = sorted(i for pairs in wanted.values() for i, _ in pairs)
    assert not never, (
        f"{backend}: {len(never)} of the native pass's {len(native)} samples were never served "
        f"(indices {never[:10]}{' ...' if len(never) > 10 else ''})"
    )
    return len(served)


class _IndexedSamples:
    """``(i, native[i])`` for a DataLoader that must say which dataset index each row of its batches holds:
    ``default_collate`` collates the pair element-wise, so the batch part is exactly what a DataLoader over
    ``native`` builds, from the same sampler and RNG. A module-level class, so spawned workers can unpickle it."""

    def __init__(self, native):
        self.native = native

    def __len__(self) -> int:
        return len(self.native)

    def __getitem__(self, i):
        return int(i), self.native[i]


def _assert_serves_every_index(expected: list, n: int) -> None:
    """The native pass compared serves each of the dataset's ``n`` indices once: what makes the pass find one
    wrong byte anywhere for sure (a sampler that skipped some would compare less than it claims)."""
    counts = np.bincount(np.asarray([i for index, _ in expected for i in index], dtype=np.int64), minlength=n)
    assert len(counts) == n and np.all(counts == 1), (
        f"the native pass serves {int(np.count_nonzero(counts))} of the dataset's {n} indices, "
        f"{int(np.sum(counts > 1))} more than once: it cannot stand for every sample"
    )


def _field_digests(sample, min_psnr, _path: str = "") -> dict[str, bytes]:
    """The digest of each exact field of a sample (lossy fields left out), by path."""
    if isinstance(sample, Mapping):
        out: dict[str, bytes] = {}
        for k, v in sample.items():
            out.update(_field_digests(v, min_psnr, f"{_path}/{k}" if _path else str(k)))
        return out
    return {} if _lossy(_path, min_psnr) is not None else {_path: _content_key(sample, min_psnr, _path)}


def _raise_nearest(sample, wanted: dict[bytes, list], where: str, min_psnr) -> None:
    """A ``batch`` backend served a sample the native pass does not hold: compare it with the native sample not
    served yet that shares the most exact fields with it, so the message names a field, an index and an element
    (one wrong byte in a frame) rather than only 'no such sample'."""
    mine = _field_digests(sample, min_psnr)
    best, same = None, -1
    for pairs in wanted.values():
        for i, theirs in pairs:
            digests = _field_digests(theirs, min_psnr)
            equal = sum(digests.get(path) == d for path, d in mine.items())
            if equal > same:
                best, same = (i, theirs), equal
    if best is None:
        raise AssertionError(f"{where}: not a sample of the native pass (every native sample was served already)")
    i, theirs = best
    assert_same(
        sample,
        theirs,
        f"{where}: not a sample of the native pass; the nearest not served yet, index {i} "
        f"({same} of {len(mine)} exact fields equal)",
        min_psnr,
    )
    raise AssertionError(f"{where}: not a sample of the native pass")  # pragma: no cover - equal exact fields match
