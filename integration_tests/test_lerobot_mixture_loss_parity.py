"""A small ACT policy trained a few steps on a 3-component LeRobot mixture (``--dataset.mixture``) logs the native
mixture's L1/L2/cosine losses on every backend.

Why exact, for every backend: a mixture's passes are always ordered by its ``MixtureOrder`` (seeded by the
sampler's seed, lerobot-train's ``--seed``), whatever the backend, and every item equals its component's
``LeRobotDataset[i]`` byte for byte (test_lerobot_mixture.py; LeRobot's own frames are already video, so
``video_stream`` decodes the same frames). The native mixture (LeRobot's ``LeRobotDataset`` per component) and every
backend must then give the same batches, so the same losses. The batches come as lerobot-train 0.6.1 gets them: its
``EpisodeAwareSampler`` over the mixture's episode table, a DataLoader, the plugin's ``cycle``. Negative controls:
another sampler seed and other weights give other losses under the same comparison.
"""

import numpy as np
import pytest
import torch
from test_lerobot_mixture import RENAME_C

from robo_loaders_plugin.lerobot.integration import choose, cycle
from robo_loaders_plugin.lerobot.mixture import build_mixture, parse

FPS = 20  # the mixture's components' rate (root conftest's LEROBOT_MIXTURE)
CHUNK = 10
STEPS = 4
BACKENDS = [
    ("compressed_cache", {}),
    ("datapipe", {}),
    ("gpu_resampler", {"device": "cpu"}),
    ("video_stream", {}),
]


def mixture(ds, weights=(1.0, 2.0, 3.0)):
    comps = [{"repo_id": ds[n][0], "root": ds[n][1], "weight": w} for n, w in zip("abc", weights, strict=True)]
    comps[2]["rename"] = RENAME_C
    return parse({"components": comps})


def train(ds, backend="native", options=None, sampler_seed=3, weights=(1.0, 2.0, 3.0)):
    """Per-step loss, L1, L2 and cosine distance of ACT (initialised from seed 0) trained on the mixture."""
    from lerobot.datasets import EpisodeAwareSampler
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    natives = [
        LeRobotDataset(
            ds[n][0],
            root=ds[n][1],
            delta_timestamps={"action": [i / FPS for i in range(CHUNK)]},
            return_uint8=True,
        )
        for n in "abc"
    ]
    mix = build_mixture(mixture(ds, weights), natives, choose(backend, **(options or {})), seed=sampler_seed)
    torch.manual_seed(0)
    cfg = ACTConfig(
        device="cpu",
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    policy = make_policy(cfg, ds_meta=mix.meta)
    pre, _post = make_pre_post_processors(cfg, dataset_stats=mix.meta.stats)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    sampler = EpisodeAwareSampler(  # as lerobot-train 0.6.1 builds it
        mix.meta.episodes["dataset_from_index"],
        mix.meta.episodes["dataset_to_index"],
        episode_indices_to_use=mix.episodes,
        shuffle=True,
        seed=sampler_seed,
        absolute_to_relative_idx=mix.absolute_to_relative_idx,
    )
    loader = torch.utils.data.DataLoader(mix, batch_size=8, sampler=sampler, num_workers=0, drop_last=False)
    initial = [p.detach().clone() for p in policy.parameters()]
    logs = []
    for _, batch in zip(range(STEPS), cycle(loader)):
        for k in mix.meta.camera_keys:  # what lerobot-train does before its preprocessor
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
                [
                    loss.item(),
                    (pred - target).abs().mean().item(),
                    ((pred - target) ** 2).mean().item(),
                    torch.nn.functional.cosine_similarity(pred.flatten(1), target.flatten(1)).mean().item(),
                ]
            )
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(policy.parameters(), initial, strict=True))
    return np.array(logs), moved


@pytest.fixture(scope="module")
def native(lerobot_mixture_datasets):
    return train(lerobot_mixture_datasets)


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
def test_every_backend_logs_the_native_mixtures_losses(lerobot_mixture_datasets, native, backend, options):
    ref, moved = native
    assert moved > 1e-4  # it trained: the losses compared come from a policy that moved
    got, _ = train(lerobot_mixture_datasets, backend, options)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9, err_msg=f"{backend}: loss, L1, L2, cosine per step")


def test_loss_comparison_can_fail(lerobot_mixture_datasets, native):
    """Negative controls: another sampler seed (another mixture order) and other weights give other losses."""
    ref, _ = native
    ds = lerobot_mixture_datasets
    for other in (
        train(ds, "compressed_cache", sampler_seed=4),
        train(ds, "compressed_cache", weights=(3.0, 2.0, 1.0)),
    ):
        assert not np.allclose(other[0], ref, rtol=1e-6, atol=1e-9)
