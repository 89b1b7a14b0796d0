"""Run by ``test_multiprocess.py`` under ``torchrun --nproc_per_node 2``: a robomimic custom loop that builds its
datasets from torchrun's ``RANK``/``WORLD_SIZE`` *before* it initialises the process group (docs/multi-process.md
allows it), so nothing can check the ranks at build time; the first pass must.

For each backend, two datasets are built before the group exists: one with the same ``train.seed`` on every rank,
one with the ``seed + rank`` idiom. Then, in order:

- ``no process group``: a first pass with no process group at all: must be refused on every rank;
- (the gloo process group is initialised)
- ``seed + rank``: must be refused on every rank (the first pass checks what the build could not);
- ``per-rank batch size``: the same dataset, a DataLoader whose batch size differs per rank: refused;
- ``same setup``: two passes served; the windows each rank served are recorded;
- ``both rank 0``: a dataset built after the group with ``rank=0, world_size=2`` given on both ranks: refused;
- ``seed + rank, check disabled``: the negative control: the first-pass check replaced by a no-op, two passes of
  the ``seed + rank`` datasets served and recorded (the pre-fix behaviour).

Windows are identified by a digest of their action window. Writes ``OUT/rank<r>.json``:
``{backend: {case: "REFUSED <message>" | [pass: [digest, ...]]}}``.

Usage: ranks_late_group_script.py HDF5 OUT BACKEND...
"""

import functools
import hashlib
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH, PASSES, SEED = 8, 2, 11


def build(hdf5, backend, seed, **ranks):
    import robomimic.utils.train_utils as TrainUtils
    from robomimic_helpers import make_config, obs_keys

    config = make_config(hdf5, rgb=[], low_dim=["robot0_eef_pos"], backend=backend, seq_length=3, seed=seed)
    return TrainUtils.dataset_factory(config, obs_keys(config), **ranks)


def passes(dataset, batch_size=BATCH):
    """What robomimic's run_epoch iterates, ``PASSES`` times, over a DataLoader as a custom loop builds it (no
    drop_last: every window of the pass is served)."""
    from robo_loaders_plugin.robomimic.integration import epoch_loader

    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0, drop_last=False)
    return [
        [hashlib.sha1(a.numpy().tobytes()).hexdigest()[:16] for batch in epoch_loader(loader) for a in batch["actions"]]
        for _ in range(PASSES)
    ]


def attempt(run):
    from robo_loaders_plugin import RoboLoadersError

    try:
        return run()
    except RoboLoadersError as exc:
        return f"REFUSED {exc}"


def main(hdf5, out, *backends):
    from robo_loaders_plugin.core import iteration
    from robo_loaders_plugin.core.files import atomic_write_json

    rank = int(os.environ["RANK"])
    assert not dist.is_initialized()
    built = {b: (build(hdf5, b, SEED), build(hdf5, b, SEED + rank)) for b in backends}
    results = {b: {} for b in backends}
    for b, (same, _) in built.items():
        results[b]["no process group"] = attempt(functools.partial(passes, same))
    dist.init_process_group("gloo")
    for b, (same, per_rank) in built.items():
        results[b]["seed + rank"] = attempt(functools.partial(passes, per_rank))
        results[b]["per-rank batch size"] = attempt(functools.partial(passes, same, BATCH + rank))
        results[b]["same setup"] = attempt(functools.partial(passes, same))
        results[b]["both rank 0"] = attempt(functools.partial(build, hdf5, b, SEED, rank=0, world_size=2))
    checked = getattr(iteration, "check_first_pass", None)  # (getattr: the script also runs on code without it)
    iteration.check_first_pass = lambda built, plan: None
    try:
        for b, (_, per_rank) in built.items():
            results[b]["seed + rank, check disabled"] = attempt(functools.partial(passes, per_rank))
    finally:
        iteration.check_first_pass = checked
    atomic_write_json(os.path.join(out, f"rank{rank}.json"), results)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
