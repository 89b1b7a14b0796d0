"""The statistics of the statistical loss-parity tests (no scipy in the environment): is the mean of M runs of a
backend one more draw from the runs native training gives under K shuffle seeds? See
test_robomimic_datapipe_loss_parity.py for the reasoning and docs/parity-tests.md for the tolerances."""

import math

import numpy as np
import torch


def t_quantile(p: float, dof: int) -> float:
    """Student-t quantile by bisection on the numerically integrated density."""
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)

    def cdf(x):
        t = np.linspace(0.0, x, 20001)
        pdf = np.exp(log_norm - (dof + 1) / 2 * np.log1p(t * t / dof))
        return 0.5 + float(np.sum((pdf[1:] + pdf[:-1]) * np.diff(t)) / 2)

    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def t_violations(native: np.ndarray, runs: np.ndarray, losses, family_error: float):
    """(epoch, loss, t, critical value) wherever the runs' mean lies outside native's two-sample t interval, with a
    Bonferroni correction over every (epoch, loss); arrays are (runs, epochs, losses). Also returns t and the
    critical value."""
    K, M = len(native), len(runs)
    epochs = native.shape[1]
    crit = t_quantile(1 - family_error / (2 * epochs * len(losses)), K - 1)
    m, s = native.mean(0), native.std(0, ddof=1)
    t = (runs.mean(0) - m) / (s * math.sqrt(1 / M + 1 / K))
    return (
        [(e + 1, losses[j], round(float(t[e, j]), 2), round(crit, 2)) for e, j in zip(*np.nonzero(np.abs(t) > crit))],
        t,
        crit,
    )


def pair_actions_wrongly(dataset) -> None:
    """The negative control of the statistical tests: a backend dataset whose batches have their actions shuffled
    between rows (seeded by the batch's first index), every window's content right but its pairing with the actions
    wrong. Wraps the dataset's ``collate``, which builds every batch of the in-process backends."""
    collate = dataset.collate

    def shuffled_actions(indices):
        batch = collate(indices)
        g = torch.Generator().manual_seed(int(indices[0]))
        batch["actions"] = batch["actions"][torch.randperm(len(indices), generator=g)]
        return batch

    dataset.collate = shuffled_actions


ACT_METRICS = ("loss", "L1", "L2", "cosine")


def act_losses(meta, sampler_of, dataset, batches_of, steps: int, chunk: int = 10):
    """A small ACT policy (initialised from seed 0) trained ``steps`` steps on a LeRobot dataset's batches as
    lerobot-train 0.6.1 gets them: per step its loss and the L1, L2 and cosine distance of its predicted actions.

    Args:
        meta: The dataset's metadata (``make_policy`` and the normalisation read it).
        sampler_of: ``sampler_of()``: the EpisodeAwareSampler lerobot-train would build.
        dataset: The dataset the DataLoader wraps.
        batches_of: ``batches_of(loader)``: what the training loop iterates (the DataLoader, or the plugin's cycle).
        steps: Training steps.
        chunk: ACT's chunk size (the dataset's action window).

    Returns:
        ``(steps x 4 array of ACT_METRICS, how far the weights moved)``: a policy that did not move would make the
        comparison meaningless.
    """
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    cfg = ACTConfig(
        device="cpu", chunk_size=chunk, n_action_steps=chunk, dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None, push_to_hub=False,
    )  # fmt: skip
    policy = make_policy(cfg, ds_meta=meta)
    pre, _post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    loader = batches_of(dataset, sampler_of())
    initial = [p.detach().clone() for p in policy.parameters()]
    logs = []
    for _, batch in zip(range(steps), loader):
        for k in meta.camera_keys:  # what lerobot-train does before its preprocessor
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
