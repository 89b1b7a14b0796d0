"""Shared helpers of the LeRobot integration tests (datasets written with LeRobot's own API, no mocks)."""

import numpy as np
import torch

REPO = "local/sample"


def same_item(ours: dict, theirs: dict, where=""):
    """Same keys in the same order, same dtypes, shapes and values (tensors exactly equal)."""
    assert list(ours) == list(theirs), f"{where}: keys {list(ours)} != {list(theirs)}"
    for k, v in theirs.items():
        o = ours[k]
        if isinstance(v, torch.Tensor):
            assert isinstance(o, torch.Tensor), f"{where}/{k}: {type(o)}"
            assert o.dtype == v.dtype and o.shape == v.shape, (
                f"{where}/{k}: {o.dtype}{tuple(o.shape)} != {v.dtype}{tuple(v.shape)}"
            )
            assert torch.equal(o, v), f"{where}/{k}: values differ"
        else:
            assert o == v, f"{where}/{k}: {o!r} != {v!r}"


def random_indices(n, count=500, seed=0):
    return np.random.default_rng(seed).choice(n, size=count, replace=count > n).tolist()


def serve(backend: str, native, **options):
    """``native`` served through ``backend`` with ``options``, as ``lerobot-train --dataset.backend=BACKEND
    --dataset.backend_kwargs=JSON`` does: options checked, dataset built and recorded for the adapter."""
    from robo_loaders_plugin.lerobot.integration import build_dataset, choose

    return build_dataset(native, choose(backend, **options))
