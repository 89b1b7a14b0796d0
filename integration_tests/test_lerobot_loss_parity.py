"""A small ACT policy trained a few steps on native vs compressed_cache / gpu_resampler batches (same seed, same
EpisodeAwareSampler): L1, L2 and cosine distances between predicted and target actions must match. gpu_resampler's
batches come from lerobot-train's (patched) cycle(dataloader), built in-process over the sampler's order."""

import pytest
import torch
from lerobot_helpers import REPO, serve

from benchmarks.harness.loss_curves import loss_curves_path, loss_run, write_loss_curves
from robo_loaders_plugin.lerobot.integration import cycle

FPS = 20


def train(root, backend, sampler_seed=3, steps=4, workers=0):
    from lerobot.datasets import EpisodeAwareSampler
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    ds = LeRobotDataset(REPO, root=root, delta_timestamps={"action": [i / FPS for i in range(10)]}, return_uint8=True)
    if backend == "compressed_cache":
        ds = serve("compressed_cache", ds)
    elif backend == "gpu_resampler":
        ds = serve("gpu_resampler", ds)
    cfg = ACTConfig(
        device="cpu",
        chunk_size=10,
        n_action_steps=10,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    policy = make_policy(cfg, ds_meta=ds.meta)
    pre, _post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    sampler = EpisodeAwareSampler(
        ds.meta.episodes["dataset_from_index"],
        ds.meta.episodes["dataset_to_index"],
        episode_indices_to_use=ds.episodes,
        shuffle=True,
        seed=sampler_seed,
        absolute_to_relative_idx=ds.absolute_to_relative_idx,
    )
    kw = dict(multiprocessing_context="spawn") if workers else {}
    loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler, num_workers=workers, **kw)
    initial = [p.detach().clone() for p in policy.parameters()]
    logs = []
    batches = cycle(loader) if backend == "gpu_resampler" else loader
    for _, batch in zip(range(steps), batches):
        for k in ds.meta.camera_keys:  # what lerobot-train does before its preprocessor
            if batch[k].dtype == torch.uint8:
                batch[k] = batch[k].to(dtype=torch.float32) / 255.0
        batch = pre(batch)
        policy.train()
        loss, _ = policy.forward(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            policy.eval()
            pred, target = policy.predict_action_chunk(batch), batch["action"]
            logs.append(
                {
                    "loss": loss.item(),
                    "L1": (pred - target).abs().mean().item(),
                    "L2": ((pred - target) ** 2).mean().item(),
                    "cosine": torch.nn.functional.cosine_similarity(pred.flatten(1), target.flatten(1)).mean().item(),
                }
            )
    # how far the weights moved: 0 would mean the losses compared came from an untrained policy
    logs[-1]["weights_moved"] = max(float((p - q).abs().max()) for p, q in zip(policy.parameters(), initial))
    return logs


@pytest.mark.parametrize("backend,workers", [("compressed_cache", 0), ("compressed_cache", 2), ("gpu_resampler", 1)])
def test_same_losses(lerobot_datasets, backend, workers):
    root = lerobot_datasets["av1_1cam"]
    ref = train(root, "native", workers=0)
    got = train(root, backend, workers=workers)
    # the curves for `robo-loaders report` (one point per step), written before the comparison so a failure is plotted
    write_loss_curves(
        loss_curves_path("lerobot_act"),
        "lerobot",
        [loss_run("native", 3, ref), loss_run(backend, 3, got, label=f"{backend} (workers {workers})")],
        metrics=["L1", "L2", "cosine"],
        settings={"policy": "act", "batch_size": 8, "steps": 4},
        x="step",
    )
    for r, g in zip(ref, got):
        for k in r:
            assert g[k] == pytest.approx(r[k], rel=1e-6, abs=1e-9), (k, r, g)
    assert ref[-1]["weights_moved"] > 1e-4  # it trained: the steps changed the policy whose losses are compared


def test_loss_comparison_can_fail(lerobot_datasets):
    root = lerobot_datasets["av1_1cam"]
    assert train(root, "compressed_cache", sampler_seed=3, steps=1) != train(
        root, "compressed_cache", sampler_seed=4, steps=1
    )
