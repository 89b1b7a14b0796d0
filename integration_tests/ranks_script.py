"""Run by ``test_multiprocess.py`` under ``torchrun --nproc_per_node 2`` (or alone, as one process): which samples
every backend serves this rank in each of two passes, written to ``OUT/<framework>-rank<r>.json``.

LeRobot: the DataLoader is built as ``lerobot-train`` 0.6.1 builds it (EpisodeAwareSampler, batch size, no
shuffle flag) and prepared by a real ``accelerate.Accelerator``; the loop's ``cycle`` is the plugin's, as in
lerobot-train. Items are identified by their ``index``. robomimic: the dataset comes from robomimic's (patched)
``dataset_factory`` with the rank from torchrun's environment (the process group initialised after the datasets
are built, so that their first pass checks the ranks), the DataLoader is built as robomimic's ``train()``
builds it, and a pass is what ``run_epoch`` iterates (``epoch_loader``). Samples are identified by a digest of
their action window.

Usage: ranks_script.py lerobot ROOT OUT BACKEND[:JSON_KWARGS]... | robomimic HDF5 OUT BACKEND[:JSON_KWARGS]...
"""

import hashlib
import json
import os
import sys
from types import SimpleNamespace

import torch

from robo_loaders_plugin.core.files import atomic_write_json

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PASSES = 2
BATCH = 8


def parse(specs):
    for spec in specs:
        name, _, kwargs = spec.partition(":")
        yield spec, name, json.loads(kwargs) if kwargs else {}


def lerobot(root, specs):
    from accelerate import Accelerator
    from lerobot.datasets import EpisodeAwareSampler, LeRobotDataset
    from lerobot_helpers import REPO

    from robo_loaders_plugin.lerobot import integration, single

    accelerator = Accelerator(cpu=True)
    served = {}
    for spec, name, kwargs in parse(specs):
        native = LeRobotDataset(REPO, root=root, delta_timestamps={"action": [0.0, 0.05]})
        cfg = SimpleNamespace(
            dataset=SimpleNamespace(backend=name, backend_kwargs=kwargs, repo_id=REPO, streaming=False)
        )
        dataset = single.convert(native, cfg)
        sampler = EpisodeAwareSampler(
            native.meta.episodes["dataset_from_index"],
            native.meta.episodes["dataset_to_index"],
            episode_indices_to_use=native.episodes,
            shuffle=True,
            seed=1000,
            absolute_to_relative_idx=native.absolute_to_relative_idx,
        )
        loader = torch.utils.data.DataLoader(
            dataset, num_workers=0, batch_size=BATCH, shuffle=False, sampler=sampler, drop_last=False
        )
        loader = accelerator.prepare(loader)
        stream = integration.cycle(loader)
        served[spec] = [[next(stream)["index"].tolist() for _ in range(len(loader))] for _ in range(PASSES)]
    accelerator.wait_for_everyone()
    return accelerator.process_index, served


def robomimic(hdf5, specs):
    import robomimic.utils.train_utils as TrainUtils
    from robomimic_helpers import RGB, make_config, obs_keys

    from robo_loaders_plugin.robomimic.integration import epoch_loader

    served, rank, datasets = {}, int(os.environ.get("RANK", "0")), {}
    for spec, name, kwargs in parse(specs):
        config = make_config(
            hdf5, rgb=RGB, low_dim=["robot0_eef_pos"], backend=name, backend_kwargs=kwargs, seq_length=3, seed=11
        )
        datasets[spec] = TrainUtils.dataset_factory(config, obs_keys(config))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # after the datasets: their first pass checks the ranks
        torch.distributed.init_process_group("gloo")
    # as robomimic's train() seeds torch (its config.train.seed): the DataLoader's shuffle draws its seed from
    # torch's generator, so an unseeded run's order (and which windows drop_last leaves out) changed at every run,
    # and the single process's passes were not the ones the ranks split
    torch.manual_seed(11)
    for spec, dataset in datasets.items():
        loader = torch.utils.data.DataLoader(
            dataset, sampler=None, batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True
        )
        passes = []
        for _ in range(PASSES):
            passes.append(
                [
                    [hashlib.sha1(a.numpy().tobytes()).hexdigest()[:16] for a in batch["actions"]]
                    for batch in epoch_loader(loader)
                ]
            )
        served[spec] = passes
    return rank, served


def main(framework, data, out, *specs):
    rank, served = (lerobot if framework == "lerobot" else robomimic)(data, specs)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{framework}-rank{rank}.json")
    atomic_write_json(path, served)
    print(f"rank {rank}: wrote {path}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
