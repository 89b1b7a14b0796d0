"""robomimic BC-RNN trained a few steps on a 3-component mixture (``train.data_mixture``) logs the native mixture's
L1/L2/cosine losses on every backend.

Why exact: a mixture's passes are always ordered by its ``MixtureOrder`` (seed ``train.seed``), whatever the backend,
and every component's window is its ``SequenceDataset`` window byte for byte (test_robomimic_mixture.py), so the
native mixture (robomimic's own ``SequenceDataset`` per component) and every lossless backend must give the same
batches and therefore the same losses. ``video_stream`` serves the same windows in the same order with H.264-decoded
frames (lossy, >= 25 dB PSNR on these 16x16 cameras): its losses must be close to native's, measured against what
another pass order does to them (see :func:`test_video_stream_losses_close_to_the_native_mixtures`).
``datapipe`` and ``video_stream`` serve each pass's draws by unit (``MixtureDataset.units``: the same windows, in an
order that loads each demo once per pass): the native mixture is compared in that order (its ``units`` set to
theirs); in its own, drawn, order it gives other losses (the control that their order is another).

The model sees the frames (ShallowConv + spatial softmax on both cameras, one of them renamed in component 2), so a
wrong frame, a wrong rename or a wrong component changes the curves. Negative controls: another order seed and
other weights give other losses under the same comparison.
"""

import contextlib
import io

import numpy as np
import pytest
import torch
from robomimic_helpers import RGB, make_config, obs_keys
from test_robomimic_mixture import WRIST, _rename_camera, _write

from robo_loaders_plugin.robomimic import dataset_factory

LOSSES = ("L1_Loss", "L2_Loss", "Cosine_Loss", "Loss")
LOW_DIM = ["robot0_eef_pos", "object"]
EXACT = ["compressed_cache", "datapipe", "gpu_resampler"]
EPOCHS, STEPS, BATCH = 3, 4, 8
ORDER_SEEDS = (2, 3, 4, 5)  # other pass orders: the spread video_stream's difference is measured against
VIDEO_FRACTION = 0.1


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Three small files: a (4 demos), b (3 demos), c (3 demos, its wrist camera stored as ``wrist_image``)."""
    d = tmp_path_factory.mktemp("mixloss")
    a = _write(str(d / "a.hdf5"), 11, 4)
    b = _write(str(d / "b.hdf5"), 12, 3)
    c = _rename_camera(_write(str(d / "c.hdf5"), 13, 3), WRIST, "wrist_image")
    return a, b, c


def mixture(parts, weights=(1, 2, 3)):
    a, b, c = parts
    comps = [{"path": a}, {"path": b}, {"path": c, "rename": {"wrist_image": WRIST}}]
    return {"components": [dict(comp, weight=w) for comp, w in zip(comps, weights, strict=True)]}


def train_losses(parts, backend=None, order_seed=1, weights=(1, 2, 3), units=None):
    """Per-epoch losses of BC-RNN (initialised from seed 0) trained on the mixture through robomimic's (patched)
    ``run_epoch``, over the DataLoader robomimic's ``train()`` builds; the mixture's order seed is ``train.seed``.
    Returns the losses, how much the model moved and the mixture's ``units()`` (``units``: served in that order)."""
    import robomimic.utils.file_utils as FileUtils
    import robomimic.utils.train_utils as TrainUtils
    from robomimic.algo import algo_factory

    cfg = make_config(
        parts[0],
        rgb=RGB,
        low_dim=LOW_DIM,
        backend=backend,
        seq_length=5,
        batch_size=BATCH,
        num_data_workers=0,
        hdf5_cache_mode="low_dim",
        seed=order_seed,
    )
    with cfg.values_unlocked():
        cfg.train.data_mixture = mixture(parts, weights)
        cfg.algo.rnn.enabled = True
        cfg.algo.rnn.horizon = 5
        cfg.algo.rnn.hidden_dim = 32
        cfg.algo.actor_layer_dims = ()
        cfg.algo.optim_params.policy.learning_rate.initial = 4e-3
        cfg.observation.encoder.rgb.core_kwargs.backbone_class = "ShallowConv"
        cfg.observation.encoder.rgb.core_kwargs.feature_dimension = 16
        cfg.train.cuda = False
    keys = obs_keys(cfg)
    torch.manual_seed(0)
    np.random.seed(0)
    meta = FileUtils.get_shape_metadata_from_dataset(dataset_path=parts[0], all_obs_keys=keys, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        model = algo_factory(
            algo_name=cfg.algo_name,
            config=cfg,
            obs_key_shapes=meta["all_shapes"],
            ac_dim=meta["ac_dim"],
            device=torch.device("cpu"),
        )
        dataset = dataset_factory(cfg, keys)
    if units is not None:
        dataset.units = lambda: units  # served by these units, as the backend that has them serves its passes
    loader = torch.utils.data.DataLoader(
        dataset, sampler=dataset.get_dataset_sampler(), batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True
    )
    initial = [p.detach().clone() for p in model.nets.parameters()]
    logs = []
    with contextlib.redirect_stdout(io.StringIO()):
        for epoch in range(1, EPOCHS + 1):
            log = TrainUtils.run_epoch(model=model, data_loader=loader, epoch=epoch, num_steps=STEPS)
            logs.append([log[k] for k in LOSSES])
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(model.nets.parameters(), initial, strict=True))
    return np.array(logs), moved, dataset.units()


BY_UNIT = ("datapipe", "video_stream")


def native_in_order_of(parts, got, units, ref):
    """The native mixture's losses in the order of a backend served by ``units``, after checking that the drawn
    order gives other losses than ``got`` (the backend's order is another)."""
    assert units[0] is not None
    assert not np.allclose(got, ref, rtol=1e-6, atol=1e-9)
    return train_losses(parts, units=units)[0]


@pytest.fixture(scope="module")
def native(parts):
    return train_losses(parts)


@pytest.mark.parametrize("backend", EXACT)
def test_exact_backends_log_the_native_mixtures_losses(parts, native, backend):
    ref, moved, native_units = native
    assert moved > 1e-4 and native_units == (None, 1)  # it trained, in the drawn order
    got, _, units = train_losses(parts, backend)
    if backend in BY_UNIT:
        ref = native_in_order_of(parts, got, units, ref)
    else:
        assert units == (None, 1)
    np.testing.assert_array_equal(got, ref, err_msg=f"{backend}: {LOSSES} per epoch")  # exactly


def test_loss_comparison_can_fail(parts, native):
    """Negative controls: the same comparison fails on another order seed and on other weights (each a different
    sequence of batches from the same three components)."""
    ref = native[0]
    for other in (train_losses(parts, "compressed_cache", order_seed=2), train_losses(parts, weights=(3, 2, 1))):
        assert not np.allclose(other[0], ref, rtol=1e-6, atol=1e-9)


def within_order_spread(got, ref, spread, fraction=VIDEO_FRACTION):
    """(epoch, loss, |got - ref| / spread) wherever ``got`` is further from ``ref`` (same order) than ``fraction`` of
    the standard deviation other pass orders give (``spread``)."""
    ratio = np.abs(got - ref) / spread
    return [(e + 1, LOSSES[j], round(float(ratio[e, j]), 3)) for e, j in zip(*np.nonzero(ratio > fraction))]


def test_video_stream_losses_close_to_the_native_mixtures(parts, native):
    """``video_stream`` trains on the native mixture's batches but H.264-decoded frames: at every epoch and for every
    loss, its distance from native's curve (same order) must be under a tenth of the spread that the pass order alone
    gives (the standard deviation of native runs under ``ORDER_SEEDS``). Measured: the frames move the losses by
    1e-6 to 4e-4 relative, 0.4% of that spread at most; another order moves them by 1% to 280% of it. Negative control:
    ``video_stream`` with another order seed fails the same check."""
    others = np.stack([train_losses(parts, order_seed=s)[0] for s in ORDER_SEEDS])
    spread = others.std(0, ddof=1)
    got, _, units = train_losses(parts, "video_stream")
    ref = native_in_order_of(parts, got, units, native[0])
    bad = within_order_spread(got, ref, spread)
    assert not bad, f"video_stream losses further from native's than the order's spread allows: {bad}"
    shifted = train_losses(parts, "video_stream", order_seed=ORDER_SEEDS[0])[0]
    assert len(within_order_spread(shifted, ref, spread)) >= len(LOSSES), "the check cannot tell another order apart"
