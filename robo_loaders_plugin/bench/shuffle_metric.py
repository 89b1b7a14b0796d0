"""How well a loader mixes episodes: mean over batches of (distinct episodes in the batch / batch size).

Why this number: a loader that reads episode by episode for speed can hand the model batches drawn from one or
two episodes, which changes training (correlated gradients) even when every sample is right. 1.0 means every
sample of a batch comes from a different episode; a uniform shuffle over many equal episodes comes close to 1,
sequential reading gives about 1 / batch size. Compare a backend with the native loader measured in the same run.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def episode_mix(batches: Iterable) -> float | None:
    """The mean over batches of (distinct episodes in the batch / batch size).

    Args:
        batches: One array of episode ids per batch (any array-like); empty batches are skipped.

    Returns:
        The mix, or ``None`` when there are no batches.
    """
    ratios = [len(np.unique(np.asarray(ep))) / len(ep) for ep in batches if len(ep)]
    return float(np.mean(ratios)) if ratios else None
