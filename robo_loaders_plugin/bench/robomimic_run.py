"""Child process of ``robo-loaders bench robomimic``: builds one backend the way robomimic's train() does and
times its batches. Run alone: ``python -m robo_loaders_plugin.bench.robomimic_run '<json args>' OUT.json``."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from robo_loaders_plugin.bench.runner import baseline_pss, time_loader
from robo_loaders_plugin.bench.shuffle_metric import episode_mix


def image_and_low_dim_keys(path: str):
    """The observation keys of a robomimic file's first demo, split into camera keys (4-D uint8) and the rest.

    Args:
        path: The robomimic HDF5 file.

    Returns:
        ``(rgb keys, low-dim keys)``.
    """
    import h5py

    with h5py.File(path, "r") as f:
        demo = sorted(f["data"].keys(), key=lambda n: int(n[5:]))[0]
        obs = f[f"data/{demo}/obs"]
        rgb = [k for k in obs if obs[k].dtype == np.uint8 and obs[k].ndim == 4]
        low = [k for k in obs if k not in rgb]
    return rgb, low


def make_config(a: dict):
    """A robomimic ``bc`` config for the child's run: the dataset, observation keys by modality, window and loader
    settings, and the backend.

    Args:
        a: The child's arguments (``dataset``, ``obs_keys``, ``seq_length``, ``frame_stack``, ``batch_size``,
            ``num_workers``, ``cache_mode``, ``backend``, ``kwargs``).

    Returns:
        ``(config, observation keys)``.
    """
    from robomimic.config import config_factory

    config = config_factory("bc")
    rgb, low = image_and_low_dim_keys(a["dataset"])
    if a.get("obs_keys"):
        rgb = [k for k in rgb if k in a["obs_keys"]]
        low = [k for k in low if k in a["obs_keys"]]
    with config.values_unlocked():
        config.train.data = a["dataset"]
        config.observation.modalities.obs.rgb = rgb
        config.observation.modalities.obs.low_dim = low
        config.train.seq_length = a["seq_length"]
        config.train.frame_stack = a["frame_stack"]
        config.train.batch_size = a["batch_size"]
        config.train.num_data_workers = a["num_workers"]
        config.train.hdf5_cache_mode = a["cache_mode"]
        config.train.data_backend = a["backend"]
        config.train.data_backend_kwargs = dict(a.get("kwargs") or {})
    return config, rgb + low


def run(a: dict) -> dict:
    """Build one backend the way robomimic's train() does, and time its batches.

    Args:
        a: The child's arguments (see :func:`make_config`, plus ``batches``).

    Returns:
        The result row: the timing, ``build_s``, ``num_samples``, ``baseline_pss_bytes``, ``episode_mix``,
        ``summary``.
    """
    import robomimic.utils.obs_utils as ObsUtils
    import torch

    from robo_loaders_plugin.core.iteration import summary_of
    from robo_loaders_plugin.robomimic import dataset_factory
    from robo_loaders_plugin.robomimic.compat import register_observation_encoders
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    register_observation_encoders()
    torch.manual_seed(0)
    np.random.seed(0)
    config, obs_keys = make_config(a)
    ObsUtils.initialize_obs_utils_with_config(config)
    baseline = baseline_pss()  # interpreter + torch + robomimic, before any data
    t = time.perf_counter()
    ds = dataset_factory(config, obs_keys)
    build_s = time.perf_counter() - t
    bs, nw = a["batch_size"], a["num_workers"]
    # exactly the DataLoader robomimic's train() builds, and what the patched run_epoch iterates instead
    loader = epoch_loader(
        torch.utils.data.DataLoader(ds, sampler=None, batch_size=bs, shuffle=True, num_workers=nw, drop_last=True)
    )
    timing = time_loader(loader, a["batches"], lambda b: len(b["actions"]))
    return dict(
        timing,
        build_s=build_s,
        num_samples=len(ds),
        baseline_pss_bytes=baseline,
        episode_mix=episode_mix(episode_batches(ds, bs)),
        summary=summary_of(ds),
    )


def episode_batches(ds, batch_size: int) -> list:
    """Episode of every sample, batch by batch, over one shuffled pass as the backend serves it.

    robomimic's batches carry no demo id, so this follows the sampling instead of the data: a sample-level dataset
    is drawn by the same sampler robomimic's DataLoader(shuffle=True, drop_last=True) uses; datapipe by its own plan.

    Args:
        ds: The dataset built (robomimic's SequenceDataset, or a backend's).
        batch_size: Samples per batch.

    Returns:
        One array of demo indices per batch.
    """
    import torch

    from robo_loaders_plugin.core.iteration import BatchDataset
    from robo_loaders_plugin.robomimic.compat import demo_of_index
    from robo_loaders_plugin.robomimic.dataset import RobomimicSamples

    if isinstance(ds, BatchDataset):
        return ds.batch_episodes(batch_size, drop_last=True)
    demo_of = ds.episode_of() if isinstance(ds, RobomimicSamples) else demo_of_index(ds)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0)), batch_size, drop_last=True
    )
    return [demo_of[np.asarray(b)] for b in sampler]


def main():
    """The child's entry point: ``python -m robo_loaders_plugin.bench.robomimic_run '<json args>' OUT.json``."""
    args = json.loads(sys.argv[1])
    out = run(args)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
