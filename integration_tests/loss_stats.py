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
