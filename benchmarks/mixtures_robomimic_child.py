"""One measured run of ``benchmarks/mixtures.py``'s robomimic rows: a mixture of robomimic HDF5 files built and
served one way, timed from the first file read to the first batch, then its steady batches.

``python -m benchmarks.mixtures_robomimic_child '<json args>' OUT.json`` (started by
``robo_loaders_plugin.bench.runner.run_child``, one process per run), or :func:`run` in the calling process (the
quick test). Two ways of serving the same components, with robomimic's config for an image BC-RNN (``bc``'s
defaults, ``seq_length`` and ``hdf5_cache_mode`` as given: ``low_dim`` for images, as robomimic's image configs and
the plugin's robomimic benchmark's ``native:low_dim`` baseline):

- ``reference``: what a robomimic user writes by hand today, robomimic 0.3.0 training on one file: one
  ``SequenceDataset`` per component from robomimic's own ``dataset_factory`` (read with its own obs key names, every
  camera name registered as ``rgb``), each wrapped to rename its obs keys to the mixture's and add
  ``dataset_index`` (:class:`Renamed`), a ``ConcatDataset`` of them and a ``WeightedRandomSampler`` giving component
  *k* the share ``w_k / sum(w)``, in the DataLoader robomimic's ``train()`` builds (its ``sampler``, ``batch_size``,
  ``num_data_workers``, ``drop_last=True``).
- any plugin backend (``native`` included): ``train.data_mixture`` through the plugin's ``dataset_factory``, in the
  DataLoader ``train()`` builds, iterated as the patched ``run_epoch`` iterates it (``integration.epoch_loader``).
"""

from __future__ import annotations

import json
import sys
import time

OBS_GROUPS = ("obs", "next_obs", "goal_obs")


class Renamed:
    """A component of the hand-written reference: its samples with the obs keys renamed, plus ``dataset_index`` (a
    module-level class, so DataLoader workers can unpickle it).

    Args:
        dataset: The component's ``SequenceDataset``.
        rename: ``{its obs key: mixture obs key}``.
        index: The component's position.
    """

    def __init__(self, dataset, rename: dict, index: int):
        self.dataset, self.rename, self.index = dataset, dict(rename), int(index)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        import numpy as np

        item = dict(self.dataset[i])
        for group in OBS_GROUPS:
            if isinstance(item.get(group), dict):
                item[group] = {self.rename.get(k, k): v for k, v in item[group].items()}
        item["dataset_index"] = np.int64(self.index)
        return item


def make_config(a: dict, rgb: list[str]):
    """robomimic's ``bc`` config for the run: the first component as ``train.data``, the observation keys, the
    window and loader settings.

    Args:
        a: The child's arguments (:func:`run`).
        rgb: The camera keys to register (the reference also registers each component's own names).

    Returns:
        The config.
    """
    from robomimic.config import config_factory

    config = config_factory("bc")
    with config.values_unlocked():
        config.train.data = a["components"][0]["path"]
        config.observation.modalities.obs.rgb = list(rgb)
        config.observation.modalities.obs.low_dim = list(a["low_dim"])
        config.train.seq_length = a["seq_length"]
        config.train.frame_stack = a.get("frame_stack", 1)
        config.train.batch_size = a["batch_size"]
        config.train.num_data_workers = a["num_workers"]
        config.train.hdf5_cache_mode = a["cache_mode"]
        config.train.seed = a["seed"]
    return config


def reference_loader(config, a: dict):
    """The hand-written mixture (module docstring) and its DataLoader.

    Args:
        config: robomimic's config (no backend, no mixture: robomimic's own ``dataset_factory``).
        a: The child's arguments.

    Returns:
        ``(the DataLoader, the components' SequenceDatasets)``.
    """
    import robomimic.utils.train_utils as TrainUtils
    import torch

    parts, natives = [], []
    mixture_keys = list(a["low_dim"]) + list(a["rgb"])
    for k, c in enumerate(a["components"]):
        rename = c.get("rename") or {}
        inverse = {dst: src for src, dst in rename.items()}
        ds = TrainUtils.dataset_factory(config, [inverse.get(key, key) for key in mixture_keys], dataset_path=c["path"])
        natives.append(ds)
        parts.append(Renamed(ds, rename, k))
    concat = torch.utils.data.ConcatDataset(parts)
    weights = [float(c.get("weight", 1.0)) for c in a["components"]]
    per_sample = torch.cat([torch.full((len(p),), w / len(p), dtype=torch.float64) for p, w in zip(parts, weights)])
    sampler = torch.utils.data.WeightedRandomSampler(
        per_sample, num_samples=len(concat), replacement=True, generator=torch.Generator().manual_seed(a["seed"])
    )
    loader = torch.utils.data.DataLoader(
        dataset=concat,
        sampler=sampler,
        batch_size=config.train.batch_size,
        shuffle=False,  # robomimic's train(): shuffle=(train_sampler is None)
        num_workers=config.train.num_data_workers,
        drop_last=True,
    )
    return loader, natives


def run(a: dict) -> dict:
    """Build the mixture one way and time it (module docstring).

    Args:
        a: ``backend`` (``reference`` or a plugin backend), ``kwargs`` (its options), ``components`` (``path``,
            ``weight``, ``rename``), ``target_fps``, ``rgb`` and ``low_dim`` (the mixture's obs keys),
            ``seq_length``, ``cache_mode``, ``batch_size``, ``num_workers``, ``batches``, ``seed``.

    Returns:
        The row: ``build_s`` (the datasets, mixture and DataLoader built), ``first_batch_s``, ``startup_s`` (their
        sum), ``samples_per_s`` over ``batches`` timed batches after the first, ``batch_latency_ms``,
        ``num_samples``, ``frames``, ``share`` (each component's share of the samples served), ``summary`` and
        ``baseline_pss_bytes``.
    """
    import numpy as np
    import robomimic.utils.obs_utils as ObsUtils
    import torch

    from benchmarks.mixtures_child import timed_shares
    from robo_loaders_plugin.bench.runner import baseline_pss
    from robo_loaders_plugin.robomimic.compat import register_observation_encoders

    register_observation_encoders()
    torch.manual_seed(0)
    np.random.seed(0)
    components = a["components"]
    reference = a["backend"] == "reference"
    rgb = list(a["rgb"])
    if reference:  # a user registers every camera name its files use, so none is cached as low-dim
        for c in components:
            rgb += [src for src, dst in (c.get("rename") or {}).items() if dst in a["rgb"] and src not in rgb]
    config = make_config(a, rgb)
    ObsUtils.initialize_obs_utils_with_config(config)
    baseline = baseline_pss()
    t = time.perf_counter()
    if reference:
        batches, natives = reference_loader(config, a)
        num_samples = sum(map(len, natives))
        summary = f"ConcatDataset of {len(natives)} SequenceDataset + WeightedRandomSampler"
    else:
        from robo_loaders_plugin.core.iteration import summary_of
        from robo_loaders_plugin.robomimic import dataset_factory
        from robo_loaders_plugin.robomimic.integration import epoch_loader

        spec: dict = {"components": [dict(c) for c in components]}
        if a.get("target_fps") is not None:
            spec["target_fps"] = a["target_fps"]
        with config.values_unlocked():
            config.train.data_backend = a["backend"]
            config.train.data_backend_kwargs = dict(a.get("kwargs") or {})
            config.train.data_mixture = spec
        mix = dataset_factory(config, list(a["low_dim"]) + list(a["rgb"]))
        # exactly the DataLoader robomimic's train() builds, and what the patched run_epoch iterates instead
        batches = epoch_loader(
            torch.utils.data.DataLoader(
                mix,
                sampler=mix.get_dataset_sampler(),
                batch_size=config.train.batch_size,
                shuffle=True,
                num_workers=config.train.num_data_workers,
                drop_last=True,
            )
        )
        num_samples = len(mix)
        summary = summary_of(mix)
    build_s = time.perf_counter() - t
    return dict(
        timed_shares(batches, a["batches"], len(components), build_s),
        num_samples=num_samples,
        frames=sum(frames_of(c["path"]) for c in components),
        summary=summary,
        baseline_pss_bytes=baseline,
    )


def frames_of(path: str) -> int:
    """The steps a robomimic file holds (its ``data`` group's ``total``)."""
    import h5py

    with h5py.File(path, "r") as f:
        return int(f["data"].attrs["total"])


def main():
    """``python -m benchmarks.mixtures_robomimic_child '<json args>' OUT.json``.

    Why through the imported module: the reference's :class:`Renamed` is pickled for DataLoader workers by its
    module's name, which must not be ``__main__``.
    """
    from benchmarks import mixtures_robomimic_child

    out = mixtures_robomimic_child.run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
