"""robomimic on several GPUs: one process per GPU, each training on its own share of every pass.

    torchrun --nproc_per_node 4 examples/robomimic_ddp.py --config my_bc_rnn.json [--dataset demo.hdf5]

robomimic 0.3.0 trains on one GPU only. This loop keeps what robomimic's train script does (its JSON config,
``algo_factory``, ``load_data_for_training``, ``run_epoch`` and the algorithm's own ``train_on_batch``) and adds the
two things data-parallel training needs, without touching robomimic:

- **the data**: ``train.data_backend`` picks the plugin's backend as in the single-GPU script; the plugin reads the
  rank and world size torchrun sets, so every rank's pass (robomimic's ``run_epoch``) is its own share of the
  single-process pass, with the same number of batches on every rank (docs/multi-process.md). robomimic's native
  ``SequenceDataset`` has no such split: it gets a ``DistributedSampler``.
- **the weights**: every rank starts from rank 0's weights, and each parameter's gradient is averaged over the
  ranks the moment backward computes it (a hook on the parameter), before robomimic's optimizer step: the ranks take
  the same steps, as under ``DistributedDataParallel``, which cannot wrap robomimic's algorithm objects.

Rank 0 logs each epoch's mean loss and, with ``--save``, writes the model (``algo.serialize()``) at the end.
``--report DIR`` writes every rank's losses and a digest of its weights (what tests/CI check: the ranks stay equal).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="robomimic JSON config (as for robomimic/scripts/train.py)")
    p.add_argument("--dataset", help="overrides train.data")
    p.add_argument("--epochs", type=int, help="overrides train.num_epochs")
    p.add_argument("--steps", type=int, help="overrides experiment.epoch_every_n_steps (batches per epoch)")
    p.add_argument("--save", help="rank 0 writes the trained model here (torch.save of algo.serialize())")
    p.add_argument("--report", help="directory: each rank writes rank<R>.json (losses, weight digest)")
    return p.parse_args(argv)


def load_config(args):
    from robomimic.config import config_factory

    with open(args.config) as f:
        ext = json.load(f)
    config = config_factory(ext["algo_name"])
    with config.values_unlocked():
        config.update(ext)
        if args.dataset:
            config.train.data = args.dataset
        if args.epochs:
            config.train.num_epochs = args.epochs
        if args.steps:
            config.experiment.epoch_every_n_steps = args.steps
    config.lock()
    return config


def average_gradients_across_ranks(module: torch.nn.Module) -> None:
    """Start from rank 0's weights and average every gradient over the ranks as backward produces it."""
    world = dist.get_world_size()
    for p in module.parameters():
        dist.broadcast(p.data, src=0)
        if p.requires_grad:
            p.register_hook(lambda g: _all_reduce_mean(g, world))


def _all_reduce_mean(grad: torch.Tensor, world: int) -> torch.Tensor:
    grad = grad.clone()
    dist.all_reduce(grad)
    return grad / world


def weights_digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv=None):
    args = parse_args(argv)
    import robomimic.utils.file_utils as FileUtils
    import robomimic.utils.obs_utils as ObsUtils
    import robomimic.utils.torch_utils as TorchUtils
    import robomimic.utils.train_utils as TrainUtils
    from robomimic.algo import algo_factory

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    config = load_config(args)
    torch.manual_seed(config.train.seed)
    ObsUtils.initialize_obs_utils_with_config(config)
    shape_meta = FileUtils.get_shape_metadata_from_dataset(
        dataset_path=config.train.data, all_obs_keys=config.all_obs_keys, verbose=False
    )
    device = (
        torch.device(f"cuda:{local_rank}") if use_cuda and config.train.cuda else TorchUtils.get_torch_device(False)
    )
    model = algo_factory(
        algo_name=config.algo_name,
        config=config,
        obs_key_shapes=shape_meta["all_shapes"],
        ac_dim=shape_meta["ac_dim"],
        device=device,
    )
    average_gradients_across_ranks(model.nets)
    initial_weights = weights_digest(model.nets)

    trainset, _ = TrainUtils.load_data_for_training(config, obs_keys=shape_meta["all_obs_keys"])
    sampler = trainset.get_dataset_sampler()
    # the plugin's backends (and mixtures, native ones too) split each pass themselves; SequenceDataset does not
    native = config.train.get("data_backend") in (None, "native") and not config.train.get("data_mixture")
    if native and sampler is None:
        sampler = torch.utils.data.distributed.DistributedSampler(
            trainset, num_replicas=world, rank=rank, seed=config.train.seed, drop_last=True
        )
    loader = torch.utils.data.DataLoader(
        trainset,
        sampler=sampler,
        batch_size=config.train.batch_size,
        shuffle=sampler is None,
        num_workers=config.train.num_data_workers,
        drop_last=True,
    )
    if rank == 0:
        print(
            f"[robomimic_ddp] {world} processes, {config.algo_name}, backend "
            f"{config.train.get('data_backend') or 'native'}, {len(trainset)} windows",
            flush=True,
        )

    losses = []
    for epoch in range(1, config.train.num_epochs + 1):
        if isinstance(sampler, torch.utils.data.distributed.DistributedSampler):
            sampler.set_epoch(epoch)
        log = TrainUtils.run_epoch(
            model=model, data_loader=loader, epoch=epoch, num_steps=config.experiment.epoch_every_n_steps
        )
        losses.append(log["Loss"])
        model.on_epoch_end(epoch)
        if rank == 0:
            print(f"[robomimic_ddp] epoch {epoch}: loss {log['Loss']:.5f} (rank 0's batches)", flush=True)

    if args.report:
        os.makedirs(args.report, exist_ok=True)
        with open(os.path.join(args.report, f"rank{rank}.json"), "w") as f:
            json.dump(
                {
                    "rank": rank,
                    "world": world,
                    "losses": losses,
                    "initial_weights": initial_weights,
                    "weights": weights_digest(model.nets),
                },
                f,
            )
    if args.save and rank == 0:
        torch.save(model.serialize(), args.save)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
