"""Run by ``test_multiprocess.py`` under ``torchrun --nproc_per_node 2``: ranks set up differently (a per-rank seed,
per-rank options) must be refused when the dataset is built, and ranks set up the same must build. Writes one
``CASE <name>: REFUSED <message>`` or ``CASE <name>: BUILT`` line per case to ``CACHE_DIR/rank<r>.txt`` (a file per
rank: the ranks' stdout lines interleave, progress bars included).

Usage: rank_agreement_script.py HDF5 LEROBOT_ROOT CACHE_DIR
"""

import os
import sys
from types import SimpleNamespace

import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


RESULTS = []


def attempt(name, build):
    from robo_loaders_plugin import RoboLoadersError

    try:
        build()
        RESULTS.append(f"CASE {name}: BUILT")
    except RoboLoadersError as exc:
        RESULTS.append(f"CASE {name}: REFUSED {exc}")


def main(hdf5, root, cache):
    from accelerate import Accelerator  # initialises the gloo process group, as lerobot-train's does

    accelerator = Accelerator(cpu=True)
    assert dist.is_initialized()
    rank = accelerator.process_index
    import robomimic.utils.train_utils as TrainUtils
    from lerobot.datasets import LeRobotDataset
    from lerobot_helpers import REPO
    from robomimic_helpers import RGB, make_config, obs_keys

    from robo_loaders_plugin.lerobot import integration, single

    def robomimic(seed, seq_length=3, ranks=None, **kwargs):
        config = make_config(
            hdf5,
            rgb=RGB,
            low_dim=["robot0_eef_pos"],
            backend="datapipe",
            seq_length=seq_length,
            seed=seed,
            backend_kwargs=dict({"cache_dir": os.path.join(cache, f"host{rank}")}, **kwargs),
        )
        if ranks is not None:  # the plugin's own factory, given the ranks
            from robo_loaders_plugin.robomimic import dataset_factory

            return lambda: dataset_factory(config, obs_keys(config), rank=ranks[0], world_size=ranks[1])
        return lambda: TrainUtils.dataset_factory(config, obs_keys(config))

    def lerobot(seed, **kwargs):
        """As lerobot-train: the dataset (rank 0 first, then the others after a barrier), its DataLoader over an
        EpisodeAwareSampler seeded with --seed, prepared by accelerate, then cycle() on every rank."""
        import torch
        from lerobot.datasets import EpisodeAwareSampler

        def run():
            native = LeRobotDataset(REPO, root=root, delta_timestamps={"action": [0.0, 0.05]})
            cfg = SimpleNamespace(
                seed=seed,
                dataset=SimpleNamespace(
                    backend="compressed_cache", backend_kwargs=kwargs, repo_id=REPO, streaming=False
                ),
            )
            if accelerator.is_main_process:
                dataset = single.convert(native, cfg)
            accelerator.wait_for_everyone()
            if not accelerator.is_main_process:
                dataset = single.convert(native, cfg)
            sampler = EpisodeAwareSampler(
                native.meta.episodes["dataset_from_index"],
                native.meta.episodes["dataset_to_index"],
                shuffle=True,
                seed=seed,
            )
            loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler))
            next(integration.cycle(loader))

        return run

    attempt("robomimic seed + rank", robomimic(11 + rank))
    attempt("robomimic per-rank option", robomimic(11, shuffle_buffer=2 + rank))
    attempt("robomimic same setup, per-host cache_dir", robomimic(11))
    attempt("robomimic per-rank seq_length", robomimic(11, seq_length=3 + rank))
    attempt("robomimic one process on every rank", robomimic(11, ranks=(0, 1)))
    if rank == 0:  # a rank-0 evaluation set, built on rank 0 alone: nothing gathered (it waited forever)
        attempt("robomimic one process on rank 0 alone", robomimic(11, ranks=(0, 1)))
    attempt("robomimic explicit ranks", robomimic(11, ranks=(rank, 2)))
    attempt("lerobot seed + rank", lerobot(1000 + rank))
    attempt("lerobot same setup", lerobot(1000))
    with open(os.path.join(cache, f"rank{rank}.txt"), "w") as f:
        f.write("\n".join(RESULTS) + "\n")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:])
