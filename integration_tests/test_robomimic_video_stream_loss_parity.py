"""robomimic BC-RNN trained on image observations from video robo-shards (``video_stream``) gives the losses native
training gives, statistically.

Two things differ from native here, and the check must allow both and nothing else: the sample order (the pass is
ordered by the backend's episode buffer, as datapipe's) and the camera frames (H.264 at the default crf: lossy,
>= 35 dB PSNR, measured in test_robomimic_video_shards.py; every other value byte-identical). So, as in
test_robomimic_datapipe_loss_parity.py (reasoning there, statistics in loss_stats.py): K native runs with
robomimic's SequenceDataset and DataLoader, changing only the shuffle seed, give per epoch and loss the spread the
order alone causes; the mean of M video_stream runs must lie within the two-sample t interval (1% family-wise
error). The negative control (actions shuffled between the rows of each batch) must fail the same check.

The model sees the frames: a small conv encoder (ShallowConv + spatial softmax) on both 16x16 cameras next to the
end-effector and object state, so a decoding error that changes what the encoder sees (another episode's frames, a
shifted segment) changes the loss curves.
"""

import contextlib
import io

import numpy as np
import pytest
import torch
from loss_stats import pair_actions_wrongly, t_violations
from robomimic_helpers import LOW_DIM, RGB, make_config, obs_keys

from robo_loaders_plugin.robomimic import dataset_factory

LOSSES = ("L1_Loss", "L2_Loss", "Cosine_Loss")
K_NATIVE = 8
M_VIDEO = 3
EPOCHS = 6
FAMILY_ERROR = 0.01
BATCH = 16
LR = 4e-3  # learns within the 6 epochs, so the negative control has something to fail against


def train_losses(path, order_seed, backend=None, backend_kwargs=None, wrong_actions=False):
    """Per-epoch mean (L1, L2, cosine) of robomimic's run_epoch over full passes, model initialised from seed 0."""
    import robomimic.utils.file_utils as FileUtils
    import robomimic.utils.train_utils as TrainUtils
    from robomimic.algo import algo_factory

    cfg = make_config(
        path,
        rgb=RGB,
        low_dim=LOW_DIM,
        backend=backend,
        backend_kwargs=backend_kwargs,
        seq_length=5,
        batch_size=BATCH,
        num_data_workers=0,
        hdf5_cache_mode="low_dim",
    )
    with cfg.values_unlocked():
        cfg.algo.rnn.enabled = True
        cfg.algo.rnn.horizon = 5
        cfg.algo.rnn.hidden_dim = 32
        cfg.algo.actor_layer_dims = ()
        cfg.algo.optim_params.policy.learning_rate.initial = LR
        cfg.observation.encoder.rgb.core_kwargs.backbone_class = "ShallowConv"
        cfg.observation.encoder.rgb.core_kwargs.feature_dimension = 16
        cfg.train.cuda = False
    keys = obs_keys(cfg)
    torch.manual_seed(0)
    np.random.seed(0)
    meta = FileUtils.get_shape_metadata_from_dataset(dataset_path=path, all_obs_keys=keys, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        model = algo_factory(
            algo_name=cfg.algo_name,
            config=cfg,
            obs_key_shapes=meta["all_shapes"],
            ac_dim=meta["ac_dim"],
            device=torch.device("cpu"),
        )
        dataset = dataset_factory(cfg, keys)
    if wrong_actions:
        pair_actions_wrongly(dataset)
    torch.manual_seed(order_seed)  # native: RandomSampler draws its order from torch's global RNG
    loader = torch.utils.data.DataLoader(
        dataset, sampler=dataset.get_dataset_sampler(), batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True
    )
    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for epoch in range(1, EPOCHS + 1):
                log = TrainUtils.run_epoch(model=model, data_loader=loader, epoch=epoch)
                out.append([log[k] for k in LOSSES])
    finally:
        torch.set_num_threads(threads)
    return np.array(out)  # (EPOCHS, 3)


@pytest.fixture(scope="module")
def native_runs(tiny_hdf5):
    return np.stack([train_losses(tiny_hdf5, order_seed=100 + s) for s in range(K_NATIVE)])


@pytest.fixture(scope="module")
def shards(tiny_hdf5, tmp_path_factory):
    from robo_loaders_plugin.robomimic.convert import convert_robomimic
    from robo_loaders_plugin.storage.video import VideoSettings

    out = str(tmp_path_factory.mktemp("video") / "shards")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        convert_robomimic(tiny_hdf5, out, progress=False, video=VideoSettings())
    return out


def video_runs(path, shards, wrong_actions=False):
    return np.stack(
        [
            train_losses(path, 0, "video_stream", {"source": shards, "seed": 200 + s}, wrong_actions=wrong_actions)
            for s in range(M_VIDEO)
        ]
    )


def test_video_stream_losses_within_native_shuffle_spread(native_runs, tiny_hdf5, shards):
    assert native_runs[:, -1, 1].mean() < native_runs[:, 0, 1].mean() * 0.95  # it trained (images learn slowly)
    bad, t, _ = t_violations(native_runs, video_runs(tiny_hdf5, shards), LOSSES, FAMILY_ERROR)
    assert not bad, f"video_stream losses outside native's shuffle spread: {bad}\nt=\n{np.round(t, 2)}"


def test_check_fails_on_wrong_data(native_runs, tiny_hdf5, shards):
    """Negative control: the same check on batches whose actions are paired with the wrong rows fails."""
    bad, t, _ = t_violations(native_runs, video_runs(tiny_hdf5, shards, wrong_actions=True), LOSSES, FAMILY_ERROR)
    # measured: |t| on L2 grows from ~2 (epoch 2) to ~8 (epoch 6, critical value ~5.4) as native learns the pairing
    assert EPOCHS in {e for e, loss, _, _ in bad if loss == "L2_Loss"}, np.round(t, 2)
