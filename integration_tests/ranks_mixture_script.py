"""Run by ``test_mixture_ranks.py`` under ``torchrun --nproc_per_node 2`` (or alone, as one process): which windows of
a mixture every rank serves in each of two passes.

robomimic (``train.data_mixture``): the datasets come from robomimic's (patched) ``dataset_factory`` with the rank
from torchrun's environment, built before the gloo process group is initialised (the first pass checks the ranks),
and a pass is what robomimic's ``run_epoch`` iterates over the DataLoader a custom loop builds (``epoch_loader``; no
``drop_last``, so every position of the rank's share is served). Cases (``NAME=BACKEND:WEIGHTS``, weights ``size``
or comma-separated):

- each case given on the command line, built with ``train.seed`` 11 on every rank;
- ``control``: the first case built with the ``seed + rank`` idiom and served with the first-pass check replaced by a
  no-op (what an unchecked run would serve): the negative control of the test's checks.

A window is identified by its component (``dataset_index``) and a digest of its action window.

LeRobot (``--dataset.mixture``): the mixture built as lerobot-train builds it from its components'
``LeRobotDataset``s, the DataLoader over lerobot-train 0.6.1's ``EpisodeAwareSampler`` (seed 1000) prepared by a real
``accelerate.Accelerator``, the plugin's ``cycle`` (which checks the ranks' setups); the cases as above, no control.
A frame is identified by its component and its ``index``.

Writes ``OUT/rank<r>.json``: ``{case: [pass: [[component, id], ...]]}``.

Usage: ranks_mixture_script.py robomimic OUT A.hdf5,B.hdf5,C.hdf5 NAME=BACKEND:WEIGHTS...
       ranks_mixture_script.py lerobot OUT REPO=ROOT,REPO=ROOT,REPO=ROOT NAME=BACKEND:WEIGHTS...
"""

import hashlib
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH, PASSES, SEED = 8, 2, 11


def build(paths, backend, weights, seed):
    import robomimic.utils.train_utils as TrainUtils
    from robomimic_helpers import make_config, obs_keys

    comps = [{"path": p} for p in paths]
    if weights != "size":
        for comp, w in zip(comps, weights.split(","), strict=True):
            comp["weight"] = float(w)
    config = make_config(
        paths[0], rgb=[], low_dim=["robot0_eef_pos"], backend=None if backend == "native" else backend,
        seq_length=3, seed=seed,
    )  # fmt: skip
    with config.values_unlocked():
        config.train.data_mixture = {"components": comps, "weights": "size" if weights == "size" else "given"}
    return TrainUtils.dataset_factory(config, obs_keys(config))


def passes(dataset):
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=0, drop_last=False)
    return [
        [
            [int(k), hashlib.sha1(a.numpy().tobytes()).hexdigest()[:16]]
            for batch in epoch_loader(loader)
            for a, k in zip(batch["actions"], batch["dataset_index"], strict=True)
        ]
        for _ in range(PASSES)
    ]


def lerobot(out, components, *cases):
    from accelerate import Accelerator
    from lerobot.datasets import EpisodeAwareSampler, LeRobotDataset

    from robo_loaders_plugin.core.files import atomic_write_json
    from robo_loaders_plugin.lerobot.integration import choose, cycle
    from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

    accelerator = Accelerator(cpu=True)
    repos = [c.split("=", 1) for c in components.split(",")]
    served = {}
    for name, spec in (c.split("=") for c in cases):
        backend, weights = spec.split(":")
        comps = [{"repo_id": repo, "root": root} for repo, root in repos]
        if weights != "size":
            for comp, w in zip(comps, weights.split(","), strict=True):
                comp["weight"] = float(w)
        natives = [LeRobotDataset(repo, root=root, delta_timestamps={"action": [0.0, 0.05]}) for repo, root in repos]
        mixture = parse({"components": comps, "weights": "size" if weights == "size" else "given"})
        dataset = build_mixture(mixture, natives, choose(backend), seed=1000)
        sampler = EpisodeAwareSampler(  # as lerobot-train 0.6.1 builds it
            dataset.meta.episodes["dataset_from_index"],
            dataset.meta.episodes["dataset_to_index"],
            episode_indices_to_use=dataset.episodes,
            shuffle=True,
            seed=1000,
            absolute_to_relative_idx=dataset.absolute_to_relative_idx,
        )
        loader = torch.utils.data.DataLoader(dataset, num_workers=0, batch_size=BATCH, sampler=sampler)
        loader = accelerator.prepare(loader)
        stream = cycle(loader)
        served[name] = []
        for _ in range(PASSES):
            batches = [next(stream) for _ in range(len(loader))]
            served[name].append(
                [[k, i] for b in batches for k, i in zip(b["dataset_index"].tolist(), b["index"].tolist(), strict=True)]
            )
    os.makedirs(out, exist_ok=True)
    atomic_write_json(os.path.join(out, f"rank{accelerator.process_index}.json"), served)
    accelerator.wait_for_everyone()


def robomimic(out, paths, *cases):
    import torch.distributed as dist

    from robo_loaders_plugin.core import iteration
    from robo_loaders_plugin.core.files import atomic_write_json

    paths = paths.split(",")
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    specs = {name: spec.split(":") for name, spec in (c.split("=") for c in cases)}
    built = {name: build(paths, backend, weights, SEED) for name, (backend, weights) in specs.items()}
    first = next(iter(specs.values()))
    control = build(paths, first[0], first[1], SEED + rank) if world > 1 else None
    if world > 1:  # after the datasets: their first pass checks the ranks
        dist.init_process_group("gloo")
    served = {name: passes(dataset) for name, dataset in built.items()}
    if control is not None:
        checked = iteration.check_first_pass
        iteration.check_first_pass = lambda built, plan: None
        try:
            served["control"] = passes(control)
        finally:
            iteration.check_first_pass = checked
    os.makedirs(out, exist_ok=True)
    atomic_write_json(os.path.join(out, f"rank{rank}.json"), served)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    (lerobot if sys.argv[1] == "lerobot" else robomimic)(*sys.argv[2:])
