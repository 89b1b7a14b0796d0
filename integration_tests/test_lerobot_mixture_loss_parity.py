"""A small ACT policy trained a few steps on a 3-component LeRobot mixture (``--dataset.mixture``) logs the native
mixture's L1/L2/cosine losses on every backend.

Why exact, for every backend: a mixture's passes are always ordered by its ``MixtureOrder`` (seeded by the
sampler's seed, lerobot-train's ``--seed``), whatever the backend, and every item equals its component's
``LeRobotDataset[i]`` byte for byte (test_lerobot_mixture.py; LeRobot's own frames are already video, so
``video_stream`` decodes the same frames). The native mixture (LeRobot's ``LeRobotDataset`` per component) and every
backend must then give the same batches, so the same losses. ``datapipe`` and ``video_stream`` serve each pass's
draws by unit (``MixtureDataset.units``: the same windows, in an order that loads each episode once per pass): the
native mixture is then served in that order too (its ``units`` set to theirs), and must give their losses; the
native mixture in its own, drawn, order gives others (the control that their order is another). The batches come
as lerobot-train 0.6.1 gets them: its ``EpisodeAwareSampler`` over the mixture's episode table, a DataLoader, the
plugin's ``cycle``. Negative controls: another sampler seed and other weights give other losses under the same
comparison.
"""

import numpy as np
import pytest
import torch
from loss_stats import act_losses
from test_lerobot_mixture import RENAME_C
from test_video_stream import sampler_for

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


def train(ds, backend="native", options=None, sampler_seed=3, weights=(1.0, 2.0, 3.0), units=None):
    """Per-step loss, L1, L2 and cosine distance of ACT (initialised from seed 0) trained on the mixture, how much
    the policy moved, and the mixture's ``units()`` (``units``: served in that order instead)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

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
    if units is not None:
        mix.units = lambda: units  # served by these units, as the backend that has them serves its passes

    def batches(dataset, sampler):
        return cycle(torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=0))

    losses, moved = act_losses(mix.meta, lambda: sampler_for(mix, sampler_seed), mix, batches, STEPS, chunk=CHUNK)
    return losses, moved, mix.units()


@pytest.fixture(scope="module")
def native(lerobot_mixture_datasets):
    return train(lerobot_mixture_datasets)


BY_UNIT = ("datapipe", "video_stream")


@pytest.mark.parametrize("backend,options", BACKENDS, ids=[b for b, _ in BACKENDS])
def test_every_backend_logs_the_native_mixtures_losses(lerobot_mixture_datasets, native, backend, options):
    ref, moved, native_units = native
    assert moved > 1e-4 and native_units == (None, 1)  # it trained, in the drawn order
    got, _, units = train(lerobot_mixture_datasets, backend, options)
    assert (units[0] is not None) == (backend in BY_UNIT), units
    if backend in BY_UNIT:  # native served in the same order; in its own (drawn) order, other losses
        assert not np.allclose(got, ref, rtol=1e-6, atol=1e-9)
        ref, _, _ = train(lerobot_mixture_datasets, units=units)
    np.testing.assert_array_equal(got, ref, err_msg=f"{backend}: loss, L1, L2, cosine per step")  # exactly


def test_loss_comparison_can_fail(lerobot_mixture_datasets, native):
    """Negative controls: another sampler seed (another mixture order) and other weights give other losses."""
    ref = native[0]
    ds = lerobot_mixture_datasets
    for other in (
        train(ds, "compressed_cache", sampler_seed=4),
        train(ds, "compressed_cache", weights=(3.0, 2.0, 1.0)),
    ):
        assert not np.allclose(other[0], ref, rtol=1e-6, atol=1e-9)
