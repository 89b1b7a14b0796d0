"""Shared helpers of the robomimic integration tests (real robomimic objects, no mocks)."""

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_HDF5 = os.path.join(HERE, "..", "..", "shared", "data", "robosuite_lift_84_20demos.hdf5")
RGB = ["agentview_image", "robot0_eye_in_hand_image"]
LOW_DIM = ["robot0_eef_pos", "robot0_eef_quat", "object"]


def make_config(path, algo="bc", rgb=RGB, low_dim=LOW_DIM, backend=None, backend_kwargs=None, **train):
    """A robomimic config with the plugin keys set; obs utils initialised as robomimic's train() does."""
    import robomimic.algo  # noqa: F401  (registers VisualCore & co, needed by SequenceDataset)
    import robomimic.utils.obs_utils as ObsUtils
    from robomimic.config import config_factory

    config = config_factory(algo)
    with config.values_unlocked():
        config.train.data = path
        config.observation.modalities.obs.rgb = list(rgb)
        config.observation.modalities.obs.low_dim = list(low_dim)
        config.train.data_backend = backend
        config.train.data_backend_kwargs = dict(backend_kwargs or {})
        for k, v in train.items():
            config.train[k] = v
    ObsUtils.initialize_obs_utils_with_config(config)
    return config


def obs_keys(config):
    m = config.observation.modalities.obs
    return list(m.low_dim) + list(m.rgb)


def decoded_copy(hdf5: str, video_shards: str, path: str) -> str:
    """A copy of ``hdf5`` whose camera datasets hold the frames decoded from its video shards: what robomimic's
    ``video_stream`` must serve, so SequenceDataset over it is the byte-for-byte reference (windows, padding, goals
    and dtypes are SequenceDataset's)."""
    import shutil

    import h5py

    from robo_loaders_plugin.storage.shards import ShardReader

    shutil.copy(hdf5, path)
    reader = ShardReader(video_shards)
    with h5py.File(path, "r+") as f:
        for i, ep in enumerate(reader.episodes):
            header, fields = reader.read_episode(i)
            for k, desc in header["fields"].items():
                if desc["kind"] == "video":
                    f[f"data/{ep['name']}/{k}"][...] = fields[k]
    return path


def assert_same_sample(ours, theirs, path="sample"):
    """Same keys (in order), types, shapes, dtypes and bytes."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{path}: {type(ours).__name__} is not a dict"
        assert list(ours.keys()) == list(theirs.keys()), f"{path}: keys {list(ours)} != {list(theirs)}"
        for k in theirs:
            assert_same_sample(ours[k], theirs[k], f"{path}/{k}")
        return
    assert type(ours) is type(theirs), f"{path}: {type(ours).__name__} is not {type(theirs).__name__}"
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype, f"{path}: dtype {ours.dtype} != {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{path}: shape {ours.shape} != {theirs.shape}"
    assert ours.tobytes() == theirs.tobytes(), f"{path}: bytes differ"


def _sample_key(sample) -> bytes:
    """Every array of a (nested) sample, its bytes in key order: a window's identity by content."""
    import hashlib

    h = hashlib.sha256()
    for k in sorted(sample):
        v = sample[k]
        if isinstance(v, dict):
            h.update(_sample_key(v))
        else:
            h.update(k.encode() + np.ascontiguousarray(np.asarray(v)).tobytes())
    return h.digest()


def windows_served(batches, reference) -> list[int]:
    """The index in ``reference`` (robomimic's ``SequenceDataset``) of every row of ``batches``, found by its bytes
    (every key), in serving order; -1 for a row that equals none of its windows.

    Why by content and not by the backend's plan: a pass that served another pass's batches (or the same batch
    twice) would still have a plan listing every window once; only what was served shows it."""
    index = {_sample_key(reference[i]): i for i in range(len(reference))}
    served = []
    for batch in batches:
        for r in range(len(batch["actions"])):
            row = {k: ({kk: vv[r] for kk, vv in v.items()} if isinstance(v, dict) else v[r]) for k, v in batch.items()}
            served.append(index.get(_sample_key(row), -1))
    return served


def interleaved(*iterators) -> list[list]:
    """Every batch of each iterator, one batch from each in turn until all are exhausted (two passes at once, as
    code that zips, cycles or peeks at a loader runs them)."""
    served: list[list] = [[] for _ in iterators]
    live = list(range(len(iterators)))
    while live:
        for j in list(live):
            try:
                served[j].append(next(iterators[j]))
            except StopIteration:
                live.remove(j)
    return served
