"""A small ACT policy trained a few steps on native vs compressed_cache / gpu_resampler batches (same seed, same
EpisodeAwareSampler): L1, L2 and cosine distances between predicted and target actions must match. gpu_resampler's
batches, and compressed_cache's with ``loader: threads`` (``#threads``), come from lerobot-train's (patched)
cycle(dataloader), built in-process over the sampler's order."""

import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot_helpers import REPO, serve
from loss_stats import ACT_METRICS, act_losses
from test_video_stream import sampler_for

from benchmarks.harness.loss_curves import loss_curves_path, loss_run, write_loss_curves
from robo_loaders_plugin.lerobot.integration import cycle

FPS = 20


def train(root, backend, sampler_seed=3, steps=4, workers=0):
    torch.manual_seed(0)
    ds = LeRobotDataset(REPO, root=root, delta_timestamps={"action": [i / FPS for i in range(10)]}, return_uint8=True)
    name, _, variant = backend.partition("#")
    if name in ("compressed_cache", "gpu_resampler"):
        ds = serve(name, ds, **({"loader": "threads"} if variant == "threads" else {}))

    def batches(dataset, sampler):
        kw = dict(multiprocessing_context="spawn") if workers else {}
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=workers, **kw)
        return cycle(loader) if name == "gpu_resampler" or variant == "threads" else loader

    values, moved = act_losses(ds.meta, lambda: sampler_for(ds, sampler_seed), ds, batches, steps)
    logs = [dict(zip(ACT_METRICS, row)) for row in values.tolist()]
    # how far the weights moved: 0 would mean the losses compared came from an untrained policy
    logs[-1]["weights_moved"] = moved
    return logs


@pytest.mark.parametrize(
    "backend,workers",
    [("compressed_cache", 0), ("compressed_cache", 2), ("compressed_cache#threads", 1), ("gpu_resampler", 1)],
)
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
            assert g[k] == r[k], (k, r, g)  # exactly: the same batches give the same numbers
    assert ref[-1]["weights_moved"] > 1e-4  # it trained: the steps changed the policy whose losses are compared


def test_loss_comparison_can_fail(lerobot_datasets):
    root = lerobot_datasets["av1_1cam"]
    assert train(root, "compressed_cache", sampler_seed=3, steps=1) != train(
        root, "compressed_cache", sampler_seed=4, steps=1
    )
