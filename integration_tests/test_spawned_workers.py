"""Every dataset a backend returns, single and mixture, in both frameworks, served from a spawned DataLoader worker
(issue 42 item 7): pickled into the worker as torch pickles a dataset for ``multiprocessing_context="spawn"``
(``num_workers=1``), it serves there the samples the native loader serves in this process (robomimic's
``SequenceDataset``, ``LeRobotDataset``), batch by batch as the DataLoader collates them; and this process, which
served before the worker started (as a training run has when its evaluation loader starts), serves them still.

Why: ``lerobot-train``'s evaluation loader (``--dataset.eval_split``) spawns workers over the dataset, as does any
DataLoader with workers under the spawn start method. datapipe's and video_stream's episode loaders were closures
(``Can't pickle local object 'shard_samples.<locals>.read'``, ``'datapipe_dataset.<locals>.read'``), so
``lerobot-train --dataset.backend=datapipe --dataset.eval_split=0.5`` trained and died at its first evaluation;
gpu_resampler's compressed tier held a lock and its spill file, and pickling its host tensors moved them under the
numpy views it gathers through (the worker got garbage, this process read freed memory). What a worker cannot share
(open files, locks, threads, maps, decoders) is reopened there, never pickled: each frame source's ``__getstate__``.

One worker per framework serves all of that framework's datasets (:class:`Each`): a spawned worker imports torch and
the framework before its first item, tens of seconds on a loaded 2-core machine, so a worker per dataset would cost
minutes.
"""

import numpy as np
import pytest
import torch
from lerobot_helpers import REPO, serve
from robomimic_helpers import make_config, obs_keys

from robo_loaders_plugin.mixtures.dataset import DATASET_INDEX
from robo_loaders_plugin.testing import assert_same

BACKENDS = ["native", "compressed_cache", "datapipe", "gpu_resampler", "video_stream"]
BATCH = 4
# robomimic's video_stream re-encodes the frames (its floor: test_robomimic_video_shards); every other field exact
VIDEO_PSNR = {"agentview_image": 25.0, "robot0_eye_in_hand_image": 25.0}


class Each(torch.utils.data.Dataset):
    """Several datasets behind one DataLoader, so that one worker serves them all: index ``(k, i)`` is dataset
    ``k``'s item ``i``, fetched as torch's worker fetches a batch (``__getitems__`` where the dataset has one)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)

    def __len__(self):
        return sum(len(d) for d in self.datasets)

    def __getitem__(self, pair):
        return self.__getitems__([pair])[0]

    def __getitems__(self, pairs):
        (k,) = {k for k, _ in pairs}  # a batch comes from one dataset
        ds, local = self.datasets[k], [i for _, i in pairs]
        if callable(getattr(ds, "__getitems__", None)):
            return ds.__getitems__(local)
        return [ds[i] for i in local]


class Case:
    """A served dataset, the indices compared, and what the native loader serves for index ``i``: ``(component,
    native sample)`` (component 0 for a single dataset)."""

    def __init__(self, label, dataset, reference, indices, mixture=False, min_psnr=None):
        self.label, self.dataset, self.reference, self.indices = label, dataset, reference, indices
        self.mixture, self.min_psnr = mixture, min_psnr
        # robomimic's own SequenceDataset keeps its HDF5 file open once it has read, and h5py objects do not pickle:
        # robomimic's DataLoader pickles it before the parent reads, and the plugin leaves the native loader as is
        self.served_here_first = not label.startswith("robomimic native")


def _indices(n, edges, seed):
    """The first and last index of every episode (where windows pad) and a few others."""
    rng = np.random.default_rng(seed)
    return sorted(set(edges) | {0, n - 1} | set(rng.choice(n, size=min(n, 8), replace=False).tolist()))


def _single(label, dataset, native, edges, seed, min_psnr=None):
    return Case(label, dataset, lambda i: (0, native[i]), _indices(len(native), edges, seed), min_psnr=min_psnr)


def _mixture(label, mix, natives, seed, keep=None, min_psnr=None):
    """A mixture's case: a global index is its component's native sample (no renames; the keys the mixture keeps)."""

    def reference(g):
        k, i = mix.locate(g)
        sample = natives[k][i]
        return k, sample if keep is None else {key: v for key, v in sample.items() if key in keep}

    return Case(label, mix, reference, _indices(len(mix), [], seed), mixture=True, min_psnr=min_psnr)


def _robomimic_cases(hdf5):
    from robo_loaders_plugin.robomimic import dataset_factory
    from robo_loaders_plugin.robomimic.compat import demo_of_index

    def build(backend=None, mixture=None, filter_key=None, **options):
        cfg = make_config(
            hdf5,
            backend=backend,
            backend_kwargs=options,
            seq_length=5,
            hdf5_cache_mode="low_dim",
            hdf5_load_next_obs=True,
        )
        with cfg.values_unlocked():
            cfg.train.data_mixture = mixture
        return dataset_factory(cfg, obs_keys(cfg), filter_by_attribute=filter_key)

    natives = [build(filter_key=f) for f in ("train", "valid")]
    last = np.flatnonzero(np.diff(demo_of_index(natives[0])))  # each demo's last index but the last demo's
    edges = last.tolist() + (last + 1).tolist()
    # the mixture: the file's train and valid demos as two components (one file: its conversions are reused)
    mixture = {"components": [{"path": hdf5, "filter_key": f, "weight": w} for f, w in (("train", 1), ("valid", 2))]}
    cases = []
    for backend in BACKENDS:
        name = None if backend == "native" else backend
        psnr = VIDEO_PSNR if backend == "video_stream" else None
        single = build(name, filter_key="train")
        cases.append(_single(f"robomimic {backend} single", single, natives[0], edges, 0, psnr))
        cases.append(_mixture(f"robomimic {backend} mixture", build(name, mixture), natives, 1, min_psnr=psnr))
    # video_stream's buffer held LZ4-compressed: its loader transforms each demo read
    lz4 = build("video_stream", filter_key="train", buffer="lz4")
    cases.append(_single("robomimic video_stream single buffer=lz4", lz4, natives[0], edges, 2, VIDEO_PSNR))
    return cases


def _lerobot_cases(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from robo_loaders_plugin.lerobot.integration import choose
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

    def native(episodes):
        return LeRobotDataset(
            REPO,
            root=root,
            return_uint8=True,
            delta_timestamps={"action": [0.0, 0.05, 0.1], "observation.images.cam0": [-0.05, 0.0]},
            episodes=episodes,
        )

    nat = native([0, 2, 4])
    bounds = nat.meta.episodes
    a2r = nat.absolute_to_relative_idx
    edges = [a2r[int(bounds["dataset_from_index"][e])] for e in nat.episodes]
    edges += [a2r[int(bounds["dataset_to_index"][e]) - 1] for e in nat.episodes]
    split = ([0, 2], [1, 4])  # the mixture: two components of one dataset (its conversion is reused)
    spec = parse({"components": [{"repo_id": REPO, "root": str(root), "episodes": e, "weight": 1} for e in split]})
    parts = [native(e) for e in split]
    cases = []
    for backend in BACKENDS:
        cases.append(_single(f"lerobot {backend} single", serve(backend, nat), nat, edges, 2))
        mix = build_mixture(spec, parts, choose(backend), seed=1)
        cases.append(_mixture(f"lerobot {backend} mixture", mix, parts, 3, keep=mix.keep))
    # gpu_resampler's tiers beyond the uncompressed one: episode 0 raw in host memory, the others compressed in an
    # (unlinked) file on disk, which the worker reads through a duplicate of its descriptor
    tiered = serve("gpu_resampler", nat, max_memory="1.6MB")
    (_, raw, compressed) = next(iter(tiered.frames.parts.values()))
    assert raw is not None and compressed is not None and compressed.on_disk, tiered.serving.summary
    cases.append(_single("lerobot gpu_resampler single max_memory=1.6MB", tiered, nat, edges, 4))
    return cases


def _served(cases, batches):
    """What this process serves for ``batches`` (its own reads: the numpy views, caches and maps it made)."""
    each = Each(c.dataset for c in cases)
    return [torch.utils.data.default_collate(each.__getitems__(pairs)) for pairs in batches]


def _served_here_first(cases, batches):
    """This process reads each dataset before the worker starts, as a training run has when its evaluation loader
    starts: what the reads leave behind (views, caches, maps, open files) is pickled with it."""
    _served(cases, [pairs for pairs in batches if cases[pairs[0][0]].served_here_first])


def _check(case, local, batch, where):
    components, samples = zip(*map(case.reference, local))
    batch = dict(batch)
    if case.mixture:
        assert batch.pop(DATASET_INDEX).tolist() == list(components), where
    assert_same(batch, torch.utils.data.default_collate(list(samples)), where, case.min_psnr)


@pytest.mark.parametrize("framework", ["robomimic", "lerobot"])
def test_every_backends_dataset_serves_the_native_samples_from_a_spawned_worker(request, framework):
    if framework == "robomimic":
        cases = _robomimic_cases(request.getfixturevalue("tiny_hdf5"))
    else:
        cases = _lerobot_cases(request.getfixturevalue("lerobot_datasets")["av1_1cam"])
    every = [[b, s] for b in BACKENDS for s in ("single", "mixture")]
    assert [c.label.split()[1:3] for c in cases[: len(every)]] == every
    batches = [
        [(k, i) for i in case.indices[s : s + BATCH]]
        for k, case in enumerate(cases)
        for s in range(0, len(case.indices), BATCH)
    ]
    _served_here_first(cases, batches)
    loader = torch.utils.data.DataLoader(
        Each(c.dataset for c in cases), batch_sampler=batches, num_workers=1, multiprocessing_context="spawn"
    )
    checked = set()
    for pairs, batch in zip(batches, loader, strict=True):
        case, local = cases[pairs[0][0]], [i for _, i in pairs]
        where = f"{case.label} served by a spawned worker, indices {local}"
        _check(case, local, batch, where)
        if case.label not in checked:  # negative control: the same comparison refuses the next samples
            checked.add(case.label)
            shifted = [min(i + 1, len(case.dataset) - 1) for i in local]
            with pytest.raises(AssertionError):
                _check(case, shifted, batch, where)
    assert checked == {c.label for c in cases}
    for pairs, batch in zip(batches, _served(cases, batches), strict=True):  # this process after the worker
        case, local = cases[pairs[0][0]], [i for _, i in pairs]
        _check(case, local, batch, f"{case.label} served here after the worker started, indices {local}")
